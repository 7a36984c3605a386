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
					failed.Store(err)
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
	dur, fleet := 5*time.Second, 32_000
	if r.o.Quick {
		dur, fleet = time.Second, 3_200
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
	geoKey := st.cfg.RedisPrefix + "rawgeo"
	pipelined, err := redisBenchmarkGEOADD(ctx, r.o.RedisBenchmark, opt, geoKey, ingestClients, 100, dur)
	if err != nil {
		return err
	}
	unpipelined, err := redisBenchmarkGEOADD(ctx, r.o.RedisBenchmark, opt, geoKey, ingestClients, 1, dur)
	if err != nil {
		return err
	}
	st.deps.Redis.Client().Unlink(ctx, geoKey)

	store := st.deps.Redis
	rdb := store.Client()
	evalsha := map[int]float64{}
	evalCost := map[int][2]float64{}
	for _, batch := range []int{1, 100, 500} {
		c0, t0 := snapshot(ctx, rdb), time.Now()
		rate, err := closedLoop(ctx, ingestClients, dur, func(ctx context.Context, w int) (int, error) {
			res, err := store.ApplyPings(ctx, nextPings(w, batch))
			if err != nil {
				return 0, err
			}
			for _, x := range res {
				if !x.Applied {
					return 0, fmt.Errorf("EVALSHA ping rejected: %s", x.Rejected)
				}
			}
			return batch, nil
		})
		if err != nil {
			return err
		}
		evalsha[batch] = rate
		c, rc := per(c0, snapshot(ctx, rdb), rate*time.Since(t0).Seconds())
		evalCost[batch] = [2]float64{c, rc}
		r.log.Info("evalsha", "batch", batch, "pings/s", int(rate))
	}

	addr, stop, err := serve(r.o.Gateway(st.deps))
	if err != nil {
		return err
	}
	defer stop()
	tok, err := auth.Mint([]byte(st.cfg.JWTSecret), st.cfg.JWTIssuer, st.cfg.JWTAudience,
		auth.Identity{Subject: "bench-ops", Role: auth.RoleOps}, time.Hour)
	if err != nil {
		return err
	}
	hc := httpClient(ingestClients * 2)
	url := "http://" + addr + "/function/location-update"
	overHTTP := map[int]float64{}
	httpCost := map[int][2]float64{}
	for _, batch := range []int{1, 100, 500} {
		bufs := make([][]byte, ingestClients)
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
			if resp.StatusCode != http.StatusOK || bytes.Contains(body, []byte(`"applied":false`)) {
				return 0, fmt.Errorf("location-update: %d %.300s", resp.StatusCode, body)
			}
			return batch, nil
		})
		if err != nil {
			return err
		}
		overHTTP[batch] = rate
		c, rc := per(c0, snapshot(ctx, rdb), rate*time.Since(t0).Seconds())
		httpCost[batch] = [2]float64{c, rc}
		r.log.Info("http", "batch", batch, "pings/s", int(rate))
	}

	geoP := fmt.Sprintf("redis-benchmark GEOADD -P 100 -c %d", ingestClients)
	geo1 := fmt.Sprintf("redis-benchmark GEOADD -P 1 -c %d", ingestClients)
	eval := func(b int) string {
		if b == 1 {
			return fmt.Sprintf("EVALSHA ping script, 1 per call, %d callers", ingestClients)
		}
		return fmt.Sprintf("EVALSHA ping script, pipelined %d, %d callers", b, ingestClients)
	}
	rep := r.rep
	single := Row{Section: "ingest", Name: fmt.Sprintf("HTTP single ping, %d conns", ingestClients), Value: overHTTP[1], Unit: "pings/s",
		Ceiling: geo1, CeilingValue: unpipelined, Target: "ratio ≥ 0.5", Note: costNote(httpCost[1][0], httpCost[1][1], "ping")}
	single.Met = met(overHTTP[1]/unpipelined >= 0.5)
	rep.add(single)
	rep.add(Row{Section: "ingest", Name: "HTTP single ping vs the script", Value: overHTTP[1], Unit: "pings/s", Ceiling: eval(1), CeilingValue: evalsha[1]})
	for _, b := range []int{100, 500} {
		row := Row{Section: "ingest", Name: fmt.Sprintf("HTTP batch %d, %d conns", b, ingestClients), Value: overHTTP[b], Unit: "pings/s",
			Ceiling: geoP, CeilingValue: pipelined, Target: "ratio ≥ 0.25", Note: costNote(httpCost[b][0], httpCost[b][1], "ping")}
		row.Met = met(overHTTP[b]/pipelined >= 0.25)
		rep.add(row)
		rep.add(Row{Section: "ingest", Name: fmt.Sprintf("HTTP batch %d vs the script", b), Value: overHTTP[b], Unit: "pings/s", Ceiling: eval(b), CeilingValue: evalsha[b]})
	}
	rep.add(Row{Section: "ingest", Name: "ping script alone, 1 per call", Value: evalsha[1], Unit: "pings/s", Ceiling: geo1, CeilingValue: unpipelined,
		Note: "the script's own ceiling (Store.ApplyPings, no HTTP, no rate limiter); " + costNote(evalCost[1][0], evalCost[1][1], "ping")})
	rep.add(Row{Section: "ingest", Name: "ping script alone, pipelined 500", Value: evalsha[500], Unit: "pings/s", Ceiling: geoP, CeilingValue: pipelined,
		Note: fmt.Sprintf("pipelined 100: %.0f pings/s; ", evalsha[100]) + costNote(evalCost[500][0], evalCost[500][1], "ping")})
	return nil
}
