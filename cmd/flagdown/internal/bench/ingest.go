package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// ingestClients is the number of concurrent HTTP connections, EVALSHA callers and redis-benchmark
// clients of the ingest stage.
const ingestClients = 16

// simDriver is a driver of the ingest fleet: where he is and his device clock.
type simDriver struct {
	id  string
	pos dispatch.Point
	at  time.Time
}

// next moves d 5 m north-east and one second on: always a valid, applied ping.
func (d *simDriver) next() redisstore.Ping {
	d.pos = offsetM(d.pos, 3.5, 3.5)
	d.at = d.at.Add(time.Second)
	return redisstore.Ping{DriverID: d.id, Position: d.pos, At: d.at, Status: dispatch.DriverAvailable}
}

// offsetM returns p moved dy metres north and dx metres east.
func offsetM(p dispatch.Point, dy, dx float64) dispatch.Point {
	const mPerDeg = dispatch.EarthRadiusM * math.Pi / 180
	return dispatch.Point{Lat: p.Lat + dy/mPerDeg, Lng: p.Lng + dx/(mPerDeg*math.Cos(p.Lat*math.Pi/180))}
}

// appendPingJSON appends p as the location-update JSON of one ping.
func appendPingJSON(b []byte, p redisstore.Ping) []byte {
	b = append(b, `{"driver_id":"`...)
	b = append(b, p.DriverID...)
	b = append(b, `","lat":`...)
	b = strconv.AppendFloat(b, p.Position.Lat, 'f', 7, 64)
	b = append(b, `,"lng":`...)
	b = strconv.AppendFloat(b, p.Position.Lng, 'f', 7, 64)
	b = append(b, `,"ts":"`...)
	b = p.At.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","status":"available"}`...)
	return b
}

// batchJSON returns the location-update body of pings: one ping object when single, else
// {"pings": [...]}.
func batchJSON(b []byte, pings []redisstore.Ping, single bool) []byte {
	if single {
		return appendPingJSON(b, pings[0])
	}
	b = append(b, `{"pings":[`...)
	for i, p := range pings {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendPingJSON(b, p)
	}
	return append(b, "]}"...)
}

