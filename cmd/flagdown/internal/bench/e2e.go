package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flagdown/flagdown/shared/app"
	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// PingsPerRide is the end-to-end run's ping rate per ride request rate: the seed requirement's
// ratio, 75,000 pings/s (300k drivers every 4 s) to 1,500 rides/s.
const PingsPerRide = 50

// PingIntervalS is how often each simulated driver pings, seconds.
const PingIntervalS = 4

// OfferP99TargetMs is the end-to-end requirement: ride request → first offer p99, milliseconds.
const OfferP99TargetMs = 200

// stepResult is one open-loop step.
type stepResult struct {
	rate, pingRate           float64 // targets, per second
	ridesSent, ridesFailed   int64
	pingsSent, pingsFailed   int64
	dropped                  int64 // arrivals not sent: too many requests in flight
	offerP50, offerP99       float64
	unoffered, rides         int
	orderP99Ms, pingReqP99Ms float64
	elapsed                  time.Duration // of the arrivals
	pingWindow               time.Duration // of the pings counted: the step and its drain
}

func (s stepResult) sustained(dur time.Duration) bool {
	want := s.rate * dur.Seconds()
	return s.dropped == 0 && float64(s.ridesSent) >= 0.95*want && s.ridesFailed*100 <= s.ridesSent &&
		float64(s.pingsSent) >= 0.95*s.pingRate*s.pingWindow.Seconds() && s.pingsFailed*100 <= max(1, s.pingsSent) &&
		s.offerP99 <= OfferP99TargetMs
}

// latencies collects request latencies, ms.
type latencies struct {
	mu sync.Mutex
	ms []float64
}

func (l *latencies) add(d time.Duration) { l.mu.Lock(); l.ms = append(l.ms, durMs(d)); l.mu.Unlock() }
func (l *latencies) take() []float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.ms
	l.ms = nil
	return out
}

