package lifecycle_test

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/internal/testkit/fntest"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/lifecycle"
)

var (
	pickup  = dispatch.Point{Lat: 40.7549, Lng: -73.9840}
	dropoff = dispatch.Point{Lat: 40.7306, Lng: -73.9866}
)

func ref() *lifecycle.EventRef {
	return &lifecycle.EventRef{Consumer: "expiry-notification", Source: "/flagdown/expiry-source", ID: "exp-" + testkit.ID()}
}

// offered creates a ride for rider and matches it; it fails unless driver got the offer.
func offered(t *testing.T, env *fntest.TimeoutEnv, rider, driver string) string {
	t.Helper()
	rideID := env.CreateRide(t, rider, pickup, dropoff)
	if got, want := env.MatchRide(t, rideID), "offered"; got != want {
		t.Fatalf("match outcome = %q, want %q", got, want)
	}
	if got := env.OfferedDriver(t, rideID); got != driver {
		t.Fatalf("offered driver = %q, want %q", got, driver)
	}
	return rideID
}

func TestDriverOfflineRacingReconcileReopensTheRideOnce(t *testing.T) {
	t.Parallel()
	for round := range 4 {
		t.Run(fmt.Sprintf("round %d", round), func(t *testing.T) {
			t.Parallel()
			env := fntest.NewTimeoutEnv(t, nil)
			lc := env.D.Lifecycle("/test")
			env.Ping(t, "d-1", fntest.Offset(pickup, 100, 0))
			rideID := offered(t, env, "r-1", "d-1")
			if status, body := env.AcceptRide(t, rideID, "d-1"); status != http.StatusOK {
				t.Fatalf("accept: %d %v", status, body)
			}
			env.ExpireHeartbeat(t, "d-1")

			// The expiry event and a reconcile pass (no event) handle the same expiry at once.
			refs := []*lifecycle.EventRef{ref(), nil, ref(), nil}
			outcomes := make([]lifecycle.Outcome, len(refs))
			errs := make([]error, len(refs))
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i, r := range refs {
				wg.Go(func() {
					<-start
					outcomes[i], errs[i] = lc.DriverOffline(t.Context(), "d-1", "test", r)
				})
			}
			close(start)
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			got := map[lifecycle.Outcome]int{}
			for _, o := range outcomes {
				got[o]++
			}
			// Usually one is done and the rest stale; when one call writes the status change and
			// another wins the ride row, both report done. The effects below are what must hold.
			if got[lifecycle.OutcomeDone] < 1 || got[lifecycle.OutcomeDone]+got[lifecycle.OutcomeStale] != len(refs) {
				t.Errorf("outcomes = %v, want done or stale, at least one done", outcomes)
			}
			if n := env.CountOutbox(t, events.RideReopened, rideID); n != 1 {
				t.Errorf("ride.reopened rows = %d, want 1", n)
			}
			if n := env.CountOutbox(t, events.DriverStatusChanged, "d-1"); n != 1 {
				t.Errorf("driver.status.changed rows = %d, want 1", n)
			}
			if n := env.Count(t, `SELECT count(*) FROM rides WHERE status = 'REQUESTED' AND driver_id IS NULL`); n != 1 {
				t.Errorf("REQUESTED rides without driver = %d, want 1", n)
			}
		})
	}
}

func TestAnOfferExpiryBeforeItsWindowClosedDoesNothing(t *testing.T) {
	t.Parallel()
	env := fntest.NewTimeoutEnv(t, nil) // 15 s window
	lc := env.D.Lifecycle("/test")
	env.Ping(t, "d-1", fntest.Offset(pickup, 100, 0))
	rideID := offered(t, env, "r-1", "d-1")

	// The lock is gone early (deleted by hand, a Redis restart): PostgreSQL's window still runs.
	env.DeleteKey(t, "offer:d-1")
	out, err := lc.OfferTimedOut(t.Context(), "d-1", ref())
	if err != nil {
		t.Fatal(err)
	}
	if out != lifecycle.OutcomeStale {
		t.Errorf("outcome = %q, want %q", out, lifecycle.OutcomeStale)
	}
	if got, want := env.OfferedDriver(t, rideID), "d-1"; got != want {
		t.Errorf("pending offer's driver = %q, want %q", got, want)
	}
	if n := env.CountOutbox(t, events.RideOfferExpired, rideID); n != 0 {
		t.Errorf("ride.offer.expired rows = %d, want 0", n)
	}
	if got := env.DriverField(t, "d-1", "missed"); got != "" {
		t.Errorf("missed = %q, want none", got)
	}
}

func TestAnOfferOfACancelledRideIsNotExpired(t *testing.T) {
	t.Parallel()
	env := fntest.NewTimeoutEnv(t, nil)
	lc := env.D.Lifecycle("/test")
	env.Ping(t, "d-1", fntest.Offset(pickup, 100, 0))
	rideID := offered(t, env, "r-1", "d-1")
	if status, body := env.RideAction(t, rideID, "cancel", fntest.JSON{"by": "rider", "rider_id": "r-1"}); status != http.StatusOK {
		t.Fatalf("cancel: %d %v", status, body)
	}
	out, err := lc.OfferTimedOut(t.Context(), "d-1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if out != lifecycle.OutcomeStale {
		t.Errorf("outcome = %q, want %q", out, lifecycle.OutcomeStale)
	}
	if got := env.DriverField(t, "d-1", "missed"); got != "" {
		t.Errorf("missed = %q, want none: he did not let an offer pass", got)
	}
}

