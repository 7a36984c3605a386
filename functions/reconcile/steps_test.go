package function_test

import (
	"net/http"
	"testing"
	"time"

	reconcile "github.com/flagdown/flagdown/functions/reconcile"
	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/internal/testkit/fntest"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/host"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// TestAFailingStepDoesNotStopTheOthers: with Redis unreachable, the steps that need Redis fail and
// the run answers their error (503), but the steps PostgreSQL alone decides still run in the same
// pass: an ACCEPTED ride past its pickup deadline is re-opened (its Redis effects left to a later
// run), so one broken dependency does not hold back every repair until it is back.
func TestAFailingStepDoesNotStopTheOthers(t *testing.T) {
	t.Parallel()
	env := fntest.NewTimeoutEnv(t, nil)
	env.Ping(t, "d-late", fntest.Offset(pickup, 100, 0))
	late := accepted(t, env, "r-late", "d-late")
	env.Exec(t, `UPDATE rides SET accepted_at = now() - interval '2 hours', updated_at = now() - interval '2 hours' WHERE id = $1`, late)

	// The same deployment, but its Redis is a port nothing listens on.
	dead := testkit.UnreachableRedis(t)
	cfg := env.D.Config
	store := redisstore.New(dead, cfg.RedisPrefix, cfg.HeartbeatTTL, cfg.MaxSpeedMPS)
	broken := reconcile.New(host.New(cfg, env.D.DB, store, env.D.Log, nil))

	rep, err := broken.Run(t.Context())
	if err == nil || dispatch.ErrorCode(err) != dispatch.CodeUnavailable {
		t.Errorf("run with Redis unreachable: error %v, want unavailable", err)
	}
	if rep.PickupsOverdue != 1 {
		t.Errorf("pickups_overdue = %d with Redis unreachable, want 1: the PostgreSQL steps must run anyway", rep.PickupsOverdue)
	}
	if got, want := env.GetRide(t, late)["status"], "REQUESTED"; got != want {
		t.Errorf("ride past its pickup deadline: status %v, want %v", got, want)
	}
	// The answer through the handler is the first failure's status.
	status, _ := fntest.Do(t, broken, http.MethodPost, "/", nil, fntest.InternalHeaders())
	if status != http.StatusServiceUnavailable {
		t.Errorf("handler status = %d with Redis unreachable, want 503", status)
	}
}

// TestRebuildAfterRedisLostItsData: Redis restarted empty (its data for this deployment gone) while
// a ride had a PENDING offer, another was ACCEPTED and a third waited on its retry timer. The next
// run sees a Redis generation other than the one PostgreSQL recorded and rebuilds, without waiting
// for the grace (these were all changed just now): the offer's lock and timer at its own deadline,
// the driver's assignment, and the retry timer re-armed (not a match at once, on a GEO index the
// drivers have not re-filled yet). The run after it rebuilds nothing. A first run on a fresh
// deployment only records the generation.
func TestRebuildAfterRedisLostItsData(t *testing.T) {
	t.Parallel()
	env := fntest.NewTimeoutEnv(t, nil) // the default grace: nothing here is old enough to repair
	ctx := t.Context()
	if rep := run(t, env); rep.RedisRebuilt != 0 {
		t.Fatalf("first run on a fresh deployment: redis_rebuilt = %d, want 0 (only the generation is recorded)", rep.RedisRebuilt)
	}

	env.Ping(t, "d-offer", fntest.Offset(pickup, 100, 0))
	offeredRide := offered(t, env, "r-offer", "d-offer")
	var offerID string
	if err := env.D.DB.Pool.QueryRow(ctx, `SELECT id::text FROM offers WHERE ride_id = $1 AND status = 'PENDING'`,
		offeredRide).Scan(&offerID); err != nil {
		t.Fatal(err)
	}
	deadline, ok := env.Deadline(t, "offertimer:"+offerID)
	if !ok {
		t.Fatalf("the offer has no timer before the restart")
	}
	env.Ping(t, "d-acc", fntest.Offset(pickup, 150, 0))
	acceptedRide := accepted(t, env, "r-acc", "d-acc")
	waiting := env.CreateRide(t, "r-wait", fntest.Offset(pickup, 0, 40_000), dropoff) // nobody in reach
	if got, want := env.MatchRide(t, waiting), "no_driver"; got != want {
		t.Fatalf("match of the waiting ride = %q, want %q", got, want)
	}
	if !env.KeyExists(t, "retry:"+waiting) {
		t.Fatalf("the waiting ride has no retry timer before the restart")
	}

	if _, err := env.D.Redis.DeleteAll(ctx); err != nil { // the empty restart, for this prefix
		t.Fatal(err)
	}
	rep := run(t, env)
	if rep.RedisRebuilt != 1 {
		t.Errorf("redis_rebuilt = %d after the data loss, want 1", rep.RedisRebuilt)
	}
	t.Run("the pending offer's lock and timer", func(t *testing.T) {
		if rep.OffersRestored != 1 {
			t.Errorf("offers_restored = %d, want 1", rep.OffersRestored)
		}
		if !env.KeyExists(t, "offer:d-offer") {
			t.Errorf("d-offer has no offer lock")
		}
		dl, ok := env.Deadline(t, "offertimer:"+offerID)
		// Its remaining window, from PostgreSQL's expires_at, put on Redis's clock: the same
		// deadline within the time the rebuild took.
		if !ok || dl.Sub(deadline).Abs() > time.Second {
			t.Errorf("offer timer deadline = %v (indexed %v), want its deadline before the restart, %v", dl, ok, deadline)
		}
		if env.InGeo(t, "d-offer") {
			t.Errorf("d-offer is in the available set while his offer is PENDING")
		}
	})
	t.Run("the accepted ride's assignment", func(t *testing.T) {
		if got := env.DriverField(t, "d-acc", "ride"); got != acceptedRide {
			t.Errorf("d-acc's ride in Redis = %q, want %q", got, acceptedRide)
		}
	})
	t.Run("the retry timer re-armed, not fired", func(t *testing.T) {
		if rep.RetryTimersRearmed != 1 || rep.RidesRetried != 0 {
			t.Errorf("retry_timers_rearmed %d, rides_retried %d; want 1 and 0", rep.RetryTimersRearmed, rep.RidesRetried)
		}
		if !env.KeyExists(t, "retry:"+waiting) {
			t.Errorf("the waiting ride's retry timer is not armed")
		}
	})
	if again := run(t, env); again.RedisRebuilt != 0 || again.Total() != 0 {
		t.Errorf("second run: %+v, want no rebuild and no repair", again)
	}
}
