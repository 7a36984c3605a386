package function_test

import (
	"strings"
	"testing"
	"time"

	"github.com/flagdown/flagdown/events"
	match "github.com/flagdown/flagdown/functions/match"
	"github.com/flagdown/flagdown/internal/testkit/fntest"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/dispatch"
)

// retryEvent is the ride.retry event the expiry-notification function emits when rideID's retry
// timer fires.
func retryEvent(rideID string, attempt int) fntest.Event {
	return fntest.Event{Type: events.RideRetry, Source: "/flagdown/expiry-notification", Subject: rideID,
		Data: events.RideRetryData{RideID: rideID, Attempt: attempt, Reason: "retry_timer"}}
}

func TestNoDriverArmsARetryTimer(t *testing.T) {
	t.Parallel()
	const base = 30 * time.Second
	env := fntest.NewEnv(t, func(c *config.Config) { c.RetryBase, c.RetryMaxWait = base, 10*base })
	rideID := env.CreateRide(t, "r-1", pickup, dropoff)

	armedAt := time.Now()
	if got, want := env.MatchRide(t, rideID), match.OutcomeNoDriver; got != want {
		t.Fatalf("outcome = %q, want %q", got, want)
	}
	key := "retry:" + rideID
	if !env.KeyExists(t, key) {
		t.Fatalf("no retry timer %s", env.Key(key))
	}
	// Generous bounds: the TTL was set during the call, a little before we read it.
	if ttl := env.KeyTTL(t, key); ttl <= base-10*time.Second || ttl > base {
		t.Errorf("retry timer TTL = %s, want about %s", ttl, base)
	}
	deadline, ok := env.Deadline(t, key)
	if !ok {
		t.Fatalf("the retry timer's deadline is not indexed in %s", env.D.Redis.DeadlinesKey())
	}
	if lo, hi := armedAt.Add(base-time.Second), time.Now().Add(base+time.Second); deadline.Before(lo) || deadline.After(hi) {
		t.Errorf("deadline = %s, want within [%s, %s]", deadline, lo, hi)
	}
	if got, want := env.GetRide(t, rideID)["status"], "REQUESTED"; got != want {
		t.Errorf("status = %v, want %v", got, want)
	}

	// The second attempt waits twice as long.
	if got, want := env.MatchEvent(t, retryEvent(rideID, 1)), match.OutcomeNoDriver; got != want {
		t.Fatalf("second outcome = %q, want %q", got, want)
	}
	if ttl := env.KeyTTL(t, key); ttl <= 2*base-10*time.Second || ttl > 2*base {
		t.Errorf("retry timer TTL after the second attempt = %s, want about %s", ttl, 2*base)
	}
	if got, want := env.GetRide(t, rideID)["match_attempts"], 2.0; got != want {
		t.Errorf("match_attempts = %v, want %v", got, want)
	}
}

func TestARideNobodyCanTakeBecomesUnmatched(t *testing.T) {
	t.Parallel()

	t.Run("after the most attempts", func(t *testing.T) {
		t.Parallel()
		env := fntest.NewEnv(t, func(c *config.Config) { c.RetryMaxAttempts = 2 })
		env.Ping(t, "d-far", fntest.Offset(pickup, 30_000, 0)) // beyond every radius of two attempts
		rideID := env.CreateRide(t, "r-1", pickup, dropoff)
		if got, want := env.MatchRide(t, rideID), match.OutcomeNoDriver; got != want {
			t.Fatalf("first outcome = %q, want %q", got, want)
		}
		if got := env.CountOutbox(t, events.RideUnmatched, rideID); got != 0 {
			t.Fatalf("ride.unmatched after one attempt")
		}
		if got, want := env.MatchEvent(t, retryEvent(rideID, 1)), match.OutcomeUnmatched; got != want {
			t.Fatalf("second outcome = %q, want %q", got, want)
		}
		view := env.GetRide(t, rideID)
		if got, want := view["status"], "UNMATCHED"; got != want {
			t.Errorf("status = %v, want %v", got, want)
		}
		if got := env.Count(t, `SELECT count(*) FROM rides WHERE id = $1 AND status = 'UNMATCHED' AND match_attempts = 2`, rideID); got != 1 {
			t.Errorf("the ride is not UNMATCHED after 2 attempts in PostgreSQL")
		}
		unmatched := env.OutboxData(t, rideID, events.RideUnmatched)
		if len(unmatched) != 1 {
			t.Fatalf("ride.unmatched rows = %d, want 1", len(unmatched))
		}
		u := unmatched[0]
		if reason, _ := u["reason"].(string); u["attempts"] != 2.0 || u["rider_id"] != "r-1" || !strings.Contains(reason, "no available driver") {
			t.Errorf("ride.unmatched data = %v, want 2 attempts, rider r-1, the last attempt's reason", u)
		}
		// Nothing more happens to it: a late retry, a repeated event.
		if got, want := env.MatchEvent(t, retryEvent(rideID, 2)), match.OutcomeNotNeeded; got != want {
			t.Errorf("a later retry = %q, want %q", got, want)
		}
		if got := env.CountOutbox(t, events.RideUnmatched, rideID); got != 1 {
			t.Errorf("ride.unmatched rows = %d, want 1", got)
		}
		if status, body := env.RideAction(t, rideID, "cancel", fntest.JSON{"by": "rider", "rider_id": "r-1"}); status < 400 {
			t.Errorf("cancel of an UNMATCHED ride: %d %v, want an error", status, body)
		}
		// The rider may ask again.
		env.CreateRide(t, "r-1", pickup, dropoff)
	})

	t.Run("after the retry budget", func(t *testing.T) {
		t.Parallel()
		env := fntest.NewEnv(t, func(c *config.Config) { c.RetryBudget = time.Millisecond })
		rideID := env.CreateRide(t, "r-1", pickup, dropoff)
		fntest.Eventually(t, 5*time.Second, "the ride is older than the budget", func() bool {
			return env.Count(t, `SELECT count(*) FROM rides WHERE id = $1 AND created_at < now() - interval '10 milliseconds'`, rideID) == 1
		})
		if got, want := env.MatchRide(t, rideID), match.OutcomeUnmatched; got != want {
			t.Fatalf("outcome = %q, want %q", got, want)
		}
		if got, want := env.GetRide(t, rideID)["status"], "UNMATCHED"; got != want {
			t.Errorf("status = %v, want %v", got, want)
		}
		if got := env.CountOutbox(t, events.RideUnmatched, rideID); got != 1 {
			t.Errorf("ride.unmatched rows = %d, want 1", got)
		}
		if env.KeyExists(t, "retry:"+rideID) {
			t.Errorf("an UNMATCHED ride has a retry timer")
		}
	})
}

