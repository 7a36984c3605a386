package lifecycle_test

import (
	"net/http"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flagdown/flagdown/internal/testkit/fntest"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/pgstore"
)

// Review item 3 of issue 17: the fencing token must outlive the driver hash. Redis loses d-1's hash
// after his ride completed (evicted, or expired with its state TTL), and a write of "on the ride"
// taken before the completion (a slow accept, a retried handler, a reconcile snapshot) lands then:
// it must be a no-op, not strand him busy on a finished ride.
func TestALateAssignmentAfterTheHashWasLostIsANoop(t *testing.T) {
	t.Parallel()
	env := fntest.NewTimeoutEnv(t, nil)
	ctx := t.Context()
	env.Ping(t, "d-1", fntest.Offset(pickup, 100, 0))
	rideID := offered(t, env, "r-1", "d-1")
	if status, body := env.AcceptRide(t, rideID, "d-1"); status != http.StatusOK {
		t.Fatalf("accept: %d %v", status, body)
	}
	onRide := assignment(t, env, "d-1") // what the late writer holds
	for _, action := range []string{"start", "complete"} {
		if status, body := env.RideAction(t, rideID, action, fntest.JSON{"driver_id": "d-1"}); status != http.StatusOK {
			t.Fatalf("%s: %d %v", action, status, body)
		}
	}
	if err := env.D.Redis.Client().Del(ctx, env.Key("driver:d-1")).Err(); err != nil {
		t.Fatal(err)
	}

	res, err := env.D.Redis.ApplyAssignment(ctx, onRide.Assignment)
	if err != nil {
		t.Fatal(err)
	}
	if res != 0 {
		t.Errorf("late assignment (token %d) after the hash was lost: result = %d, want a no-op", onRide.Epoch, res)
	}
	if got := env.DriverField(t, "d-1", "ride"); got != "" {
		t.Errorf("after the late write, Redis ride = %q, want none (the ride completed)", got)
	}
}

// Review item 2 of issue 17: PostgreSQL moved backwards (a failover to an asynchronous replica, a
// point-in-time restore) and lost the transactions that freed d-1, which Redis had applied: Redis
// holds a newer token than PostgreSQL. Reconcile must take PostgreSQL's word (bump the token past
// Redis's under the driver's row lock, then apply), not repeat a compare-and-set that can never win.
func TestReconcileTakesPostgreSQLsWordWhenRedisIsAhead(t *testing.T) {
	t.Parallel()
	env := fntest.NewTimeoutEnv(t, func(c *config.Config) { c.ReconcileGrace = 0 })
	ctx := t.Context()
	env.Ping(t, "d-1", fntest.Offset(pickup, 100, 0))
	rideID := offered(t, env, "r-1", "d-1")
	if status, body := env.AcceptRide(t, rideID, "d-1"); status != http.StatusOK {
		t.Fatalf("accept: %d %v", status, body)
	}
	pg := assignment(t, env, "d-1")
	// What Redis applied of the transactions PostgreSQL lost: d-1 free and available, at a token
	// PostgreSQL never reached.
	ahead := pg.Epoch + 1000
	rdb := env.D.Redis.Client()
	if err := rdb.HSet(ctx, env.Key("driver:d-1"), "ride", "", "status", "available", "epoch", ahead).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, env.Key("fence:d-1"), ahead, 0).Err(); err != nil {
		t.Fatal(err)
	}
	rdb.SRem(ctx, env.Key("onride"), "d-1")
	p := fntest.Offset(pickup, 100, 0)
	rdb.GeoAdd(ctx, env.Key("geo:available"), &redis.GeoLocation{Name: "d-1", Longitude: p.Lng, Latitude: p.Lat})

	rep, err := env.Reconcile.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rep.AssignmentsRepaired, 1; got != want {
		t.Errorf("assignments_repaired = %d, want %d", got, want)
	}
	if got := env.DriverField(t, "d-1", "ride"); got != rideID {
		t.Errorf("Redis ride of d-1 after reconcile = %q, want %q (PostgreSQL's word)", got, rideID)
	}
	if env.InGeo(t, "d-1") {
		t.Errorf("d-1, on a ride in PostgreSQL, is still in the available set")
	}
	if got := assignment(t, env, "d-1"); got.Epoch <= ahead || got.RideID != rideID {
		t.Errorf("PostgreSQL assignment after reconcile = token %d ride %q, want a token past %d and ride %q", got.Epoch, got.RideID, ahead, rideID)
	}
	if rep, err := env.Reconcile.Run(ctx); err != nil || rep.AssignmentsRepaired != 0 {
		t.Errorf("second reconcile = %+v, %v; want nothing left", rep, err)
	}
	// The next change of d-1 (his complete) reaches Redis: the tokens PostgreSQL hands out are past
	// what Redis holds.
	for _, action := range []string{"start", "complete"} {
		if status, body := env.RideAction(t, rideID, action, fntest.JSON{"driver_id": "d-1"}); status != http.StatusOK {
			t.Fatalf("%s: %d %v", action, status, body)
		}
	}
	if got := env.DriverField(t, "d-1", "ride"); got != "" {
		t.Errorf("Redis ride of d-1 after complete = %q, want none", got)
	}
}

// After PostgreSQL moved backwards, the drivers Redis holds free and PostgreSQL holds free are not
// divergent, but their fences are past every token PostgreSQL's sequence will hand out for a
// while: one reconcile run moves the sequence past P fence:max, and the next change of such a
// driver (an accept) reaches Redis at once.
func TestReconcileMovesTheTokenSequencePastRedis(t *testing.T) {
	t.Parallel()
	env := fntest.NewTimeoutEnv(t, func(c *config.Config) { c.ReconcileGrace = 0 })
	ctx := t.Context()
	env.Ping(t, "d-1", fntest.Offset(pickup, 100, 0))
	const ahead = 1_000_000 // tokens of the transactions PostgreSQL lost
	rdb := env.D.Redis.Client()
	for _, k := range []string{"fence:d-1", "fence:max"} {
		if err := rdb.Set(ctx, env.Key(k), ahead, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := env.Reconcile.Run(ctx); err != nil {
		t.Fatal(err)
	}
	last, err := pgstore.LastAssignmentToken(ctx, env.D.DB.Pool)
	if err != nil {
		t.Fatal(err)
	}
	if last < ahead {
		t.Errorf("last token of the sequence after reconcile = %d, want at least %d (Redis's highest)", last, ahead)
	}
	rideID := offered(t, env, "r-1", "d-1")
	if status, body := env.AcceptRide(t, rideID, "d-1"); status != http.StatusOK {
		t.Fatalf("accept: %d %v", status, body)
	}
	if got := env.DriverField(t, "d-1", "ride"); got != rideID {
		t.Errorf("Redis ride of d-1 right after his accept = %q, want %q", got, rideID)
	}
	if env.InGeo(t, "d-1") {
		t.Errorf("d-1, on a ride, is in the available set")
	}
}
