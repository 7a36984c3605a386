package lifecycle_test

import (
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/flagdown/flagdown/internal/testkit/fntest"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/lifecycle"
	"github.com/flagdown/flagdown/shared/pgstore"
)

// assignment reads driverID's driver_assignments row.
func assignment(t *testing.T, env *fntest.TimeoutEnv, driverID string) pgstore.AssignmentRow {
	t.Helper()
	rows, err := pgstore.AssignmentsOf(t.Context(), env.D.DB.Pool, []string{driverID})
	if err != nil {
		t.Fatal(err)
	}
	a, ok := rows[driverID]
	if !ok {
		t.Fatalf("no driver_assignments row for %s", driverID)
	}
	return a
}

// The stranded-driver bug: a write of "driver on ride R" that lands after the ride completed (a
// slow accept, a reconcile snapshot taken before the completion, a retried handler) used to put the
// driver back on R for good. Every assignment now carries its epoch; the late write is a no-op.
func TestALateAssignmentCannotStrandADriver(t *testing.T) {
	t.Parallel()
	env := fntest.NewTimeoutEnv(t, nil)
	env.Ping(t, "d-1", fntest.Offset(pickup, 100, 0))
	rideID := offered(t, env, "r-1", "d-1")
	if status, body := env.AcceptRide(t, rideID, "d-1"); status != http.StatusOK {
		t.Fatalf("accept: %d %v", status, body)
	}
	onRide := assignment(t, env, "d-1") // what a slow writer or a snapshot holds
	for _, action := range []string{"start", "complete"} {
		if status, body := env.RideAction(t, rideID, action, fntest.JSON{"driver_id": "d-1"}); status != http.StatusOK {
			t.Fatalf("%s: %d %v", action, status, body)
		}
	}
	if got := env.DriverField(t, "d-1", "ride"); got != "" {
		t.Fatalf("after complete, Redis ride = %q, want none", got)
	}

	res, err := env.D.Redis.ApplyAssignment(t.Context(), onRide.Assignment)
	if err != nil {
		t.Fatal(err)
	}
	if res != 0 {
		t.Errorf("late assignment (epoch %d) result = %d, want a no-op", onRide.Epoch, res)
	}
	if got := env.DriverField(t, "d-1", "ride"); got != "" {
		t.Errorf("after the late write, Redis ride = %q, want none", got)
	}
	if got, want := env.DriverField(t, "d-1", "status"), "available"; got != want {
		t.Errorf("status = %q, want %q", got, want)
	}
	if !env.InGeo(t, "d-1") {
		t.Errorf("the free driver is not in the available set")
	}
	if n, err := env.Reconcile.Run(t.Context()); err != nil || n.AssignmentsRepaired != 0 {
		t.Errorf("reconcile after a no-op = %+v, %v; want nothing to repair", n, err)
	}
}

// Reconcile repairs both directions, and only what is wrong: a driver Redis shows on a ride
// PostgreSQL completed is freed; a driver Redis lost is put back on his ride.
func TestReconcileRepairsAssignmentsBothWays(t *testing.T) {
	t.Parallel()
	env := fntest.NewTimeoutEnv(t, func(c *config.Config) { c.ReconcileGrace = 0 })
	ctx := t.Context()
	env.Ping(t, "d-free", fntest.Offset(pickup, 100, 0))
	done := offered(t, env, "r-free", "d-free")
	if status, body := env.AcceptRide(t, done, "d-free"); status != http.StatusOK {
		t.Fatalf("accept: %d %v", status, body)
	}
	stale := assignment(t, env, "d-free")
	for _, action := range []string{"start", "complete"} {
		if status, body := env.RideAction(t, done, action, fntest.JSON{"driver_id": "d-free"}); status != http.StatusOK {
			t.Fatalf("%s: %d %v", action, status, body)
		}
	}
	env.Ping(t, "d-lost", fntest.Offset(pickup, 150, 0))
	rideLost := offered(t, env, "r-lost", "d-lost")
	if status, body := env.AcceptRide(t, rideLost, "d-lost"); status != http.StatusOK {
		t.Fatalf("accept: %d %v", status, body)
	}

	if rep, err := env.Reconcile.Run(ctx); err != nil || rep.AssignmentsRepaired != 0 {
		t.Fatalf("reconcile of a healthy world = %+v, %v; want no repairs", rep, err)
	}
	// Corrupt both directions behind flagdown's back: d-free back on the completed ride (as the old
	// unversioned write did), d-lost's hash gone (a Redis restart) and re-created by a ping.
	rdb := env.D.Redis.Client()
	if err := rdb.HSet(ctx, env.Key("driver:d-free"), "ride", done, "status", "busy", "epoch", stale.Epoch).Err(); err != nil {
		t.Fatal(err)
	}
	rdb.SAdd(ctx, env.Key("onride"), "d-free")
	rdb.Del(ctx, env.Key("driver:d-lost"))
	env.Ping(t, "d-lost", fntest.Offset(pickup, 160, 0))
	if !env.InGeo(t, "d-lost") {
		t.Fatalf("setup: d-lost, lost by Redis, should look available after a ping")
	}

	rep, err := env.Reconcile.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rep.AssignmentsRepaired, 2; got != want {
		t.Errorf("assignments_repaired = %d, want %d", got, want)
	}
	if got := env.DriverField(t, "d-free", "ride"); got != "" {
		t.Errorf("d-free Redis ride = %q, want none", got)
	}
	if got, want := env.DriverField(t, "d-lost", "ride"), rideLost; got != want {
		t.Errorf("d-lost Redis ride = %q, want %q", got, want)
	}
	if env.InGeo(t, "d-lost") {
		t.Errorf("d-lost, on a ride, is in the available set")
	}
	if rep, err := env.Reconcile.Run(ctx); err != nil || rep.AssignmentsRepaired != 0 {
		t.Errorf("second reconcile = %+v, %v; want nothing left", rep, err)
	}
}

