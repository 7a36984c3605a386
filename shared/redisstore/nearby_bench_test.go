package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// BenchmarkNearbySearch compares the ring search (Store.Nearby, the match function's query, COUNT
// 10) with one GEOSEARCH of the whole radius (BYRADIUS ASC COUNT 10) at radii of 250 and 1000 m
// around real NYC pickups, for fleets of 10k, 100k and 1M available drivers within 150 m of
// pickups (1M skipped with -short). in_radius is the mean number of drivers inside the radius, all
// of which one GEOSEARCH visits; redis_us/op is Redis's own command time per search (INFO
// commandstats: EVALSHA for the rings, GEOSEARCH for the bare search), which the client's round
// trip on a loaded machine hides.
func BenchmarkNearbySearch(b *testing.B) {
	s, prefix := benchStore(b)
	geo := prefix + "geo:available" // the key layout documented in store.go
	pickups := benchPickups(b)
	ctx := context.Background()
	rdb := s.Client()
	seeded := 0
	for _, fleet := range []int{10_000, 100_000, 1_000_000} {
		if fleet > 100_000 && testing.Short() {
			continue
		}
		seedFleet(b, s, pickups, seeded, fleet)
		seeded = fleet
		for _, radius := range []float64{250, 1000} {
			inRadius := 0
			const probes = 50
			for i := range probes {
				p := pickups[(i*7919)%len(pickups)]
				n, err := rdb.GeoSearch(ctx, geo, &redis.GeoSearchQuery{
					Longitude: p.Lng, Latitude: p.Lat, Radius: radius, RadiusUnit: "m",
				}).Result()
				if err != nil {
					b.Fatal(err)
				}
				inRadius += len(n)
			}
			for _, how := range []string{"rings", "one-geosearch"} {
				b.Run(fmt.Sprintf("drivers=%dk/radius=%.0fm/%s", fleet/1000, radius, how), func(b *testing.B) {
					cmd := map[string]string{"rings": "evalsha", "one-geosearch": "geosearch"}[how]
					us0, calls0 := commandTime(b, rdb, cmd)
					hits := 0
					b.ResetTimer()
					for i := range b.N {
						p := pickups[(i*7919)%len(pickups)]
						if how == "rings" {
							h, err := s.Nearby(ctx, p, radius, 10)
							if err != nil {
								b.Fatal(err)
							}
							hits += len(h)
							continue
						}
						h, err := rdb.GeoSearchLocation(ctx, geo, &redis.GeoSearchLocationQuery{
							GeoSearchQuery: redis.GeoSearchQuery{Longitude: p.Lng, Latitude: p.Lat, Radius: radius, RadiusUnit: "m", Sort: "ASC", Count: 10},
							WithCoord:      true, WithDist: true,
						}).Result()
						if err != nil {
							b.Fatal(err)
						}
						hits += len(h)
					}
					b.StopTimer()
					us1, calls1 := commandTime(b, rdb, cmd)
					if calls1 > calls0 {
						b.ReportMetric(float64(us1-us0)/float64(calls1-calls0), "redis_us/op")
					}
					b.ReportMetric(float64(hits)/float64(b.N), "hits/op")
					b.ReportMetric(float64(inRadius)/probes, "in_radius")
				})
			}
		}
	}
}

// commandTime returns Redis's total microseconds and calls of command cmd (INFO commandstats).
func commandTime(b *testing.B, rdb redis.UniversalClient, cmd string) (usec, calls int64) {
	b.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":")
		if !ok {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "usec":
				usec = n
			case "calls":
				calls = n
			}
		}
	}
	return usec, calls
}
