package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/pgstore"
)

// orderClients is the concurrency of order-create over HTTP and of pgbench (-c).
const orderClients = 16

// tableBytes returns the total size (heap, indexes, TOAST) and the heap size alone of the rides and
// outbox tables, bytes.
func tableBytes(ctx context.Context, db *pgstore.DB) (total, heap int64, err error) {
	err = db.Pool.QueryRow(ctx, `SELECT pg_total_relation_size('rides') + pg_total_relation_size('outbox'),
		pg_relation_size('rides') + pg_relation_size('outbox')`).Scan(&total, &heap)
	return total, heap, err
}

// orderCreate measures rides/s through the order-create handler over loopback HTTP against pgbench
// running the same transaction, and PostgreSQL bytes per ride.
func (r *runner) orderCreate(ctx context.Context) error {
	st, err := r.openStage(ctx, nil)
	if err != nil {
		return err
	}
	defer st.close()
	dur, rounds := 3*time.Second, 3
	if r.o.Quick {
		dur, rounds = time.Second, 1
	}
	addr, stop, err := serve(r.o.Gateway(st.deps))
	if err != nil {
		return err
	}
	defer stop()
	hc := httpClient(orderClients * 2)
	url := "http://" + addr + "/function/order-create"
	var seq atomic.Int64
	cfg := st.cfg
	bodies := make([][]byte, orderClients)
	post := func(ctx context.Context, w int) (int, error) {
		n := int(seq.Add(1))
		t := r.pick(n)
		rider := "rider-" + strconv.Itoa(n)
		// Minting is the client's cost (a few µs), paid here like a rider app's cached token would not be.
		tok, err := auth.Mint([]byte(cfg.JWTSecret), cfg.JWTIssuer, cfg.JWTAudience, auth.Identity{Subject: rider, Role: auth.RoleRider}, time.Hour)
		if err != nil {
			return 0, err
		}
		bodies[w] = fmt.Appendf(bodies[w][:0], `{"pickup":{"lat":%v,"lng":%v},"dropoff":{"lat":%v,"lng":%v}}`,
			t.Pickup.Lat, t.Pickup.Lng, t.Dropoff.Lat, t.Dropoff.Lng)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(bodies[w]))
		if err != nil {
			return 0, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			return 0, fmt.Errorf("order-create: %d %.300s", resp.StatusCode, body)
		}
		return 1, nil
	}
	// Warm the pool and the statement cache so neither run pays connection set-up.
	if _, err := closedLoop(ctx, orderClients, 300*time.Millisecond, post); err != nil {
		return err
	}
	// Rounds: the handler, then pgbench right after it, so a change of the machine's load hits
	// both; the table gives medians and the median of the rounds' ratios. Bytes per ride are
	// measured over the handler's rides only.
	var rates, tpss, ratios, cpus, reds []float64
	var bares, notifies []float64              // pgbench with outbox triggers disabled, with the old NOTIFY trigger
	var migratedRatios, notifyRatios []float64 // per round: as migrated / disabled, old trigger / disabled
	var rides int64
	var grownTotal int64 // bytes the tables grew by during the handler's runs
	for round := range rounds {
		n0 := seq.Load()
		c0 := snapshot(ctx, st.deps.Redis.Client())
		t0, _, err := tableBytes(ctx, st.deps.DB)
		if err != nil {
			return err
		}
		rate, err := closedLoop(ctx, orderClients, dur, post)
		if err != nil {
			return err
		}
		t1, _, err := tableBytes(ctx, st.deps.DB)
		if err != nil {
			return err
		}
		n := seq.Load() - n0
		cpuUs, redisUs := per(c0, snapshot(ctx, st.deps.Redis.Client()), float64(n))
		tps, err := pgbenchOrderCreate(ctx, r.o.PGBench, st.cfg.DatabaseURL, st.cfg.DatabaseSchema, orderClients, dur)
		if err != nil {
			return err
		}
		bare, notify, err := r.pgbenchNotifyAB(ctx, st.deps.DB, st.cfg.DatabaseURL, st.cfg.DatabaseSchema, dur)
		if err != nil {
			return err
		}
		bares, notifies = append(bares, bare), append(notifies, notify)
		migratedRatios, notifyRatios = append(migratedRatios, tps/bare), append(notifyRatios, notify/bare)
		rides, grownTotal = rides+n, grownTotal+t1-t0
		rates, tpss, ratios = append(rates, rate), append(tpss, tps), append(ratios, rate/tps)
		cpus, reds = append(cpus, cpuUs), append(reds, redisUs)
		r.log.Info("order-create round", "round", round+1, "rides/s", int(rate), "pgbench_tps", int(tps))
	}
	r.orderCeiling = median(tpss)
	ratio := median(ratios)
	note := costNote(median(cpus), median(reds), "ride")
	if len(ratios) > 1 {
		note += fmt.Sprintf("; %d rounds, ratio %.3g–%.3g", len(ratios), slices.Min(ratios), slices.Max(ratios))
	}
	r.rep.add(Row{Section: "order-create", Name: fmt.Sprintf("HTTP order-create, %d conns", orderClients), Value: median(rates), Unit: "rides/s",
		Ceiling: fmt.Sprintf("pgbench same transaction -c %d -M prepared", orderClients), CeilingValue: r.orderCeiling,
		Ratio: ratio, Target: "ratio ≥ 0.6", Met: met(ratio >= 0.6), Note: note})
	// Medians of the rounds' ratios, as for the HTTP row: each round's three runs are back to back.
	migratedRatio, notifyRatio := median(migratedRatios), median(notifyRatios)
	r.rep.add(Row{Section: "order-create", Name: "pgbench order-create transaction, schema as migrated", Value: median(tpss), Unit: "tx/s",
		Ceiling: "same, outbox triggers disabled (no NOTIFY)", CeilingValue: median(bares), Ratio: migratedRatio,
		Target: "ratio ≥ 0.9", Met: met(migratedRatio >= 0.9),
		Note: fmt.Sprintf("with the old per-commit NOTIFY trigger: %.0f tx/s (ratio %.2f); relays poll instead (docs/performance.md#outbox-without-notify)",
			median(notifies), notifyRatio)})
	// Per ride over every row of the stage (flagdown's and pgbench's, the same two INSERTs): the
	// deltas of flagdown's rounds alone are 0 when they fit in pages pgbench left with free space.
	total, heap, err := tableBytes(ctx, st.deps.DB)
	if err != nil {
		return err
	}
	var all int64
	if err := st.deps.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM rides`).Scan(&all); err != nil {
		return err
	}
	if all > 0 {
		r.rep.add(Row{Section: "memory", Name: "PostgreSQL per ride (rides + outbox, with indexes)",
			Value: float64(total) / float64(all), Unit: "B/ride",
			Ceiling: "heap alone (no indexes)", CeilingValue: float64(heap) / float64(all),
			Note: fmt.Sprintf("pg_total_relation_size over all %d rides of the stage (%d through flagdown, %d bytes grown in its rounds); outbox rows unpublished (relay off); published rows are pruned after FLAGDOWN_RETAIN_OUTBOX", all, rides, grownTotal)})
	}
	return nil
}

// oldNotifyTrigger is the outbox trigger of migration 00001, dropped by 00008: one pg_notify per
// transaction that writes outbox rows, which serializes those commits on the notify-queue lock.
const oldNotifyTrigger = `CREATE OR REPLACE FUNCTION outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('flagdown_outbox', TG_TABLE_SCHEMA);
    RETURN NULL;