// A ride re-opened because its driver went offline starts a fresh retry budget: attempts and the
// budget clock restart, so it is matched again instead of being UNMATCHED at once.
func TestAReopenedRideStartsAFreshRetryBudget(t *testing.T) {
	t.Parallel()
	env := fntest.NewTimeoutEnv(t, nil)
	lc := env.D.Lifecycle("/test")
	env.Ping(t, "d-1", fntest.Offset(pickup, 100, 0))
	rideID := offered(t, env, "r-1", "d-1")
	if status, body := env.AcceptRide(t, rideID, "d-1"); status != http.StatusOK {
		t.Fatalf("accept: %d %v", status, body)
	}
	// The ride used nearly all of its budget before it was accepted.
	env.Exec(t, `UPDATE rides SET match_attempts = $2, match_started_at = now() - interval '1 hour' WHERE id = $1`,
		rideID, env.D.Config.RetryMaxAttempts-1)
	env.ExpireHeartbeat(t, "d-1")
	if out, err := lc.DriverOffline(t.Context(), "d-1", "test", nil); err != nil || out != lifecycle.OutcomeDone {
		t.Fatalf("DriverOffline = %q, %v", out, err)
	}
	if n := env.Count(t, `SELECT count(*) FROM rides WHERE id = $1 AND status = 'REQUESTED' AND match_attempts = 0
		AND match_started_at > now() - interval '1 minute'`, rideID); n != 1 {
		t.Fatalf("re-opened ride does not have a fresh budget")
	}
	// Nobody else is around: the next attempt arms a retry instead of giving up.
	if got, want := env.MatchRide(t, rideID), "no_driver"; got != want {
		t.Errorf("match after re-open = %q, want %q", got, want)
	}
}

// Every path locks the ride before its offers: a late accept racing the offer's expiry never
// deadlocks, and exactly one of them decides the offer.
func TestALateAcceptRacingTheOfferExpiryDoesNotDeadlock(t *testing.T) {
	t.Parallel()
	for round := range 6 {
		env := fntest.NewTimeoutEnv(t, nil)
		lc := env.D.Lifecycle("/test")
		env.Ping(t, "d-1", fntest.Offset(pickup, 100, 0))
		rideID := offered(t, env, "r-1", "d-1")
		// Inside the expiry's slack, still open for the accept (by PostgreSQL's clock).
		env.Exec(t, `UPDATE offers SET expires_at = now() + interval '300 milliseconds' WHERE ride_id = $1`, rideID)
		var wg sync.WaitGroup
		var acceptErr, expireErr error
		start := make(chan struct{})
		wg.Go(func() { <-start; acceptErr = lc.Accept(t.Context(), rideID, "d-1") })
		wg.Go(func() { <-start; _, expireErr = lc.OfferTimedOut(t.Context(), "d-1", nil) })
		close(start)
		wg.Wait()
		if expireErr != nil {
			t.Fatalf("round %d: offer expiry: %v", round, expireErr)
		}
		var de *dispatch.Error
		if acceptErr != nil && (!errors.As(acceptErr, &de) || de.Code != dispatch.CodeConflict) {
			t.Fatalf("round %d: accept: %v, want success or a conflict (no deadlock)", round, acceptErr)
		}
		accepted := env.Count(t, `SELECT count(*) FROM rides WHERE id = $1 AND status = 'ACCEPTED'`, rideID)
		offerAccepted := env.Count(t, `SELECT count(*) FROM offers WHERE ride_id = $1 AND status = 'ACCEPTED'`, rideID)
		offerExpired := env.Count(t, `SELECT count(*) FROM offers WHERE ride_id = $1 AND status = 'EXPIRED'`, rideID)
		if (acceptErr == nil) != (accepted == 1) || offerAccepted+offerExpired != 1 || accepted != offerAccepted {
			t.Errorf("round %d: accept err %v, ride accepted %d, offer accepted %d expired %d: want one decision",
				round, acceptErr, accepted, offerAccepted, offerExpired)
		}
	}
}

