package pgstore_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/pgstore"
)

// TestOnOutboxCommitRunsAfterEachCommitWithAnOutboxRow checks the in-process wake-up of the relay:
// the hook runs once per committed transaction that wrote an outbox row (Tx with InsertOutbox or a
// writing InsertOutboxOnce, CreateRide), after the commit, and never for a rollback, a transaction
// without an outbox row, or an InsertOutboxOnce that wrote nothing.
func TestOnOutboxCommitRunsAfterEachCommitWithAnOutboxRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testkit.DB(t)
	var calls atomic.Int64
	var unpublishedAtCall atomic.Int64
	db.OnOutboxCommit(func() {
		calls.Add(1)
		// Runs after the commit: another connection sees the rows.
		var n int64
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE published_at IS NULL`).Scan(&n); err != nil {
			t.Error(err)
		}
		unpublishedAtCall.Store(n)
	})
	ev := pgstore.OutboxEvent{Type: "io.flagdown.test.v1", Source: "/test", Subject: "ride-a", Data: map[string]int{"n": 1}}
	step := func(what string, want int64, fn func(pgx.Tx) error) {
		t.Helper()
		before := calls.Load()
		_ = db.Tx(ctx, fn)
		if got := calls.Load() - before; got != want {
			t.Fatalf("%s: hook ran %d times, want %d", what, got, want)
		}
	}

	step("two outbox rows", 1, func(tx pgx.Tx) error {
		for range 2 {
			if _, err := pgstore.InsertOutbox(ctx, tx, ev); err != nil {
				return err
			}
		}
		return nil
	})
	if got := unpublishedAtCall.Load(); got != 2 {
		t.Fatalf("the hook saw %d committed rows, want 2", got)
	}
	step("rolled back", 0, func(tx pgx.Tx) error {
		if _, err := pgstore.InsertOutbox(ctx, tx, ev); err != nil {
			return err
		}
		return errors.New("roll back")
	})
	step("no outbox row", 0, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `SELECT 1`)
		return err
	})
	id := pgstore.OnceID("test", "once")
	once := func(tx pgx.Tx) error { _, err := pgstore.InsertOutboxOnce(ctx, tx, id, ev); return err }
	step("InsertOutboxOnce, new", 1, once)
	step("InsertOutboxOnce, existing", 0, once)

	before := calls.Load()
	ride := &dispatch.Ride{ID: "0b5a3c1e-8f0d-4e8b-9c61-3a7d2f4e5b60", RiderID: "rider-a",
		Pickup: dispatch.Point{Lat: 40.7569, Lng: -73.9903}, Dropoff: dispatch.Point{Lat: 40.7128, Lng: -73.9961}}
	if _, err := pgstore.CreateRide(ctx, db, ride, "", pgstore.OutboxEvent{Type: "io.flagdown.test.v1", Source: "/test",
		Subject: ride.ID, Data: map[string]string{"ride_id": ride.ID}}); err != nil {
		t.Fatal(err)
	}
	if got := calls.Load() - before; got != 1 {
		t.Fatalf("CreateRide: hook ran %d times, want 1", got)
	}
	before = calls.Load()
	if _, err := pgstore.CreateRide(ctx, db, ride, "", pgstore.OutboxEvent{Type: "io.flagdown.test.v1", Source: "/test",
		Subject: ride.ID, Data: map[string]string{"ride_id": ride.ID}}); err == nil {
		t.Fatal("CreateRide of an existing ride id succeeded")
	}
	if got := calls.Load() - before; got != 0 {
		t.Fatalf("failed CreateRide: hook ran %d times, want 0", got)
	}

	db.OnOutboxCommit(nil)
	step("hook removed", 0, func(tx pgx.Tx) error { _, err := pgstore.InsertOutbox(ctx, tx, ev); return err })
}