func TestRetryDue(t *testing.T) {
	t.Parallel()

	t.Run("a ride with a live offer is not retried", func(t *testing.T) {
		t.Parallel()
		env := fntest.NewTimeoutEnv(t, nil)
		lc := env.D.Lifecycle("/test")
		env.Ping(t, "d-1", fntest.Offset(pickup, 100, 0))
		rideID := offered(t, env, "r-1", "d-1")
		before := env.Snapshot(t)
		out, err := lc.RetryDue(t.Context(), rideID, "retry_timer", nil)
		if err != nil {
			t.Fatal(err)
		}
		if out != lifecycle.OutcomeStale {
			t.Errorf("outcome = %q, want %q", out, lifecycle.OutcomeStale)
		}
		if diff := before.Diff(env.Snapshot(t)); diff != "" {
			t.Errorf("changed state: %s", diff)
		}
	})

	t.Run("a ride whose pending offer's window closed is retried", func(t *testing.T) {
		t.Parallel()
		env := fntest.NewTimeoutEnv(t, nil)
		lc := env.D.Lifecycle("/test")
		env.Ping(t, "d-1", fntest.Offset(pickup, 100, 0))
		env.Ping(t, "d-2", fntest.Offset(pickup, 200, 0))
		rideID := offered(t, env, "r-1", "d-1")
		// As if the window had passed and its timeout were lost.
		env.Exec(t, `UPDATE offers SET created_at = now() - interval '1 minute', expires_at = now() - interval '30 seconds' WHERE ride_id = $1`, rideID)
		out, err := lc.RetryDue(t.Context(), rideID, "reconcile", nil)
		if err != nil {
			t.Fatal(err)
		}
		if out != lifecycle.OutcomeDone {
			t.Fatalf("outcome = %q, want %q", out, lifecycle.OutcomeDone)
		}
		retries := env.OutboxData(t, rideID, events.RideRetry)
		if len(retries) != 1 || retries[0]["reason"] != "reconcile" || retries[0]["attempt"] != 1.0 {
			t.Errorf("ride.retry = %v, want one, reason reconcile, attempt 1", retries)
		}
		// The match it triggers closes the old offer and offers the ride to the next driver.
		if got, want := env.MatchEvent(t, fntest.Event{Type: events.RideRetry, Subject: rideID, Data: retries[0]}), "offered"; got != want {
			t.Fatalf("match = %q, want %q", got, want)
		}
		if got, want := env.OfferedDriver(t, rideID), "d-2"; got != want {
			t.Errorf("offered driver = %q, want %q", got, want)
		}
	})

	t.Run("an unknown ride is not found and the event is not recorded", func(t *testing.T) {
		t.Parallel()
		env := fntest.NewTimeoutEnv(t, nil)
		lc := env.D.Lifecycle("/test")
		for _, id := range []string{"00000000-0000-4000-8000-000000000000", "not-a-uuid"} {
			_, err := lc.RetryDue(t.Context(), id, "retry_timer", ref())
			var de *dispatch.Error
			if !errors.As(err, &de) || de.Code != dispatch.CodeNotFound {
				t.Errorf("RetryDue(%s) error = %v, want not_found", id, err)
			}
		}
		if n := env.Count(t, `SELECT count(*) FROM processed_events`); n != 0 {
			t.Errorf("processed_events rows = %d, want 0", n)
		}
	})
}

func TestTheSameEventForAnotherConsumerIsNotADuplicate(t *testing.T) {
	t.Parallel()
	env := fntest.NewTimeoutEnv(t, nil)
	lc := env.D.Lifecycle("/test")
	rideID := env.CreateRide(t, "r-1", pickup, dropoff)
	r := ref()
	other := *r
	other.Consumer = "another-consumer"
	for i, want := range []struct {
		ref *lifecycle.EventRef
		out lifecycle.Outcome
	}{{r, lifecycle.OutcomeDone}, {r, lifecycle.OutcomeDuplicate}, {&other, lifecycle.OutcomeDone}} {
		out, err := lc.RetryDue(t.Context(), rideID, "retry_timer", want.ref)
		if err != nil {
			t.Fatal(err)
		}
		if out != want.out {
			t.Errorf("call %d: outcome = %q, want %q", i, out, want.out)
		}
	}
	if n := env.CountOutbox(t, events.RideRetry, rideID); n != 2 {
		t.Errorf("ride.retry rows = %d, want 2", n)
	}
}

// A driver whose heartbeat key and deadline (hbdl) are both gone, as after Redis lost or evicted
// his state, is unknown, not offline: his ACCEPTED ride stays his.
func TestDriverOfflineWithoutHeartbeatDeadlineKeepsTheRide(t *testing.T) {
	t.Parallel()
	env := fntest.NewTimeoutEnv(t, nil)
	lc := env.D.Lifecycle("/test")
	env.Ping(t, "d-1", fntest.Offset(pickup, 100, 0))
	rideID := offered(t, env, "r-1", "d-1")
	if status, body := env.AcceptRide(t, rideID, "d-1"); status != http.StatusOK {
		t.Fatalf("accept: %d %v", status, body)
	}
	env.DeleteKey(t, "hb:d-1")
	if err := env.D.Redis.Client().HDel(t.Context(), env.Key("driver:d-1"), "hbdl").Err(); err != nil {
		t.Fatal(err)
	}
	if out, err := lc.DriverOffline(t.Context(), "d-1", "test", nil); err != nil || out != lifecycle.OutcomeStale {
		t.Errorf("DriverOffline without hbdl = %q, %v; want stale", out, err)
	}
	if n := env.CountOutbox(t, events.RideReopened, rideID); n != 0 {
		t.Errorf("ride.reopened rows = %d, want 0", n)
	}
}