// An offer's window is PostgreSQL's: expires_at is PostgreSQL's clock plus the window, the offer lock
// shows the same instant, and its TTL is the rest of the window.
func TestTheOfferWindowComesFromPostgreSQL(t *testing.T) {
	t.Parallel()
	env := fntest.NewTimeoutEnv(t, nil)
	env.Ping(t, "d-1", fntest.Offset(pickup, 100, 0))
	rideID := offered(t, env, "r-1", "d-1")
	window := env.D.Config.OfferWindow
	var skewMs float64
	var expiresAt time.Time
	if err := env.D.DB.Pool.QueryRow(t.Context(), `SELECT expires_at, extract(epoch FROM expires_at - created_at - $2 * interval '1 millisecond') * 1000
		FROM offers WHERE ride_id = $1`, rideID, window.Milliseconds()).Scan(&expiresAt, &skewMs); err != nil {
		t.Fatal(err)
	}
	if skewMs < 0 || skewMs > 1000 {
		t.Errorf("expires_at - created_at - window = %.1f ms, want 0..1000 (both from PostgreSQL)", skewMs)
	}
	lock, err := env.D.Redis.OfferLock(t.Context(), "d-1")
	if err != nil || lock == nil {
		t.Fatalf("offer lock = %v, %v", lock, err)
	}
	if !lock.ExpiresAt.Equal(expiresAt.Truncate(time.Microsecond)) && lock.ExpiresAt.Sub(expiresAt).Abs() > time.Millisecond {
		t.Errorf("lock expires_at %s, PostgreSQL %s: want the same instant", lock.ExpiresAt, expiresAt)
	}
	if ttl := env.KeyTTL(t, "offer:d-1"); ttl > window || ttl < window-2*time.Second {
		t.Errorf("lock TTL = %s, want just under %s", ttl, window)
	}
}

// Redis lost an on-ride driver (a restart) and his next ping makes him look available: the matcher
// must not offer him a second ride (PostgreSQL is asked before the offer), and the match repairs
// his Redis state from PostgreSQL.
func TestAnOnRideDriverRedisLostIsNeverOffered(t *testing.T) {
	t.Parallel()
	env := fntest.NewTimeoutEnv(t, nil)
	ctx := t.Context()
	env.Ping(t, "d-1", fntest.Offset(pickup, 100, 0))
	first := offered(t, env, "r-1", "d-1")
	if status, body := env.AcceptRide(t, first, "d-1"); status != http.StatusOK {
		t.Fatalf("accept: %d %v", status, body)
	}
	rdb := env.D.Redis.Client()
	rdb.Del(ctx, env.Key("driver:d-1"), env.Key("onride"))
	env.Ping(t, "d-1", fntest.Offset(pickup, 110, 0))
	if !env.InGeo(t, "d-1") {
		t.Fatalf("setup: d-1 should look available after Redis lost him")
	}
	second := env.CreateRide(t, "r-2", pickup, dropoff)
	if got, want := env.MatchRide(t, second), "no_driver"; got != want {
		t.Errorf("match of a second ride = %q, want %q (the only driver is on a ride)", got, want)
	}
	if n := env.Count(t, `SELECT count(*) FROM offers WHERE ride_id = $1`, second); n != 0 {
		t.Errorf("offers of the second ride = %d, want 0", n)
	}
	if got := env.DriverField(t, "d-1", "ride"); got != first {
		t.Errorf("Redis ride of d-1 after the match = %q, want %q (repaired from PostgreSQL)", got, first)
	}
	if env.InGeo(t, "d-1") {
		t.Errorf("d-1 is still in the available set")
	}
}

// A driver stranded before assignments had versions (Redis holds a ride, no epoch, PostgreSQL has
// no row for him and no active ride) is found through his pings and freed by reconcile.
func TestReconcileFreesADriverStrandedBeforeVersions(t *testing.T) {
	t.Parallel()
	env := fntest.NewTimeoutEnv(t, func(c *config.Config) { c.ReconcileGrace = 0 })
	ctx := t.Context()
	env.Ping(t, "d-old", fntest.Offset(pickup, 100, 0))
	ghostRide := "0b6f1c1e-3a7d-4a55-9f1e-000000000001"
	if err := env.D.Redis.Client().HSet(ctx, env.Key("driver:d-old"), "ride", ghostRide, "status", "busy").Err(); err != nil {
		t.Fatal(err)
	}
	env.D.Redis.Client().ZRem(ctx, env.Key("geo:available"), "d-old")
	env.Ping(t, "d-old", fntest.Offset(pickup, 101, 0)) // his ping puts him in the on-ride set
	rep, err := env.Reconcile.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rep.AssignmentsRepaired, 1; got != want {
		t.Errorf("assignments_repaired = %d, want %d", got, want)
	}
	if got := env.DriverField(t, "d-old", "ride"); got != "" {
		t.Errorf("Redis ride of d-old = %q, want none", got)
	}
	env.Ping(t, "d-old", fntest.Offset(pickup, 102, 0))
	if !env.InGeo(t, "d-old") {
		t.Errorf("freed d-old is not available after his next ping")
	}
}
