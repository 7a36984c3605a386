package replay

import (
	"context"
	"net/http"
	"testing"
)

// An action whose final answer the replay did not get before its end (the platform answered 503,
// and the replay closed before the retry) leaves its ride in hand: the platform may have acted on
// it, so the chaos verdict must not count it as a ride nobody drives. An action answered 2xx
// leaves nothing pending.
func TestActionWithoutFinalAnswerLeavesItsRideInHand(t *testing.T) {
	run := func(answer error, closeFirst bool) (*sim, bool) {
		s := &sim{ctx: context.Background(), jobs: make(chan func(context.Context), 4), httpErrors: map[string]int{}}
		done := false
		s.untilAnswered("accept", "ride-1", func(context.Context) error { return answer }, func(error) { done = true })
		job := <-s.jobs
		job(context.Background())
		s.closed = closeFirst
		s.drainInbox()
		return s, done
	}
	s, done := run(&APIError{Status: http.StatusServiceUnavailable}, true)
	if done || s.actionsPending != 1 || s.pendingRides["ride-1"] != 1 {
		t.Errorf("503 then the end: done %v, pending %d, pending rides %v; want not done, 1 pending, ride-1 in hand",
			done, s.actionsPending, s.pendingRides)
	}
	s, done = run(nil, false)
	if !done || s.actionsPending != 0 || len(s.pendingRides) != 0 {
		t.Errorf("2xx: done %v, pending %d, pending rides %v; want done, nothing pending", done, s.actionsPending, s.pendingRides)
	}
}
