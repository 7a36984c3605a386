package dispatch_test

// Micro-benchmarks of validation, scoring and the fare estimate (pure CPU, no I/O), run by
// `make bench` with -benchmem:
//
//	go test -run '^$' -bench . -benchmem ./shared/dispatch/

import (
	"strconv"
	"testing"
	"time"

	"github.com/flagdown/flagdown/shared/dispatch"
)

var sink any

func BenchmarkValidateID(b *testing.B) {
	b.ReportAllocs()
	for range b.N {
		sink = dispatch.ValidateID("driver_id", "driver-7f3a9c2e-41b8")
	}
}

func BenchmarkValidatePoint(b *testing.B) {
	b.ReportAllocs()
	p := dispatch.Point{Lat: 40.7569, Lng: -73.9903}
	for range b.N {
		sink = dispatch.ValidatePoint("", p)
	}
}

func BenchmarkValidateRidePoint(b *testing.B) {
	b.ReportAllocs()
	p := dispatch.Point{Lat: 40.7569, Lng: -73.9903}
	area := dispatch.Area{MinLat: 40.40, MinLng: -74.40, MaxLat: 41.10, MaxLng: -73.50}
	for range b.N {
		sink = dispatch.ValidateRidePoint("pickup", p, area)
	}
}

func BenchmarkValidateText(b *testing.B) {
	b.ReportAllocs()
	key := "3f1c2a8e-9d41-4e0b-a7c6-2b8d9e1f4a70"
	for range b.N {
		sink = dispatch.ValidateText("Idempotency-Key", key, 128)
	}
}

func benchParams() dispatch.ScoreParams {
	return dispatch.ScoreParams{IdleBonusMPerMin: 50, IdleCapMin: 20, RatingBonusM: 300, DefaultRating: 4.7,
		MissPenaltyM: 250, MissMemory: 30 * time.Minute}
}

func BenchmarkScore(b *testing.B) {
	b.ReportAllocs()
	p := benchParams()
	c := dispatch.Candidate{DriverID: "d-1", DistanceM: 412, Rating: 4.9, IdleS: 340, Missed: 1, MissedAt: time.Now()}
	var s float64
	for range b.N {
		s += dispatch.Score(p, c)
	}
	sink = s
}

// BenchmarkRank ranks the 10 candidates one GEOSEARCH returns (FLAGDOWN_SEARCH_COUNT).
func BenchmarkRank(b *testing.B) {
	b.ReportAllocs()
	p := benchParams()
	base := make([]dispatch.Candidate, 10)
	for i := range base {
		base[i] = dispatch.Candidate{DriverID: "d-" + strconv.Itoa(i), DistanceM: float64(900 - 83*i), Rating: 4 + float64(i%10)/10, IdleS: float64(60 * i)}
	}
	cs := make([]dispatch.Candidate, len(base))
	for range b.N {
		copy(cs, base)
		dispatch.Rank(p, cs)
	}
}

func BenchmarkEstimateFare(b *testing.B) {
	b.ReportAllocs()
	p := dispatch.FareParams{BaseCents: 300, PerKmCents: 175, PerMinCents: 50, MinimumCents: 800, RoadFactor: 1.3, AvgSpeedMPS: 7}
	from, to := dispatch.Point{Lat: 40.7569, Lng: -73.9903}, dispatch.Point{Lat: 40.7128, Lng: -73.9961}
	for range b.N {
		sink = dispatch.EstimateFare(p, from, to)
	}
}
