package function_test

// Benchmarks of one match against the real Redis and PostgreSQL (testkit: own schema and key
// prefix). Run with:
//
//	go test -run '^$' -bench Match -benchtime=2s ./functions/match/

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flagdown/flagdown/events"
	match "github.com/flagdown/flagdown/functions/match"
	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/app"
	"github.com/flagdown/flagdown/shared/cloudevent"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/pgstore"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// offsetM returns p moved dy metres north and dx metres east.
func offsetM(p dispatch.Point, dy, dx float64) dispatch.Point {
	const mPerDeg = dispatch.EarthRadiusM * math.Pi / 180
	return dispatch.Point{Lat: p.Lat + dy/mPerDeg, Lng: p.Lng + dx/(mPerDeg*math.Cos(p.Lat*math.Pi/180))}
}

// seedDrivers brings the fleet to n alive, available drivers d-<i>, each within 150 m of a real
// pickup position, through ApplyPings in batches of 500 (four writers).
func seedDrivers(b *testing.B, s *redisstore.Store, trips []testkit.Trip, from, n int) {
	b.Helper()
	ctx := context.Background()
	const batch = 500
	starts := make(chan int)
	var wg sync.WaitGroup
	var failed atomic.Value
	for w := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(from), uint64(w)))
			for start := range starts {
				pings := make([]redisstore.Ping, 0, batch)
				for i := start; i < min(start+batch, n); i++ {
					p := offsetM(trips[i%len(trips)].Pickup, rng.Float64()*300-150, rng.Float64()*300-150)
					pings = append(pings, redisstore.Ping{DriverID: "d-" + strconv.Itoa(i), Position: p,
						At: time.Now(), Status: dispatch.DriverAvailable})
				}
				if _, err := s.ApplyPings(ctx, pings); err != nil {
					failed.Store(err)
				}
			}
		})
	}
	for start := from; start < n; start += batch {
		starts <- start
	}
	close(starts)
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatalf("seed drivers: %v", err)
	}
}

// createRides inserts n REQUESTED rides (unique riders, real pickups and dropoffs) in chunks of
// 500 per transaction and returns their ids.
func createRides(b *testing.B, db *pgstore.DB, trips []testkit.Trip, n int) []string {
	b.Helper()
	ctx := context.Background()
	ids := make([]string, 0, n)
	for len(ids) < n {
		err := db.Tx(ctx, func(tx pgx.Tx) error {
			for range min(500, n-len(ids)) {
				t := trips[rand.IntN(len(trips))]
				r := &dispatch.Ride{ID: uuid.NewString(), RiderID: "rider-" + uuid.NewString(), Status: dispatch.RideRequested,
					Pickup: t.Pickup, Dropoff: t.Dropoff, FareEstimateCents: 1500, EstDistanceM: 3000, EstDurationS: 600}
				if err := pgstore.InsertRide(ctx, tx, r, ""); err != nil {
					return err
				}
				ids = append(ids, r.ID)
			}
			return nil
		})
		if err != nil {
			b.Fatalf("create rides: %v", err)
		}
	}
	return ids
}

// requested builds the ride.requested CloudEvent of rideID.
func requested(b *testing.B, rideID string) event.Event {
	ce, err := cloudevent.New("evt-"+uuid.NewString(), events.RideRequested, "/flagdown/order-create", rideID,
		events.RideRequestedData{RideID: rideID, RiderID: "bench", RequestedAt: time.Now().UTC()}, time.Time{})
	if err != nil {
		b.Fatalf("build event: %v", err)
	}
	return ce
}

// freeOffered releases the offer lock of the driver offered rideID (with requeue), so he is back
// in the available set and the fleet size stays constant. It returns false when nobody was offered.
func freeOffered(ctx context.Context, d *app.Deps, rideID string) (bool, error) {
	var driver string
	err := d.DB.Pool.QueryRow(ctx, `SELECT coalesce(max(driver_id), '') FROM offers WHERE ride_id = $1 AND status = 'PENDING'`, rideID).Scan(&driver)
	if err != nil || driver == "" {
		return false, err
	}
	o, err := d.Redis.OfferLock(ctx, driver)
	if err != nil || o == nil {
		return false, err
	}
	_, err = d.Redis.ReleaseOffer(ctx, driver, o.OfferID, true)
	return err == nil, err
}

