package redisstore_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"
)

// BenchmarkNearbySearch measures Store.Nearby (GEOSEARCH BYRADIUS ASC COUNT 10, the match
// function's query) at radii of 500, 1000 and 3000 m around real NYC pickups, for fleets of 10k,
// 30k and 100k available drivers (100k skipped with -short). in_radius is the mean number of
// drivers inside the radius: Redis visits all of them before sorting, so COUNT bounds the reply,
// not the work.
func BenchmarkNearbySearch(b *testing.B) {
	s, prefix := benchStore(b)
	geo := prefix + "geo:available" // the key layout documented in store.go
	pickups := benchPickups(b)
	ctx := context.Background()
	seeded := 0
	for _, fleet := range []int{10_000, 30_000, 100_000} {
		if fleet > 30_000 && testing.Short() {
			continue
		}
		seedFleet(b, s, pickups, seeded, fleet)
		seeded = fleet
		for _, radius := range []float64{500, 1000, 3000} {
			inRadius := 0
			const probes = 50
			for i := range probes {
				p := pickups[(i*7919)%len(pickups)]
				n, err := s.Client().GeoSearch(ctx, geo, &redis.GeoSearchQuery{
					Longitude: p.Lng, Latitude: p.Lat, Radius: radius, RadiusUnit: "m",
				}).Result()
				if err != nil {
					b.Fatal(err)
				}
				inRadius += len(n)
			}
			b.Run(fmt.Sprintf("drivers=%dk/radius=%.0fm", fleet/1000, radius), func(b *testing.B) {
				hits := 0
				b.ResetTimer()
				for i := range b.N {
					h, err := s.Nearby(ctx, pickups[(i*7919)%len(pickups)], radius, 10)
					if err != nil {
						b.Fatal(err)
					}
					hits += len(h)
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "searches/s")
				b.ReportMetric(float64(hits)/float64(b.N), "hits/op")
				b.ReportMetric(float64(inRadius)/probes, "in_radius")
			})
		}
	}
}
