package function_test

import (
	"net/http"
	"testing"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/internal/testkit/fntest"
)

// rideOverdue is io.flagdown.ride.overdue.v1, spelled out so that this test also reads the
// platform from outside.
const rideOverdue = "io.flagdown.ride.overdue.v1"

// TestEveryRideMovesOrHasAReason: an ACCEPTED ride whose pickup deadline passed without a start is
// re-opened (ride.reopened, by system, reason pickup_overdue; its driver freed), an IN_PROGRESS
// ride past the trip ceiling raises ride.overdue once and keeps going, and a second run changes
// nothing. The defaults apply (a 30 min pickup deadline, a 3 h ceiling); the rides are dated back.
func TestEveryRideMovesOrHasAReason(t *testing.T) {
	t.Parallel()
	env := fntest.NewTimeoutEnv(t, nil)

	env.Ping(t, "d-pick", fntest.Offset(pickup, 100, 0))
	late := accepted(t, env, "r-pick", "d-pick")
	env.Exec(t, `UPDATE rides SET accepted_at = now() - interval '2 hours', updated_at = now() - interval '2 hours' WHERE id = $1`, late)

	env.Ping(t, "d-trip", fntest.Offset(pickup, 120, 0))
	long := accepted(t, env, "r-trip", "d-trip")
	if status, body := env.RideAction(t, long, "start", fntest.JSON{"driver_id": "d-trip"}); status != http.StatusOK {
		t.Fatalf("start: %d %v", status, body)
	}
	env.Exec(t, `UPDATE rides SET started_at = now() - interval '5 hours', updated_at = now() - interval '5 hours' WHERE id = $1`, long)

	// A ride within both limits is left alone.
	env.Ping(t, "d-ok", fntest.Offset(pickup, 140, 0))
	fine := accepted(t, env, "r-ok", "d-ok")

	run(t, env)

	t.Run("the ride past its pickup deadline is re-opened", func(t *testing.T) {
		if got, want := env.GetRide(t, late)["status"], "REQUESTED"; got != want {
			t.Errorf("status = %v, want %v", got, want)
		}
		reopened := env.OutboxData(t, late, events.RideReopened)
		if len(reopened) != 1 || reopened[0]["reason"] != "pickup_overdue" || reopened[0]["by"] != "system" ||
			reopened[0]["driver_id"] != "d-pick" {
			t.Errorf("ride.reopened = %v, want one, by system, reason pickup_overdue, driver d-pick", reopened)
		}
		if n := env.Count(t, `SELECT count(*) FROM driver_assignments WHERE driver_id = 'd-pick' AND ride_id IS NOT NULL`); n != 0 {
			t.Errorf("d-pick still holds a ride in driver_assignments")
		}
	})
	t.Run("the ride past the trip ceiling raises ride.overdue and goes on", func(t *testing.T) {
		if got, want := env.GetRide(t, long)["status"], "IN_PROGRESS"; got != want {
			t.Errorf("status = %v, want %v", got, want)
		}
		alerts := env.OutboxData(t, long, rideOverdue)
		if len(alerts) != 1 || alerts[0]["driver_id"] != "d-trip" || alerts[0]["status"] != "IN_PROGRESS" {
			t.Errorf("ride.overdue = %v, want one for d-trip, status IN_PROGRESS", alerts)
		}
	})
	t.Run("a ride within its limits is untouched", func(t *testing.T) {
		if got, want := env.GetRide(t, fine)["status"], "ACCEPTED"; got != want {
			t.Errorf("status = %v, want %v", got, want)
		}
	})

	before := env.Snapshot(t)
	run(t, env)
	if n := env.CountOutbox(t, rideOverdue, long); n != 1 {
		t.Errorf("ride.overdue rows after a second run = %d, want 1", n)
	}
	if n := env.CountOutbox(t, events.RideReopened, late); n != 1 {
		t.Errorf("ride.reopened rows after a second run = %d, want 1", n)
	}
	if diff := before.Diff(env.Snapshot(t)); diff != "" {
		t.Errorf("the second run changed state: %s", diff)
	}
}

// TestARideWhoseOffersKeepExpiringIsUnmatchedPastItsBudget: the retry budget
// (FLAGDOWN_RETRY_BUDGET, 3 min by default) holds for a ride whose offers keep expiring too, not
// only for one nobody could be offered: once it is spent, the next match makes the ride UNMATCHED
// (ride.unmatched, reason retry_budget) instead of offering it to the next driver.
func TestARideWhoseOffersKeepExpiringIsUnmatchedPastItsBudget(t *testing.T) {
	t.Parallel()
	env := fntest.NewTimeoutEnv(t, nil)
	env.Ping(t, "d-1", fntest.Offset(pickup, 100, 0))
	env.Ping(t, "d-2", fntest.Offset(pickup, 200, 0))
	rideID := offered(t, env, "r-1", "d-1")
	// Its first offer went out long ago and every offer since has expired: the budget is spent.
	env.Exec(t, `UPDATE rides SET match_started_at = now() - interval '10 minutes', created_at = now() - interval '10 minutes' WHERE id = $1`, rideID)
	env.Exec(t, `UPDATE offers SET created_at = now() - interval '1 minute', expires_at = now() - interval '30 seconds' WHERE ride_id = $1`, rideID)
	env.DeleteKey(t, "offer:d-1")
	if got, want := env.Expire(t, env.ExpiredEvent("offer:d-1")), "done"; got != want {
		t.Fatalf("offer expiry = %q, want %q", got, want)
	}
	expired := env.OutboxData(t, rideID, events.RideOfferExpired)
	if len(expired) != 1 {
		t.Fatalf("ride.offer.expired rows = %d, want 1", len(expired))
	}
	if got, want := env.MatchEvent(t, fntest.Event{Type: events.RideOfferExpired, Subject: rideID, Data: expired[0]}), "unmatched"; got != want {
		t.Errorf("match after the budget = %q, want %q", got, want)
	}
	if got, want := env.GetRide(t, rideID)["status"], "UNMATCHED"; got != want {
		t.Errorf("status = %v, want %v", got, want)
	}
	if got := env.OfferedDriver(t, rideID); got != "" {
		t.Errorf("pending offer to %s, want none", got)
	}
	unmatched := env.OutboxData(t, rideID, events.RideUnmatched)
	if len(unmatched) != 1 || unmatched[0]["reason"] != "retry_budget" {
		t.Errorf("ride.unmatched = %v, want one, reason retry_budget", unmatched)
	}
}
