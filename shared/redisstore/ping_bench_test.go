package redisstore_test

// Benchmarks of the Redis hot paths against the real Redis (testkit: own key prefix). Run with:
//
//	go test -run '^$' -bench . -benchtime=2s ./shared/redisstore/

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// benchPickups returns the pickup positions of the real trips in testdata/trips.csv.
func benchPickups(b *testing.B) []dispatch.Point {
	var out []dispatch.Point
	for _, t := range testkit.Trips(b) {
		out = append(out, t.Pickup)
	}
	return out
}

// benchStore returns a store over a fresh key prefix, and that prefix.
func benchStore(b *testing.B) (*redisstore.Store, string) {
	b.Helper()
	rdb, prefix := testkit.Redis(b)
	return redisstore.New(rdb, prefix, 30*time.Second, 55), prefix
}

// moveM returns p moved dy metres north and dx metres east.
func moveM(p dispatch.Point, dy, dx float64) dispatch.Point {
	const mPerDeg = dispatch.EarthRadiusM * math.Pi / 180
	return dispatch.Point{Lat: p.Lat + dy/mPerDeg, Lng: p.Lng + dx/(mPerDeg*math.Cos(p.Lat*math.Pi/180))}
}

// benchDriver is a simulated driver: where he is, where he heads, and his device clock.
type benchDriver struct {
	id      string
	pos     dispatch.Point
	heading float64 // radians clockwise from north
	at      time.Time
}

// step moves d as one 4-second ping interval at 5..12 m/s with a gentle turn: always far below the
// GPS-jump threshold (55 m/s × 4 s + 50 m).
func (d *benchDriver) step(rng *rand.Rand) redisstore.Ping {
	d.heading += (rng.Float64() - 0.5) * 0.6
	dist := (5 + 7*rng.Float64()) * 4
	d.pos = moveM(d.pos, dist*math.Cos(d.heading), dist*math.Sin(d.heading))
	d.at = d.at.Add(4 * time.Second)
	return redisstore.Ping{DriverID: d.id, Position: d.pos, At: d.at, Status: dispatch.DriverAvailable}
}

// seedFleet creates drivers from..n-1 (d-<i>) within 150 m of real pickups with one ping each,
// in ApplyPings batches of 500 from four writers.
func seedFleet(b *testing.B, s *redisstore.Store, pickups []dispatch.Point, from, n int) []*benchDriver {
	b.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(uint64(from), uint64(n)))
	start := time.Now().Add(-time.Hour)
	ds := make([]*benchDriver, 0, n-from)
	for i := from; i < n; i++ {
		ds = append(ds, &benchDriver{
			id:      "d-" + strconv.Itoa(i),
			pos:     moveM(pickups[i%len(pickups)], rng.Float64()*300-150, rng.Float64()*300-150),
			heading: rng.Float64() * 2 * math.Pi, at: start,
		})
	}
	chunks := make(chan []*benchDriver)
	var wg sync.WaitGroup
	var failed atomic.Value
	for range 4 {
		wg.Go(func() {
			for c := range chunks {
				pings := make([]redisstore.Ping, len(c))
				for i, d := range c {
					pings[i] = redisstore.Ping{DriverID: d.id, Position: d.pos, At: d.at, Status: dispatch.DriverAvailable}
				}
				if _, err := s.ApplyPings(ctx, pings); err != nil {
					failed.Store(err)
				}
			}
		})
	}
	for i := 0; i < len(ds); i += 500 {
		chunks <- ds[i:min(i+500, len(ds))]
	}
	close(chunks)
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatalf("seed fleet: %v", err)
	}
	return ds
}

// applyChecked applies pings and fails unless every one was applied (no stale ping, no GPS jump).
func applyChecked(ctx context.Context, b *testing.B, s *redisstore.Store, pings []redisstore.Ping) bool {
	res, err := s.ApplyPings(ctx, pings)
	if err != nil {
		b.Errorf("ApplyPings: %v", err)
		return false
	}
	for i, r := range res {
		if !r.Applied {
			b.Errorf("ping %s rejected: %s", pings[i].DriverID, r.Rejected)
			return false
		}
	}
	return true
}

// BenchmarkApplyPings measures ApplyPings (one pipelined round trip of ping scripts) for batches
// of 1 to 500 pings over a fleet of 32k available drivers moving plausibly around real NYC pickups.
// pings/s is the figure to compare with the 75k writes/s requirement (300k drivers every 4 s).
// The parallel variant runs 16 writers, each over its own drivers.
func BenchmarkApplyPings(b *testing.B) {
	const fleet, chunks = 32_000, 32
	s, _ := benchStore(b)
	ds := seedFleet(b, s, benchPickups(b), 0, fleet)
	ctx := context.Background()
	for _, batch := range []int{1, 50, 200, 500} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, uint64(batch)))
			pings := make([]redisstore.Ping, batch)
			next := 0
			b.ResetTimer()
			for range b.N {
				for j := range pings {
					pings[j] = ds[next].step(rng)
					next = (next + 1) % len(ds)
				}
				if !applyChecked(ctx, b, s, pings) {
					return
				}
			}
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "pings/s")
		})
	}
	for _, batch := range []int{1, 50, 200, 500} {
		b.Run(fmt.Sprintf("parallel/batch=%d", batch), func(b *testing.B) {
			var chunk atomic.Int64
			b.SetParallelism(8) // 16 writers on 2 cores; each owns fleet/32 drivers
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				c := int(chunk.Add(1) - 1)
				mine := ds[c*fleet/chunks : (c+1)*fleet/chunks]
				rng := rand.New(rand.NewPCG(uint64(c), uint64(batch)))
				pings := make([]redisstore.Ping, batch)
				next := 0
				for pb.Next() {
					for j := range pings {
						pings[j] = mine[next].step(rng)
						next = (next + 1) % len(mine)
					}
					if !applyChecked(ctx, b, s, pings) {
						return
					}
				}
			})
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "pings/s")
		})
	}
}