// endToEnd drives the whole platform (gateway, broker, triggers, relay, match) open-loop: ride
// requests at a constant arrival rate and PingsPerRide times as many pings, in rising steps, until
// a step is not sustained (offer p99 above OfferP99TargetMs, or the client could not keep the rate).
func (r *runner) endToEnd(ctx context.Context) error {
	cfg := r.stageConfig(func(c *config.Config) {
		c.Addr = "127.0.0.1:0"
		// Offers stay pending for the whole run: no expiry → re-match cascade adds load that is not
		// the arrival rate; the fleet is sized so locked drivers never run short.
		c.OfferWindow = 10 * time.Minute
	})
	p, err := r.o.StartPlatform(ctx, cfg, r.log)
	if err != nil {
		return err
	}
	defer func() {
		_ = p.Close()
		if d, err := app.Open(context.Background(), cfg, r.log); err == nil {
			dropStage(d)
		}
	}()
	dur := r.o.StepDuration
	rates := []float64{25, 50, 75, 100, 125, 150, 200, 300, 400, 600}
	if r.o.Quick {
		rates = []float64{5, 10}
		if dur == 0 {
			dur = 3 * time.Second
		}
	}
	if dur == 0 {
		dur = 12 * time.Second
	}
	base := "http://" + p.Addr() + "/function/"
	hc := httpClient(512)
	svcTok, err := auth.Mint([]byte(cfg.JWTSecret), cfg.JWTIssuer, cfg.JWTAudience, auth.Identity{Subject: "bench-aggregator", Role: auth.RoleService}, time.Hour)
	if err != nil {
		return err
	}
	post := func(ctx context.Context, fn, tok string, body []byte, want int) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+fn, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			return fmt.Errorf("%s: %d %.200s", fn, resp.StatusCode, b)
		}
		return nil
	}

	// The fleet: drivers start at real dropoffs (never at the pickups being requested) and ping
	// every PingIntervalS seconds, in batches of 100 per call (a gateway aggregator's service token).
	var fleet atomic.Int64
	var drivers []*simDriver
	var dmu sync.Mutex
	var pingsSent, pingsFailed, inflight, dropped atomic.Int64
	pingLat := &latencies{}
	const maxInflight = 4096
	pingCtx, stopPings := context.WithCancel(ctx)
	var pingWG sync.WaitGroup
	pingWG.Go(func() {
		const ticks = PingIntervalS * 10 // one tick every 100 ms
		tk := time.NewTicker(100 * time.Millisecond)
		defer tk.Stop()
		for tick := 0; ; tick++ {
			select {
			case <-pingCtx.Done():
				return
			case <-tk.C:
			}
			n := int(fleet.Load())
			dmu.Lock()
			for len(drivers) < n {
				i := len(drivers)
				drivers = append(drivers, &simDriver{id: "e-" + strconv.Itoa(i), pos: point(r.pick(i * 7).Dropoff), at: time.Now().Add(-time.Minute)})
			}
			var batch []redisstore.Ping
			flush := func() {
				if len(batch) == 0 {
					return
				}
				if inflight.Load() >= maxInflight {
					dropped.Add(int64(len(batch)))
					batch = nil
					return
				}
				body := batchJSON(nil, batch, false)
				k := int64(len(batch))
				batch = nil
				inflight.Add(1)
				pingWG.Go(func() {
					defer inflight.Add(-1)
					t := time.Now()
					// Not pingCtx: a call in flight when the run stops finishes.
					err := post(ctx, "location-update", svcTok, body, http.StatusOK)
					pingLat.add(time.Since(t))
					if err != nil {
						pingsFailed.Add(k)
						r.log.Debug("ping batch failed", "err", err)
						return
					}
					pingsSent.Add(k)
				})
			}
			now := time.Now()
			for i := tick % ticks; i < n; i += ticks {
				d := drivers[i]
				d.at = now
				batch = append(batch, redisstore.Ping{DriverID: d.id, Position: d.pos, At: now, Status: "available"})
				if len(batch) == 100 {
					flush()
				}
			}
			flush()
			dmu.Unlock()
		}
	})
	defer func() { stopPings(); pingWG.Wait() }()

	fleet.Store(int64(rates[0] * PingsPerRide * PingIntervalS))
	time.Sleep(time.Duration(PingIntervalS+1) * time.Second) // every driver has pinged once

	var results []stepResult
	best := -1
	deadline := time.Now().Add(5 * time.Minute)
	for si, rate := range rates {
		if time.Now().After(deadline) {
			r.log.Info("end-to-end: time budget spent", "steps", si)
			break
		}
		fleet.Store(int64(rate * PingsPerRide * PingIntervalS))
		pingsSent.Store(0)
		pingsFailed.Store(0)
		dropped.Store(0)
		pingLat.take()
		t0 := time.Now()
		res := r.step(ctx, si, rate, dur, p.Deps(), post, cfg, &inflight, maxInflight)
		// Pings of the step, its drain included: the fleet pings all the time.
		res.pingsSent, res.pingsFailed = pingsSent.Load(), pingsFailed.Load()
		res.pingWindow = time.Since(t0)
		res.dropped += dropped.Load()
		res.pingReqP99Ms = quantile(pingLat.take(), 0.99)
		res.pingRate = rate * PingsPerRide
		results = append(results, res)
		ok := res.sustained(dur)
		r.log.Info("end-to-end step", "rides/s", rate, "pings/s", res.pingRate, "offer_p99_ms", res.offerP99,
			"unoffered", res.unoffered, "rides_sent", res.ridesSent, "pings_sent", res.pingsSent, "dropped", res.dropped, "sustained", ok)
		if !ok {
			break
		}
		best = si
	}
	for _, s := range results {
		row := Row{Section: "end-to-end", Name: fmt.Sprintf("offer p99 at %.0f rides/s + %.0f pings/s", s.rate, s.pingRate),
			Value: s.offerP99, Unit: "ms", Ceiling: "requirement", CeilingValue: OfferP99TargetMs,
			Note: fmt.Sprintf("p50 %.0f ms; %d rides (%d failed, %d never offered), %.0f pings/s achieved (%d failed), %d arrivals dropped; order-create p99 %.0f ms, ping call p99 %.0f ms",
				s.offerP50, s.ridesSent, s.ridesFailed, s.unoffered, float64(s.pingsSent)/s.pingWindow.Seconds(), s.pingsFailed, s.dropped, s.orderP99Ms, s.pingReqP99Ms)}
		r.rep.add(row)
	}
	row := Row{Section: "end-to-end", Name: fmt.Sprintf("highest sustained rate, open loop, %s steps", dur), Unit: "rides/s",
		Target: fmt.Sprintf("offer p99 ≤ %d ms", OfferP99TargetMs), Met: met(best >= 0)}
	if best >= 0 {
		s := results[best]
		row.Value = s.rate
		row.Note = fmt.Sprintf("with %.0f pings/s; offer p50 %.0f / p99 %.0f ms", s.pingRate, s.offerP50, s.offerP99)
		if best == len(rates)-1 {
			row.Note += "; the highest step tried"
		}
	} else {
		row.Note = "not even the lowest step was sustained"
	}
	if r.orderCeiling > 0 {
		row.Ceiling, row.CeilingValue = "pgbench order-create (this run)", r.orderCeiling
	}
	r.rep.add(row)
	return nil
}