// reportLatency reports p50_ms and p99_ms of lat.
func reportLatency(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	q := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(math.Ceil(p*float64(len(lat))))-1)]) / 1e6
	}
	b.ReportMetric(q(0.50), "p50_ms")
	b.ReportMetric(q(0.99), "p99_ms")
}

// benchFleets are the fleet sizes matched against; 100k is skipped with -short.
var benchFleets = []int{1_000, 10_000, 30_000, 100_000}

// BenchmarkMatch measures one match (match.Function.Handle on a ride.requested event for a
// REQUESTED ride) against fleets of 1k to 100k alive, available drivers placed around real NYC
// pickup positions. Sequential ops report p50/p99 of Handle alone; the parallel variant (16
// concurrent matches on 2 cores) includes freeing the offered driver in each op.
func BenchmarkMatch(b *testing.B) {
	trips := testkit.Trips(b)
	d := testkit.Deps(b, func(c *config.Config) {
		c.HeartbeatTTL = 2 * time.Hour // the fleet stays alive for the whole run
		c.OfferWindow = time.Minute
	})
	fn := match.New(d)
	ctx := context.Background()
	seeded := 0
	for _, fleet := range benchFleets {
		if fleet > 30_000 && testing.Short() {
			continue
		}
		start := time.Now()
		seedDrivers(b, d.Redis, trips, seeded, fleet)
		seeded = fleet
		b.Logf("seeded %d drivers in %v", fleet, time.Since(start).Round(time.Millisecond))

		b.Run(fmt.Sprintf("drivers=%dk", fleet/1000), func(b *testing.B) {
			rides := createRides(b, d.DB, trips, b.N)
			evs := make([]event.Event, b.N)
			for i, id := range rides {
				evs[i] = requested(b, id)
			}
			lat := make([]time.Duration, 0, b.N)
			offered := 0
			b.ResetTimer()
			for i := range b.N {
				t0 := time.Now()
				out, err := fn.Handle(ctx, evs[i])
				lat = append(lat, time.Since(t0))
				if err != nil {
					b.Fatalf("match: %v", err)
				}
				b.StopTimer()
				if out == match.OutcomeOffered {
					offered++
					if _, err := freeOffered(ctx, d, rides[i]); err != nil {
						b.Fatalf("free driver: %v", err)
					}
				}
				b.StartTimer()
			}
			b.StopTimer()
			reportLatency(b, lat)
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "matches/s")
			b.ReportMetric(100*float64(offered)/float64(b.N), "offered_%")
		})

		b.Run(fmt.Sprintf("parallel/drivers=%dk", fleet/1000), func(b *testing.B) {
			rides := createRides(b, d.DB, trips, b.N)
			evs := make([]event.Event, b.N)
			for i, id := range rides {
				evs[i] = requested(b, id)
			}
			var next, offered atomic.Int64
			var mu sync.Mutex
			var lat []time.Duration
			b.SetParallelism(8)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				mine := make([]time.Duration, 0, 256)
				for pb.Next() {
					i := next.Add(1) - 1
					t0 := time.Now()
					out, err := fn.Handle(ctx, evs[i])
					mine = append(mine, time.Since(t0))
					if err != nil {
						b.Errorf("match: %v", err)
						return
					}
					if out == match.OutcomeOffered {
						offered.Add(1)
						if _, err := freeOffered(ctx, d, rides[i]); err != nil {
							b.Errorf("free driver: %v", err)
							return
						}
					}
				}
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			})
			b.StopTimer()
			reportLatency(b, lat)
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "matches/s")
			b.ReportMetric(100*float64(offered.Load())/float64(b.N), "offered_%")
		})
	}
}