func TestRetriesWidenTheSearch(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	// 12 km: beyond the largest configured radius (8 km), within twice it.
	env.Ping(t, "d-12km", fntest.Offset(pickup, 12_000, 0))
	rideID := env.CreateRide(t, "r-1", pickup, dropoff)
	for attempt := range 2 {
		if got, want := env.MatchEvent(t, retryEvent(rideID, attempt)), match.OutcomeNoDriver; got != want {
			t.Fatalf("attempt %d: outcome = %q, want %q", attempt+1, got, want)
		}
	}
	if got, want := env.MatchEvent(t, retryEvent(rideID, 2)), match.OutcomeOffered; got != want {
		t.Fatalf("attempt 3: outcome = %q, want %q", got, want)
	}
	if got, want := env.OfferedDriver(t, rideID), "d-12km"; got != want {
		t.Errorf("offered driver = %q, want %q", got, want)
	}
}

func TestRetryWait(t *testing.T) {
	t.Parallel()
	const s = time.Second
	tests := []struct {
		base, max time.Duration
		attempts  int
		want      time.Duration
	}{
		{2 * s, 20 * s, 0, 2 * s},
		{2 * s, 20 * s, 1, 2 * s},
		{2 * s, 20 * s, 2, 4 * s},
		{2 * s, 20 * s, 3, 8 * s},
		{2 * s, 20 * s, 4, 16 * s},
		{2 * s, 20 * s, 5, 20 * s}, // 32 s capped
		{2 * s, 20 * s, 8, 20 * s},
		{2 * s, 20 * s, 1000, 20 * s}, // no overflow
		{3 * s, 12 * s, 3, 12 * s},    // exactly the cap
		{30 * s, 20 * s, 1, 20 * s},   // a base above the cap is capped
	}
	for _, tc := range tests {
		if got := dispatch.RetryWait(tc.base, tc.max, tc.attempts); got != tc.want {
			t.Errorf("RetryWait(%s, %s, %d) = %s, want %s", tc.base, tc.max, tc.attempts, got, tc.want)
		}
	}
}

// TestAStaleRetryHasNoSecondEffect: a ride.retry issued at attempt a reaches match after the ride
// has had a later attempt (two retries for the same wait: the timer's and reconcile's, or one
// redelivered late from a backlog). That later attempt already left what follows it (a retry
// timer, an offer, or UNMATCHED), so the stale retry is not needed: it must not search again, nor
// spend an attempt of the ride's retry budget.
func TestAStaleRetryHasNoSecondEffect(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	rideID := env.CreateRide(t, "r-stale", pickup, dropoff)
	if got, want := env.MatchRide(t, rideID), match.OutcomeNoDriver; got != want {
		t.Fatalf("first outcome = %q, want %q", got, want)
	}
	// The retry the timer of attempt 1 issued, answered: attempt 2.
	if got, want := env.MatchEvent(t, retryEvent(rideID, 1)), match.OutcomeNoDriver; got != want {
		t.Fatalf("retry at attempt 1 = %q, want %q", got, want)
	}
	// A second retry issued at attempt 1 (reconcile's, for the same wait) arrives after it.
	if got, want := env.MatchEvent(t, retryEvent(rideID, 1)), match.OutcomeNotNeeded; got != want {
		t.Errorf("stale retry at attempt 1 after attempt 2 = %q, want %q", got, want)
	}
	if got, want := env.GetRide(t, rideID)["match_attempts"], 2.0; got != want {
		t.Errorf("match_attempts = %v after the stale retry, want %v (no attempt spent)", got, want)
	}
	// A retry at the current attempt is a match attempt as before.
	if got, want := env.MatchEvent(t, retryEvent(rideID, 2)), match.OutcomeNoDriver; got != want {
		t.Errorf("retry at attempt 2 = %q, want %q", got, want)
	}
}