// step sends ride requests at rate per second for dur (open loop: each arrival is sent on time in
// its own goroutine, whatever the answers), waits for their offers and measures them.
func (r *runner) step(ctx context.Context, si int, rate float64, dur time.Duration, d *app.Deps,
	post func(context.Context, string, string, []byte, int) error, cfg *config.Config, inflight *atomic.Int64, maxInflight int64) stepResult {
	res := stepResult{rate: rate}
	var sent, failed atomic.Int64
	orderLat := &latencies{}
	var wg sync.WaitGroup
	t0 := time.Now()
	tk := time.NewTicker(5 * time.Millisecond)
	n := 0
	for time.Since(t0) < dur {
		<-tk.C
		due := int(rate * time.Since(t0).Seconds())
		for ; n < due; n++ {
			if inflight.Load() >= maxInflight {
				res.dropped++
				continue
			}
			rider := fmt.Sprintf("e2e-%d-%d", si, n)
			t := r.pick(n*13 + si)
			inflight.Add(1)
			wg.Go(func() {
				defer inflight.Add(-1)
				tok, err := auth.Mint([]byte(cfg.JWTSecret), cfg.JWTIssuer, cfg.JWTAudience, auth.Identity{Subject: rider, Role: auth.RoleRider}, time.Hour)
				if err != nil {
					failed.Add(1)
					return
				}
				body := fmt.Appendf(nil, `{"pickup":{"lat":%v,"lng":%v},"dropoff":{"lat":%v,"lng":%v}}`, t.Pickup.Lat, t.Pickup.Lng, t.Dropoff.Lat, t.Dropoff.Lng)
				st := time.Now()
				err = post(ctx, "order-create", tok, body, http.StatusAccepted)
				orderLat.add(time.Since(st))
				if err != nil {
					failed.Add(1)
					r.log.Debug("order-create failed", "err", err)
					return
				}
				sent.Add(1)
			})
		}
	}
	tk.Stop()
	res.elapsed = time.Since(t0)
	wg.Wait()
	res.ridesSent, res.ridesFailed = sent.Load(), failed.Load()
	res.orderP99Ms = quantile(orderLat.take(), 0.99)
	// Wait (at most 5 s) for every ride of the step to be offered, then read the server's clock:
	// first_offered_at − created_at, as the replay's offer latency.
	like := fmt.Sprintf("e2e-%d-%%", si)
	for wait := time.Now(); time.Since(wait) < 5*time.Second; time.Sleep(250 * time.Millisecond) {
		var open int
		if err := d.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM rides WHERE rider_id LIKE $1 AND first_offered_at IS NULL`, like).Scan(&open); err != nil || open == 0 {
			break
		}
	}
	rows, err := d.DB.Pool.Query(ctx, `SELECT extract(epoch FROM first_offered_at - created_at) * 1000 FROM rides WHERE rider_id LIKE $1`, like)
	if err != nil {
		res.offerP99 = math.Inf(1)
		return res
	}
	var ms []float64
	for rows.Next() {
		var v *float64
		if rows.Scan(&v) == nil {
			if v == nil {
				res.unoffered++
				ms = append(ms, math.Inf(1))
			} else {
				ms = append(ms, *v)
			}
		}
	}
	rows.Close()
	res.rides = len(ms)
	res.offerP50, res.offerP99 = quantile(ms, 0.5), quantile(ms, 0.99)
	if len(ms) == 0 {
		res.offerP99 = math.Inf(1)
	}
	return res
}
