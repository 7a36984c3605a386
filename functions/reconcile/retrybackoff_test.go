package function_test

import (
	"testing"
	"time"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/internal/testkit/fntest"
	"github.com/flagdown/flagdown/shared/config"
)

// TestReconcileBacksOffRetriesMatchHasNotAnswered: a ride.retry that reconcile issued and match has
// not handled yet (it sits in the broker behind a backlog) is not issued again every grace. Doing so
// was the retry storm seen in chaos runs: each pass re-issued ride.retry for every ride still
// waiting in match's backlog, which made the backlog longer, so the next pass found more rides
// (2,329 retries for 716 rides, consumer lag over 1,000). Each unanswered retry doubles the wait
// before the next one (grace, 2 × grace, 4 × grace, ...), so a lost event is still retried; the
// first match attempt after a retry starts the count again.
func TestReconcileBacksOffRetriesMatchHasNotAnswered(t *testing.T) {
	t.Parallel()
	const grace = 2 * time.Second
	env := fntest.NewTimeoutEnv(t, func(c *config.Config) { c.ReconcileGrace = grace })
	ride := env.CreateRide(t, "r-backlog", pickup, dropoff)
	idleFor := func(d time.Duration) {
		env.Exec(t, `UPDATE rides SET updated_at = now() - $2 * interval '1 millisecond' WHERE id = $1`, ride, d.Milliseconds())
	}
	retries := func() int { return len(env.OutboxData(t, ride, events.RideRetry)) }

	// Nobody matched the ride (its ride.requested was lost): the first pass past the grace retries it.
	idleFor(grace + grace/2)
	if rep := run(t, env); rep.RidesRetried != 1 || retries() != 1 {
		t.Fatalf("first pass: rides_retried %d, ride.retry events %d; want 1 and 1", rep.RidesRetried, retries())
	}
	// Match has not answered that retry: one more grace is not enough for another.
	idleFor(grace + grace/2)
	if rep := run(t, env); rep.RidesRetried != 0 || retries() != 1 {
		t.Errorf("one grace after an unanswered retry: rides_retried %d, ride.retry events %d; want 0 and 1 (the first is still in match's backlog)",
			rep.RidesRetried, retries())
	}
	// Twice the grace: the retry may have been lost, so the last resort fires again.
	idleFor(2*grace + grace/2)
	if rep := run(t, env); rep.RidesRetried != 1 || retries() != 2 {
		t.Errorf("two graces after one unanswered retry: rides_retried %d, ride.retry events %d; want 1 and 2", rep.RidesRetried, retries())
	}
	// Two unanswered: the next waits four graces.
	idleFor(3*grace + grace/2)
	if rep := run(t, env); rep.RidesRetried != 0 || retries() != 2 {
		t.Errorf("three graces after two unanswered retries: rides_retried %d, ride.retry events %d; want 0 and 2", rep.RidesRetried, retries())
	}

	// Match answers (no driver: an attempt recorded and a retry timer armed); the timer is then lost.
	if out := env.MatchRide(t, ride); out == "" {
		t.Fatalf("match answered nothing")
	}
	env.DeleteKey(t, "retry:"+ride)
	idleFor(grace + grace/2)
	if rep := run(t, env); rep.RidesRetried != 1 || retries() != 3 {
		t.Errorf("one grace after match answered: rides_retried %d, ride.retry events %d; want 1 and 3 (the count starts again)", rep.RidesRetried, retries())
	}
}