// closedLoop runs work on workers goroutines for dur and returns the units done per second; work
// returns the units one call did, or an error that stops the run.
func closedLoop(ctx context.Context, workers int, dur time.Duration, work func(ctx context.Context, w int) (int, error)) (float64, error) {
	// Calls in flight at the end finish (their context is not cancelled, so the server sees no
	// aborted requests); the rate counts the time they took.
	var stop atomic.Bool
	var done atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	t0 := time.Now()
	timer := time.AfterFunc(dur, func() { stop.Store(true) })
	defer timer.Stop()
	for w := range workers {
		wg.Go(func() {
			for !stop.Load() && ctx.Err() == nil {
				n, err := work(ctx, w)
				if err != nil {
					failed.CompareAndSwap(nil, fmt.Errorf("%w", err)) // one type: Value panics on mixed types
					stop.Store(true)
					return
				}
				done.Add(int64(n))
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		return 0, err
	}
	return float64(done.Load()) / time.Since(t0).Seconds(), nil
}

// ingest measures pings/s through the location-update handler over loopback HTTP and through a
// bare EVALSHA of the ping script, with redis-benchmark's GEOADD as the raw ceiling.
func (r *runner) ingest(ctx context.Context) error {
	st, err := r.openStage(ctx, nil)
	if err != nil {
		return err
	}
	defer st.close()
	dur, fleet, rounds := 1700*time.Millisecond, 32_000, 3
	if r.o.Quick {
		dur, fleet, rounds = time.Second, 3_200, 1
	}
	// Each worker owns fleet/ingestClients drivers, so no two requests race on one driver.
	drivers := make([][]*simDriver, ingestClients)
	start := time.Now().Add(-time.Hour)
	for i := range fleet {
		w := i % ingestClients
		drivers[w] = append(drivers[w], &simDriver{id: "d-" + strconv.Itoa(i), pos: point(r.pick(i).Pickup), at: start})
	}
	cursor := make([]int, ingestClients)
	nextPings := func(w, n int) []redisstore.Ping {
		out := make([]redisstore.Ping, n)
		for j := range out {
			ds := drivers[w]
			out[j] = ds[cursor[w]%len(ds)].next()
			cursor[w]++
		}
		return out
	}

	opt, err := redis.ParseURL(st.cfg.RedisURL)
	if err != nil {
		return err
	}
	store := st.deps.Redis
	rdb := store.Client()
	addr, stop, err := serve(r.o.Gateway(st.deps))
	if err != nil {
		return err
	}
	defer stop()
	tok, err := auth.Mint([]byte(st.cfg.JWTSecret), st.cfg.JWTIssuer, st.cfg.JWTAudience,
		auth.Identity{Subject: "bench-aggregator", Role: auth.RoleService}, time.Hour)
	if err != nil {
		return err
	}
	hc := httpClient(ingestClients * 2)
	url := "http://" + addr + "/function/location-update"

	// The ceiling: redis-benchmark GEOADD, sized by a calibration run to take about dur.
	geoKey := st.cfg.RedisPrefix + "rawgeo"
	defer rdb.Unlink(context.Background(), geoKey)
	geoN := map[int]int{}
	geo := func(pipeline int) (float64, error) {
		if geoN[pipeline] == 0 {
			probe, err := redisBenchmarkGEOADD(ctx, r.o.RedisBenchmark, opt, geoKey, ingestClients, pipeline, max(10_000, 5_000*pipeline))
			if err != nil {
				return 0, err
			}
			geoN[pipeline] = max(10_000, int(probe*dur.Seconds()))
		}
		return redisBenchmarkGEOADD(ctx, r.o.RedisBenchmark, opt, geoKey, ingestClients, pipeline, geoN[pipeline])
	}
	var staleSeen atomic.Int64
	// The script alone: Store.ApplyPings, batch pings per call.
	eval := func(batch int) (float64, [3]float64, error) {
		c0, t0 := snapshot(ctx, rdb), time.Now()
		rate, err := closedLoop(ctx, ingestClients, dur, func(ctx context.Context, w int) (int, error) {
			res, err := store.ApplyPings(ctx, nextPings(w, batch))
			if err != nil {
				return 0, err
			}
			for _, x := range res {
				// stale: go-redis re-sent a pipeline that timed out on a loaded machine (its
				// pings were applied the first time); counted, never a failure.
				if !x.Applied && x.Rejected != "stale" {
					return 0, fmt.Errorf("EVALSHA ping rejected: %s", x.Rejected)
				}
				if !x.Applied {
					staleSeen.Add(1)
				}
			}
			return batch, nil
		})
		c1, n := snapshot(ctx, rdb), rate*time.Since(t0).Seconds()
		c, rc := per(c0, c1, n)
		return rate, [3]float64{c, rc, redisCPUPer(c0, c1, n)}, err
	}
	// flagdown: the location-update handler over loopback HTTP.
	bufs := make([][]byte, ingestClients)
	overHTTP := func(batch int) (float64, [3]float64, error) {
		c0, t0 := snapshot(ctx, rdb), time.Now()
		rate, err := closedLoop(ctx, ingestClients, dur, func(ctx context.Context, w int) (int, error) {
			bufs[w] = batchJSON(bufs[w][:0], nextPings(w, batch), batch == 1)
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(bufs[w]))
			if err != nil {
				return 0, err
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+tok)
			resp, err := hc.Do(req)
			if err != nil {
				return 0, err
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				return 0, err
			}
			if resp.StatusCode != http.StatusOK || bytes.Contains(body, []byte(`"rejected":"rate_limited"`)) || bytes.Contains(body, []byte(`"rejected":"gps_jump"`)) {
				return 0, fmt.Errorf("location-update: %d %.300s", resp.StatusCode, body)
			}
			return batch, nil
		})
		c1, n := snapshot(ctx, rdb), rate*time.Since(t0).Seconds()
		c, rc := per(c0, c1, n)
		return rate, [3]float64{c, rc, redisCPUPer(c0, c1, n)}, err
	}

	// Rounds: each flagdown figure is measured right after its ceilings, so a change of the
	// machine's load hits both; the table gives medians over the rounds and the median of the
	// rounds' ratios.
	var (
		geoP, geo1 []float64
		ev, ht     = map[int][]float64{}, map[int][]float64{}
		evCost     = map[int][][3]float64{}
		htCost     = map[int][][3]float64{}
		ratio      = map[string][]float64{}
	)
	for round := range rounds {
		gp, err := geo(100)
		if err != nil {
			return err
		}
		g1, err := geo(1)
		if err != nil {
			return err
		}
		geoP, geo1 = append(geoP, gp), append(geo1, g1)
		for _, b := range []int{1, 100, 500} {
			e, ec, err := eval(b)
			if err != nil {
				return err
			}
			h, hcost, err := overHTTP(b)
			if err != nil {
				return err
			}
			ev[b], ht[b] = append(ev[b], e), append(ht[b], h)
			evCost[b], htCost[b] = append(evCost[b], ec), append(htCost[b], hcost)
			raw := gp
			if b == 1 {
				raw = g1
			}
			ratio[fmt.Sprintf("http%d/geo", b)] = append(ratio[fmt.Sprintf("http%d/geo", b)], h/raw)
			ratio[fmt.Sprintf("http%d/eval", b)] = append(ratio[fmt.Sprintf("http%d/eval", b)], h/e)
			ratio[fmt.Sprintf("eval%d/geo", b)] = append(ratio[fmt.Sprintf("eval%d/geo", b)], e/raw)
		}
		r.log.Info("ingest round", "round", round+1, "geoadd_p100", int(gp), "geoadd_p1", int(g1),
			"evalsha_1/100/500", fmt.Sprintf("%.0f/%.0f/%.0f", ev[1][round], ev[100][round], ev[500][round]),
			"http_1/100/500", fmt.Sprintf("%.0f/%.0f/%.0f", ht[1][round], ht[100][round], ht[500][round]))
	}
	medCost := func(cs [][3]float64) (float64, float64) {
		var a, b []float64
		for _, c := range cs {
			a, b = append(a, c[0]), append(b, c[1])
		}
		return median(a), median(b)
	}
	medCPU := func(cs [][3]float64) ([]float64, float64) {
		var v []float64
		for _, c := range cs {
			if c[2] >= 0 {
				v = append(v, c[2])
			}
		}
		if len(v) == 0 {
			return nil, -1
		}
		return v, median(v)
	}
	spread := func(v []float64) string {
		if len(v) < 2 {
			return ""
		}
		return fmt.Sprintf("; %d rounds, ratio %.3g–%.3g", len(v), slices.Min(v), slices.Max(v))
	}

	if n := staleSeen.Load(); n > 0 {
		r.log.Warn("ingest: pings answered stale (a pipeline re-sent after a timeout)", "pings", n)
	}
	geoPName := fmt.Sprintf("redis-benchmark GEOADD -P 100 -c %d", ingestClients)
	geo1Name := fmt.Sprintf("redis-benchmark GEOADD -P 1 -c %d", ingestClients)
	evalName := func(b int) string {
		if b == 1 {
			return fmt.Sprintf("EVALSHA ping script, 1 per call, %d callers", ingestClients)
		}
		return fmt.Sprintf("EVALSHA ping script, pipelined %d, %d callers", b, ingestClients)
	}
	rep := r.rep
	for _, b := range []int{1, 100, 500} {
		name, raw, rawName, target, want := fmt.Sprintf("HTTP batch %d, %d conns", b, ingestClients), geoP, geoPName, "ratio ≥ 0.25", 0.25
		if b == 1 {
			name, raw, rawName, target, want = fmt.Sprintf("HTTP single ping, %d conns", ingestClients), geo1, geo1Name, "ratio ≥ 0.5", 0.5
		}
		rg := median(ratio[fmt.Sprintf("http%d/geo", b)])
		cpuUs, redisUs := medCost(htCost[b])
		rep.add(Row{Section: "ingest", Name: name, Value: median(ht[b]), Unit: "pings/s", Ceiling: rawName, CeilingValue: median(raw),
			Ratio: rg, Target: target, Met: met(rg >= want),
			Note: costNote(cpuUs, redisUs, "ping") + spread(ratio[fmt.Sprintf("http%d/geo", b)])})
		vs := fmt.Sprintf("HTTP batch %d vs the script", b)
		if b == 1 {
			vs = "HTTP single ping vs the script"
		}
		rep.add(Row{Section: "ingest", Name: vs, Value: median(ht[b]), Unit: "pings/s",
			Ceiling: evalName(b), CeilingValue: median(ev[b]), Ratio: median(ratio[fmt.Sprintf("http%d/eval", b)]),
			Note: "the script's Redis work alone is the ceiling of what the handler can add" + spread(ratio[fmt.Sprintf("http%d/eval", b)])})
	}
	// The per-ping budget: Redis's process CPU per ping offered through the handler, the
	// rate limiter included, parsing and I/O included (INFO cpu; commandstats leaves them out).
	for _, b := range []int{100, 1} {
		v, med := medCPU(htCost[b])
		if med < 0 {
			continue
		}
		name := fmt.Sprintf("Redis CPU per ping, HTTP batch %d (rate limiter on)", b)
		target, want := "≤ 8 µs", 8.0
		if b == 1 {
			name, target, want = "Redis CPU per ping, HTTP single ping (rate limiter on)", "", 0 // no budget: batches carry the load
		}
		var rng string
		if len(v) > 1 {
			rng = fmt.Sprintf("; %d rounds, %.1f–%.1f µs", len(v), slices.Min(v), slices.Max(v))
		}
		_, cmdUs := medCost(htCost[b])
		row := Row{Section: "ingest", Name: name, Value: med, Unit: "µs/ping", Target: target,
			Note: fmt.Sprintf("INFO cpu used_cpu_user + used_cpu_sys delta over every master / pings offered "+
				"(every client's: run on a private Redis for a clean figure); commands alone (commandstats) %.1f µs%s", cmdUs, rng)}
		if want > 0 {
			row.Met = met(med <= want)
		}
		rep.add(row)
	}
	for _, b := range []int{1, 500} {
		raw, rawName := geoP, geoPName
		if b == 1 {
			raw, rawName = geo1, geo1Name
		}
		cpuUs, redisUs := medCost(evCost[b])
		rep.add(Row{Section: "ingest", Name: "ping script alone, " + map[int]string{1: "1 per call", 500: "pipelined 500"}[b], Value: median(ev[b]), Unit: "pings/s",
			Ceiling: rawName, CeilingValue: median(raw), Ratio: median(ratio[fmt.Sprintf("eval%d/geo", b)]),
			Note: "Store.ApplyPings (each ping's budget spent in the script), no HTTP; " + costNote(cpuUs, redisUs, "ping") + spread(ratio[fmt.Sprintf("eval%d/geo", b)])})
	}
	return nil
}
