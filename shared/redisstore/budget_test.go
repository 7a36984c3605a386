package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/flagdown/flagdown/shared/redisstore"
)

// Every Redis step of one request shares one Redis timeout: an action's effects and then its
// view's live read, or a quote and then the demand record, each bounded by Bounded, together
// wait at most Store.Timeout for a Redis that does not answer. Measured before: a ride start in
// the first seconds of a 35 s Redis stop took two timeouts (p99 1,004–1,006 ms in two chaos runs
// against the 1 s). Deterministic: the deadlines are compared, nothing is timed.
func TestARequestsRedisStepsShareOneTimeout(t *testing.T) {
	t.Parallel()
	s := redisstore.New(nil, "budget:", 30*time.Second, 40)
	s.Timeout = time.Hour // far beyond the time the test takes, so the order of deadlines is exact

	req := s.Budget(context.Background())
	first, cancel1 := s.Bounded(req)
	defer cancel1()
	d1, ok := first.Deadline()
	if !ok {
		t.Fatal("Bounded gave no deadline")
	}
	time.Sleep(2 * time.Millisecond) // the second step starts later
	second, cancel2 := s.Bounded(req)
	defer cancel2()
	if d2, _ := second.Deadline(); d2.After(d1) {
		t.Errorf("second step of the request ends at %v, after the first's %v: the request waits more than one timeout", d2, d1)
	}

	// Without a budget each step gets its own timeout, as before.
	a, cancelA := s.Bounded(context.Background())
	defer cancelA()
	time.Sleep(2 * time.Millisecond)
	b, cancelB := s.Bounded(context.Background())
	defer cancelB()
	da, _ := a.Deadline()
	if db, _ := b.Deadline(); !db.After(da) {
		t.Errorf("steps without a budget: second deadline %v not after the first %v", db, da)
	}
	// A budget taken twice keeps the first one's end.
	if again := s.Budget(req); again != req {
		t.Errorf("Budget of a context that has one gave a new one")
	}
}
