package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/flagdown/flagdown/events"
	match "github.com/flagdown/flagdown/functions/match"
	"github.com/flagdown/flagdown/shared/app"
	"github.com/flagdown/flagdown/shared/cloudevent"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/pgstore"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// matchConcurrency is the number of concurrent matches of the concurrent variant.
const matchConcurrency = 16

// seedFleet brings the fleet to n alive, available drivers d-<i> (i from from), each within 150 m
// of a real pickup, through ApplyPings in batches of 500 from four writers.
func (r *runner) seedFleet(ctx context.Context, s *redisstore.Store, from, n int) error {
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
					p := offsetM(point(r.pick(i).Pickup), rng.Float64()*300-150, rng.Float64()*300-150)
					pings = append(pings, redisstore.Ping{DriverID: "d-" + strconv.Itoa(i), Position: p, At: time.Now(), Status: dispatch.DriverAvailable})
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
		return fmt.Errorf("seed fleet: %w", err)
	}
	return nil
}

// createRides inserts n REQUESTED rides at real pickups (unique riders) and returns them.
func (r *runner) createRides(ctx context.Context, db *pgstore.DB, n int) ([]*dispatch.Ride, error) {
	out := make([]*dispatch.Ride, 0, n)
	for len(out) < n {
		err := db.Tx(ctx, func(tx pgx.Tx) error {
			for range min(500, n-len(out)) {
				t := r.trips[rand.IntN(len(r.trips))]
				ride := &dispatch.Ride{ID: uuid.NewString(), RiderID: "rider-" + uuid.NewString(), Status: dispatch.RideRequested,
					Pickup: point(t.Pickup), Dropoff: point(t.Dropoff), FareEstimateCents: 1500, EstDistanceM: 3000, EstDurationS: 600}
				if err := pgstore.InsertRide(ctx, tx, ride, ""); err != nil {
					return err
				}
				out = append(out, ride)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("create rides: %w", err)
		}
	}
	return out, nil
}

// requested is the ride.requested CloudEvent of ride.
func requested(ride *dispatch.Ride) (event.Event, error) {
	return cloudevent.New("evt-"+uuid.NewString(), events.RideRequested, "/flagdown/order-create", ride.ID,
		events.RideRequestedData{RideID: ride.ID, RiderID: ride.RiderID, RequestedAt: time.Now().UTC()}, time.Time{})
}

// freeOffered releases the offer lock of the driver offered rideID (requeued), so the fleet stays
// the same size.
func freeOffered(ctx context.Context, d *app.Deps, rideID string) error {
	var driver string
	err := d.DB.Pool.QueryRow(ctx, `SELECT coalesce(max(driver_id), '') FROM offers WHERE ride_id = $1 AND status = 'PENDING'`, rideID).Scan(&driver)
	if err != nil || driver == "" {
		return err
	}
	o, err := d.Redis.OfferLock(ctx, driver)
	if err != nil || o == nil {
		return err
	}
	_, err = d.Redis.ReleaseOffer(ctx, driver, o.OfferID, true)
	return err
}

// usedMemory returns Redis's INFO memory used_memory, bytes.
func usedMemory(ctx context.Context, d *app.Deps) (int64, error) {
	info, err := d.Redis.Client().InfoMap(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(info["Memory"]["used_memory"], 10, 64)
}

// match measures match latency (match.Function.Handle on ride.requested) at growing fleets,
// sequential and concurrent, beside a bare GEOSEARCH of the first radius, and Redis bytes per
// online driver.
func (r *runner) match(ctx context.Context) error {
	st, err := r.openStage(ctx, func(c *config.Config) {
		c.HeartbeatTTL = 2 * time.Hour // the fleet stays alive for the whole stage
		c.OfferWindow = time.Minute
	})
	if err != nil {
		return err
	}
	defer st.close()
	d := st.deps
	fleets, seqN, parN := r.o.Fleets, 300, 480
	if len(fleets) == 0 {
		fleets = []int{1_000, 10_000, 100_000, 1_000_000}
		if r.o.Quick {
			fleets = []int{1_000, 10_000}
		}
	}
	if r.o.Quick {
		seqN, parN = 20, 32
	}
	rdb := d.Redis.Client()
	prefix := st.cfg.RedisPrefix

	// Ceiling of memory: the same members in a bare GEO set (the index alone), measured with
	// MEMORY USAGE of that one key (every element counted): an INFO used_memory delta on a Redis
	// other clients use moves with what they write or free meanwhile (a loaded test run measured
	// it negative).
	geoN := min(100_000, fleets[len(fleets)-1])
	rawKey := prefix + "rawgeo"
	for i := 0; i < geoN; i += 1000 {
		pipe := rdb.Pipeline()
		for j := i; j < min(i+1000, geoN); j++ {
			p := point(r.pick(j).Pickup)
			pipe.GeoAdd(ctx, rawKey, &redis.GeoLocation{Name: "d-" + strconv.Itoa(j), Longitude: p.Lng, Latitude: p.Lat})
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
	}
	rawBytes, err := rdb.MemoryUsage(ctx, rawKey, 0).Result()
	if err != nil {
		return err
	}
	rdb.Unlink(ctx, rawKey)
	rawPerMember := float64(rawBytes) / float64(geoN)
	time.Sleep(200 * time.Millisecond) // let the lazy free finish before the next baseline

	fn := match.New(d)
	base, err := usedMemory(ctx, d)
	if err != nil {
		return err
	}
	seeded := 0
	var perDriver float64
	for _, fleet := range fleets {
		t0 := time.Now()
		if err := r.seedFleet(ctx, d.Redis, seeded, fleet); err != nil {
			return err
		}
		seeded = fleet
		used, err := usedMemory(ctx, d)
		if err != nil {
			return err
		}
		perDriver = float64(used-base) / float64(fleet)
		r.log.Info("fleet seeded", "drivers", fleet, "took", time.Since(t0).Round(time.Millisecond), "B/driver", int(perDriver))

		rides, err := r.createRides(ctx, d.DB, seqN+parN)
		if err != nil {
			return err
		}
		// Ceiling: one bare GEOSEARCH of the first radius at the same pickups (the search before
		// rings); beside it the ring search the match function runs (Store.Nearby).
		radius, count := st.cfg.SearchRadiiM[0], st.cfg.SearchCount
		bare := func(ctx context.Context, p dispatch.Point) error {
			return rdb.GeoSearchLocation(ctx, prefix+"geo:available", &redis.GeoSearchLocationQuery{
				GeoSearchQuery: redis.GeoSearchQuery{Longitude: p.Lng, Latitude: p.Lat, Radius: radius, RadiusUnit: "m", Sort: "ASC", Count: count},
				WithCoord:      true, WithDist: true,
			}).Err()
		}
		rings := func(ctx context.Context, p dispatch.Point) error {
			_, err := d.Redis.Nearby(ctx, p, radius, count)
			return err
		}
		// Sequential, one search kind at a time, so Redis's command time per search can be told apart.
		seqRun := func(search func(context.Context, dispatch.Point) error) ([]float64, float64, error) {
			out := make([]float64, 0, seqN)
			c0 := snapshot(ctx, rdb)
			for _, ride := range rides[:seqN] {
				t := time.Now()
				if err := search(ctx, ride.Pickup); err != nil {
					return nil, 0, err
				}
				out = append(out, durMs(time.Since(t)))
			}
			_, redisUs := per(c0, snapshot(ctx, rdb), float64(seqN))
			return out, redisUs, nil
		}
		geoSeq, geoUs, err := seqRun(bare)
		if err != nil {
			return err
		}
		ringSeq, ringUs, err := seqRun(rings)
		if err != nil {
			return err
		}
		var next, rnext atomic.Int64
		geoPar, err := concurrentMs(ctx, matchConcurrency, parN, func(ctx context.Context) error {
			return bare(ctx, rides[seqN+int(next.Add(1)-1)%parN].Pickup)
		})
		if err != nil {
			return err
		}
		ringPar, err := concurrentMs(ctx, matchConcurrency, parN, func(ctx context.Context) error {
			return rings(ctx, rides[seqN+int(rnext.Add(1)-1)%parN].Pickup)
		})
		if err != nil {
			return err
		}
		for _, v := range []struct {
			how       string
			ring, geo []float64
			note      string
		}{
			{"sequential", ringSeq, geoSeq, fmt.Sprintf("; Redis command time per search %.1f µs (one GEOSEARCH %.1f µs; every client's commands)", ringUs, geoUs)},
			{fmt.Sprintf("%d concurrent", matchConcurrency), ringPar, geoPar, ""},
		} {
			r.rep.add(Row{Section: "match", Name: fmt.Sprintf("candidate search p99, %s, %s drivers", v.how, fleetName(fleet)), Value: quantile(v.ring, 0.99), Unit: "ms",
				Ceiling: fmt.Sprintf("one GEOSEARCH %.0f m COUNT %d p99", radius, count), CeilingValue: quantile(v.geo, 0.99),
				Note: fmt.Sprintf("Store.Nearby: rings from %d m up to %.0f m, sized by the density seen; p50 %.2f ms (one GEOSEARCH %.2f ms)%s",
					redisstore.RingStartM, radius, quantile(v.ring, 0.5), quantile(v.geo, 0.5), v.note)})
		}

		seq := make([]float64, 0, seqN)
		offered := 0
		for _, ride := range rides[:seqN] {
			ev, err := requested(ride)
			if err != nil {
				return err
			}
			t := time.Now()
			out, err := fn.Handle(ctx, ev)
			seq = append(seq, durMs(time.Since(t)))
			if err != nil {
				return fmt.Errorf("match: %w", err)
			}
			if out == match.OutcomeOffered {
				offered++
				if err := freeOffered(ctx, d, ride.ID); err != nil {
					return err
				}
			}
		}
		var pnext, poffered atomic.Int64
		par, err := concurrentMs(ctx, matchConcurrency, parN, func(ctx context.Context) error {
			ride := rides[seqN+int(pnext.Add(1)-1)]
			ev, err := requested(ride)
			if err != nil {
				return err
			}
			t := time.Now()
			out, err := fn.Handle(ctx, ev)
			if err != nil {
				return fmt.Errorf("match: %w", err)
			}
			el := time.Since(t)
			if out == match.OutcomeOffered {
				poffered.Add(1)
				if err := freeOffered(ctx, d, ride.ID); err != nil {
					return err
				}
			}
			return timed(ctx, el)
		})
		if err != nil {
			return err
		}
		name := fleetName(fleet)
		rowSeq := Row{Section: "match", Name: fmt.Sprintf("match p99, sequential, %s drivers", name), Value: quantile(seq, 0.99), Unit: "ms",
			Ceiling: fmt.Sprintf("GEOSEARCH %.0f m COUNT %d p99", radius, count), CeilingValue: quantile(geoSeq, 0.99),
			Note: fmt.Sprintf("p50 %.2f ms (GEOSEARCH %.2f ms); %d matches, %.0f%% offered", quantile(seq, 0.5), quantile(geoSeq, 0.5), seqN, 100*float64(offered)/float64(seqN))}
		if fleet == 1_000_000 {
			rowSeq.Target, rowSeq.Met = "p99 ≤ 2 ms", met(quantile(seq, 0.99) <= 2)
		}
		r.rep.add(rowSeq)
		rowPar := Row{Section: "match", Name: fmt.Sprintf("match p99, %d concurrent, %s drivers", matchConcurrency, name), Value: quantile(par, 0.99), Unit: "ms",
			Ceiling: fmt.Sprintf("GEOSEARCH p99, %d concurrent", matchConcurrency), CeilingValue: quantile(geoPar, 0.99),
			Note: fmt.Sprintf("p50 %.2f ms (GEOSEARCH %.2f ms); %d matches, %.0f%% offered", quantile(par, 0.5), quantile(geoPar, 0.5), parN, 100*float64(poffered.Load())/float64(parN))}
		if fleet == 100_000 {
			rowPar.Target, rowPar.Met = "p99 ≤ 10 ms", met(quantile(par, 0.99) <= 10)
		}
		r.rep.add(rowPar)
		r.log.Info("match", "drivers", fleet, "seq_p99_ms", rowSeq.Value, "par_p99_ms", rowPar.Value)
	}

	// Per-key view of the same bytes. The ping budget is field rl of the driver hash (ApplyPings
	// wrote it while seeding), so it is in both figures: no rate-limit key of its own any more.
	sample := min(200, seeded)
	var keyBytes int64
	for i := range sample {
		id := "d-" + strconv.Itoa(i*(seeded/sample))
		for _, k := range []string{prefix + "driver:" + id, prefix + "hb:" + id} {
			n, _ := rdb.MemoryUsage(ctx, k).Result()
			keyBytes += n
		}
	}
	geoBytes, _ := rdb.MemoryUsage(ctx, prefix+"geo:available", 0).Result()
	dlBytes, _ := rdb.MemoryUsage(ctx, d.Redis.DeadlinesKey(), 0).Result()
	total := perDriver
	row := Row{Section: "memory", Name: fmt.Sprintf("Redis per online driver (%s drivers)", fleetName(seeded)), Value: total, Unit: "B/driver",
		Ceiling: "bare GEOADD of the same members (MEMORY USAGE)", CeilingValue: rawPerMember, Target: "≤ 300 B", Met: met(total <= 300),
		Note: fmt.Sprintf("INFO used_memory delta %.0f (the ping budget is a field of the hash); MEMORY USAGE per driver: hash+heartbeat %.0f, GEO set %.0f, deadlines %.0f",
			perDriver, float64(keyBytes)/float64(sample), float64(geoBytes)/float64(seeded), float64(dlBytes)/float64(seeded))}
	r.rep.add(row)
	return nil
}

// fleetName is 1k, 10k, 1M.
func fleetName(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return strconv.Itoa(n/1_000_000) + "M"
	case n >= 1000 && n%1000 == 0:
		return strconv.Itoa(n/1000) + "k"
	}
	return strconv.Itoa(n)
}

type timedKey struct{}

// timed hands the latency of the measured part of a concurrentMs op back to it.
func timed(ctx context.Context, d time.Duration) error {
	if p, ok := ctx.Value(timedKey{}).(*time.Duration); ok {
		*p = d
	}
	return nil
}

// concurrentMs runs n ops on workers goroutines and returns each op's latency in ms: the whole op,
// or the part it reports with timed.
func concurrentMs(ctx context.Context, workers, n int, op func(context.Context) error) ([]float64, error) {
	var next atomic.Int64
	var mu sync.Mutex
	var failed error
	out := make([]float64, 0, n)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				var part time.Duration = -1
				octx := context.WithValue(ctx, timedKey{}, &part)
				t := time.Now()
				err := op(octx)
				el := time.Since(t)
				if part >= 0 {
					el = part
				}
				mu.Lock()
				if err != nil && failed == nil {
					failed = err
				}
				out = append(out, durMs(el))
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	return out, failed
}