END;
$$;
CREATE TRIGGER outbox_notify AFTER INSERT ON outbox FOR EACH STATEMENT EXECUTE FUNCTION outbox_notify()`

// pgbenchNotifyAB runs pgbench's order-create transaction for dur twice in the stage's schema:
// with every user trigger of outbox disabled (the transaction without NOTIFY), then with the old
// NOTIFY trigger re-created (dropped again after); it returns both transactions/s.
func (r *runner) pgbenchNotifyAB(ctx context.Context, db *pgstore.DB, databaseURL, schema string, dur time.Duration) (bare, notify float64, err error) {
	if _, err = db.Pool.Exec(ctx, `ALTER TABLE outbox DISABLE TRIGGER USER`); err != nil {
		return 0, 0, err
	}
	bare, err = pgbenchOrderCreate(ctx, r.o.PGBench, databaseURL, schema, orderClients, dur)
	if _, e := db.Pool.Exec(context.WithoutCancel(ctx), `ALTER TABLE outbox ENABLE TRIGGER USER`); err == nil {
		err = e
	}
	if err != nil {
		return 0, 0, err
	}
	if _, err = db.Pool.Exec(ctx, oldNotifyTrigger); err != nil {
		return 0, 0, err
	}
	notify, err = pgbenchOrderCreate(ctx, r.o.PGBench, databaseURL, schema, orderClients, dur)
	if _, e := db.Pool.Exec(context.WithoutCancel(ctx), `DROP TRIGGER outbox_notify ON outbox; DROP FUNCTION outbox_notify()`); err == nil {
		err = e
	}
	return bare, notify, err
}
