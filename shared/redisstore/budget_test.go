package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/flagdown/flagdown/shared/redisstore"
)

// Every Redis step of one request shares one Redis timeout: an action's effects and then its
// view's live read, or a quote and then the demand record, each bounded by Bounded, together
// wait at most Store.Timeout for a Redis that does not answer, and the PostgreSQL work between
// them does not count. Measured before: a ride start in the first seconds of a 35 s Redis stop
// took two timeouts (p99 1,004–1,006 ms in two chaos runs against the 1 s).
// Deterministic: deadlines are compared with the times they were asked at, nothing is timed.
func TestARequestsRedisStepsShareOneTimeout(t *testing.T) {
	t.Parallel()
	s := redisstore.New(nil, "budget:", 30*time.Second, 40)
	s.Timeout = time.Hour // far beyond the time the test takes, so the order of deadlines is exact
	const step = 3 * time.Millisecond

	req := s.Budget(context.Background())
	before := time.Now()
	first, cancel1 := s.Bounded(req)
	if _, ok := first.Deadline(); !ok {
		t.Fatal("Bounded gave no deadline")
	}
	inside := time.Now()
	time.Sleep(step)             // the first step waits on Redis
	waited := time.Since(inside) // at most what the step counted
	cancel1()
	spentAtMost := time.Since(before) // at least what the step counted
	time.Sleep(20 * step)             // PostgreSQL work between the steps: not Redis time
	asked := time.Now()
	second, cancel2 := s.Bounded(req)
	defer cancel2()
	d2, _ := second.Deadline()
	left := d2.Sub(asked)
	if left > s.Timeout-waited {
		t.Errorf("second step got %v, want at most the timeout less the first step's %v: the request waits more than one timeout", left, waited)
	}
	if left < s.Timeout-spentAtMost-time.Since(asked) {
		t.Errorf("second step got %v, less than the timeout less the first step (%v at most): the time between the steps was counted", left, spentAtMost)
	}

	// Without a budget each step gets its own full timeout, as before.
	asked = time.Now()
	own, cancel3 := s.Bounded(context.Background())
	defer cancel3()
	if d, _ := own.Deadline(); d.Sub(asked) < s.Timeout {
		t.Errorf("a step without a budget got %v, want the full %v", d.Sub(asked), s.Timeout)
	}
	// A budget taken twice is the same budget.
	if again := s.Budget(req); again != req {
		t.Errorf("Budget of a context that has one gave a new one")
	}
}
