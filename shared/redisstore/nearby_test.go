package redisstore_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// TestNearbyRingsMatchOneFullSearch checks the ring search (redisstore.Nearby) against one
// GEOSEARCH of the whole radius, the answer it must reproduce: for dense, sparse and empty
// neighbourhoods, small and large counts, the same drivers at the same distances in the same order.
func TestNearbyRingsMatchOneFullSearch(t *testing.T) {
	rdb, prefix := testkit.Redis(t)
	s := redisstore.New(rdb, prefix, 30*time.Second, 55)
	ctx := context.Background()
	geo := prefix + "geo:available" // the layout documented in store.go
	rng := rand.New(rand.NewPCG(1, 2))
	// A dense cluster in Midtown (2,000 drivers within ~300 m), a sparse scatter over 20 km, and
	// nobody east of Queens.
	var members []redis.GeoLocation
	for i := range 2000 {
		p := offsetM(midtown, rng.NormFloat64()*150, rng.NormFloat64()*150)
		members = append(members, redis.GeoLocation{Name: fmt.Sprintf("dense-%d", i), Latitude: p.Lat, Longitude: p.Lng})
	}
	for i := range 300 {
		p := offsetM(midtown, (rng.Float64()-0.5)*20000, (rng.Float64()-0.5)*20000)
		members = append(members, redis.GeoLocation{Name: fmt.Sprintf("sparse-%d", i), Latitude: p.Lat, Longitude: p.Lng})
	}
	for i := 0; i < len(members); i += 500 {
		chunk := members[i:min(i+500, len(members))]
		ptrs := make([]*redis.GeoLocation, len(chunk))
		for k := range chunk {
			ptrs[k] = &chunk[k]
		}
		if err := rdb.GeoAdd(ctx, geo, ptrs...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	centres := []dispatch.Point{midtown, soho, offsetM(midtown, 0, 7000), {Lat: 40.70, Lng: -73.60}}
	for range 20 {
		centres = append(centres, offsetM(midtown, (rng.Float64()-0.5)*16000, (rng.Float64()-0.5)*16000))
	}
	checked, multiRing := 0, 0
	for _, c := range centres {
		for _, radius := range []float64{30, 250, 1000, 8000} {
			for _, count := range []int{1, 10, 50} {
				got, err := s.Nearby(ctx, c, radius, count)
				if err != nil {
					t.Fatal(err)
				}
				want, err := rdb.GeoSearchLocation(ctx, geo, &redis.GeoSearchLocationQuery{
					GeoSearchQuery: redis.GeoSearchQuery{Longitude: c.Lng, Latitude: c.Lat, Radius: radius,
						RadiusUnit: "m", Sort: "ASC", Count: count},
					WithCoord: true, WithDist: true,
				}).Result()
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != len(want) {
					t.Fatalf("Nearby(%v, %.0f m, %d) returned %d drivers, one full GEOSEARCH %d", c, radius, count, len(got), len(want))
				}
				for i := range got {
					if got[i].DriverID != want[i].Name || math.Abs(got[i].DistanceM-want[i].Dist) > 0.01 ||
						math.Abs(got[i].Position.Lat-want[i].Latitude) > 1e-6 || math.Abs(got[i].Position.Lng-want[i].Longitude) > 1e-6 {
						t.Fatalf("Nearby(%v, %.0f m, %d)[%d] = %+v, full search %+v", c, radius, count, i, got[i], want[i])
					}
				}
				if radius > redisstore.RingStartM && len(got) < count {
					multiRing++ // the search had to widen to the full radius and still found fewer
				}
				checked++
			}
		}
	}
	if multiRing == 0 {
		t.Fatal("no query needed more than one ring: the test does not exercise widening")
	}
	t.Logf("%d queries identical to one full GEOSEARCH (%d widened to the full radius)", checked, multiRing)
}

// offsetM moves p by north and east metres (small offsets).
func offsetM(p dispatch.Point, north, east float64) dispatch.Point {
	const mPerDeg = 111_320.0
	return dispatch.Point{Lat: p.Lat + north/mPerDeg, Lng: p.Lng + east/(mPerDeg*math.Cos(p.Lat*math.Pi/180))}
}
