package function_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/flagdown/flagdown/internal/testkit/fntest"
	"github.com/flagdown/flagdown/shared/config"
)

// An offer lock whose offer PostgreSQL holds decided (the accept's Redis effects were lost while
// Redis restarted, and the lock came back with its dump) is released by reconcile once the grace
// has passed, and counted; a lock whose offer PostgreSQL does not hold (a match whose commit is
// unknown) is left to its own deadline: it is the exclusion that keeps a second offer away.
func TestReconcileReleasesTheLockOfADecidedOffer(t *testing.T) {
	t.Parallel()
	const grace = time.Second
	env := fntest.NewTimeoutEnv(t, func(c *config.Config) {
		c.OfferWindow = time.Minute
		c.ReconcileGrace = grace
	})
	ctx := t.Context()
	rdb := env.D.Redis.Client()

	env.Ping(t, "d-1", fntest.Offset(pickup, 100, 0))
	rideID := offered(t, env, "r-1", "d-1")
	lock := env.Key("offer:d-1")
	held, err := rdb.Get(ctx, lock).Result()
	if err != nil {
		t.Fatalf("the offer's lock: %v", err)
	}
	if status, body := env.AcceptRide(t, rideID, "d-1"); status != http.StatusOK {
		t.Fatalf("accept: %d %v", status, body)
	}
	if n, _ := rdb.Exists(ctx, lock).Result(); n != 0 {
		t.Fatalf("the accept left the lock in place")
	}
	// What the lost effects leave: the lock back, with time left in its window.
	if err := rdb.Set(ctx, lock, held, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	// A lock on an offer PostgreSQL never recorded.
	ghost := env.Key("offer:d-2")
	if err := rdb.Set(ctx, ghost, `~{"offer_id":"00000000-0000-4000-8000-000000000000","ride_id":"x"}`, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(grace + 200*time.Millisecond) // the accept must be older than the grace: part of what is tested

	rep := run(t, env)
	if rep.OfferLocksReleased != 1 {
		t.Errorf("offer locks released = %d, want 1 (report %+v)", rep.OfferLocksReleased, rep)
	}
	if n, _ := rdb.Exists(ctx, lock).Result(); n != 0 {
		t.Errorf("the decided offer's lock is still held after reconcile")
	}
	if n, _ := rdb.Exists(ctx, ghost).Result(); n != 1 {
		t.Errorf("the lock of an offer PostgreSQL does not hold was released; it must wait for its deadline")
	}
	if rep := run(t, env); rep.OfferLocksReleased != 0 {
		t.Errorf("second run released %d locks, want 0", rep.OfferLocksReleased)
	}
}
