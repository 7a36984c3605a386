package broker_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/broker"
)

// flaky is a function endpoint that answers 503 unavailable (the body a function writes when Redis
// or PostgreSQL does not answer) while it is down, and 200 once it is up. It counts both.
type flaky struct {
	mu        sync.Mutex
	down      bool
	refused   int // attempts answered 503
	processed int // attempts answered 200
}

func (f *flaky) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if f.down {
		f.refused++
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"error":{"code":"unavailable","message":"redis is unavailable"}}`))
		return
	}
	f.processed++
	_, _ = w.Write([]byte(`{"outcome":"offered"}`))
}

func (f *flaky) setDown(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
}

func (f *flaky) counts() (refused, processed int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.refused, f.processed
}

// settled reports whether the event was either processed or dead-lettered and the trigger is idle.
func settled(t *testing.T, b *broker.Broker, trigger string, f *flaky) (bool, string) {
	refused, processed := f.counts()
	dl := len(dlqMessages(t, b))
	return (processed > 0 || dl > 0) && idle(t, b, trigger),
		"refused " + strconv.Itoa(refused) + ", processed " + strconv.Itoa(processed) + ", dead-lettered " + strconv.Itoa(dl)
}

// A function that answers 503 unavailable for longer than the whole retry budget (3 attempts,
// 20 + 50 ms of back-off) and then recovers gets the event exactly once, and nothing is
// dead-lettered: its dependency was away, the event was fine.
func TestUnavailableTargetHeldUntilItRecovers(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	f := &flaky{down: true}
	d := runDispatcher(t, b, []broker.Trigger{{Name: "match", Types: []string{events.RideRequested}, URL: serve(t, f)}}, 3,
		broker.WithBackOff(20*time.Millisecond, 50*time.Millisecond))
	if err := b.Publish(context.Background(), newEvent(t, "evt-u", events.RideRequested, "ride-1")); err != nil {
		t.Fatal(err)
	}
	// Down for 2 s: many times the budget.
	testkit.Eventually(t, 20*time.Second, func() (bool, string) {
		refused, _ := f.counts()
		return refused >= 3, "refused " + strconv.Itoa(refused)
	})
	time.Sleep(2 * time.Second)
	f.setDown(false)
	testkit.Eventually(t, 30*time.Second, func() (bool, string) { return settled(t, b, "match", f) })

	if m := dlqMessages(t, b); len(m) != 0 {
		t.Fatalf("dead-lettered while the function was unavailable (%s): %d message(s), want 0", m[0].Header.Get(broker.HeaderReason), len(m))
	}
	if _, processed := f.counts(); processed != 1 {
		t.Fatalf("processed %d times, want exactly 1", processed)
	}
	if s := d.Stats(); s.Delivered != 1 || s.DeadLettered != 0 {
		t.Fatalf("stats = %+v", s)
	}
}

// A function nobody listens for yet (its pod starting, flagdown dev's gateway closed): connection
// refused is the target being away, not the event being bad. The event waits and is delivered once
// the function listens.
func TestConnectionRefusedHeldUntilTargetListens(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	addr := "127.0.0.1:" + strconv.Itoa(testkit.FreePort(t))
	d := runDispatcher(t, b, []broker.Trigger{{Name: "later", Types: []string{events.RideRequested}, URL: "http://" + addr}}, 2,
		broker.WithBackOff(10*time.Millisecond))
	if err := b.Publish(context.Background(), newEvent(t, "evt-c", events.RideRequested, "ride-1")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	f := &flaky{}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(f)
	_ = srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	testkit.Eventually(t, 30*time.Second, func() (bool, string) { return settled(t, b, "later", f) })

	if m := dlqMessages(t, b); len(m) != 0 {
		t.Fatalf("dead-lettered while nothing listened (%s): %d message(s), want 0", m[0].Header.Get(broker.HeaderReason), len(m))
	}
	if _, processed := f.counts(); processed != 1 {
		t.Fatalf("processed %d times, want exactly 1", processed)
	}
	if s := d.Stats(); s.Delivered != 1 || s.DeadLettered != 0 {
		t.Fatalf("stats = %+v", s)
	}
}

// A dispatcher stopped while its function is unavailable (flagdown dev shutting down during a Redis
// outage) returns promptly and dead-letters nothing; the next dispatcher delivers the event once
// the function is back.
func TestDispatcherStoppedMidFlightDeadLettersNothing(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	f := &flaky{down: true}
	url := serve(t, f)
	triggers := []broker.Trigger{{Name: "match", Types: []string{events.RideRequested}, URL: url}}
	opts := []broker.DispatcherOption{broker.WithBackOff(20*time.Millisecond, 50*time.Millisecond)}

	d1, err := broker.NewDispatcher(b, triggers, 3, nil, nil, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d1.Run(ctx) }()
	if err := b.Publish(context.Background(), newEvent(t, "evt-s", events.RideRequested, "ride-1")); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, func() (bool, string) {
		refused, _ := f.counts()
		return refused >= 2, "refused " + strconv.Itoa(refused)
	})
	time.Sleep(time.Second) // longer than the budget: mid-flight means "still waiting for the function"
	cancel()
	start := time.Now()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("stopping took %s, want at most 5 s (one delivery at most)", took)
	}
	if m := dlqMessages(t, b); len(m) != 0 {
		t.Fatalf("dead-lettered by a dispatcher stopped while its function was unavailable (%s): %d message(s), want 0",
			m[0].Header.Get(broker.HeaderReason), len(m))
	}

	f.setDown(false)
	d2 := runDispatcher(t, b, triggers, 3, opts...)
	testkit.Eventually(t, 30*time.Second, func() (bool, string) { return settled(t, b, "match", f) })
	if m := dlqMessages(t, b); len(m) != 0 {
		t.Fatalf("dead-lettered after the restart (%s): %d message(s), want 0", m[0].Header.Get(broker.HeaderReason), len(m))
	}
	if _, processed := f.counts(); processed != 1 {
		t.Fatalf("processed %d times, want exactly 1", processed)
	}
	if s := d2.Stats(); s.Delivered != 1 || s.DeadLettered != 0 {
		t.Fatalf("second dispatcher's stats = %+v", s)
	}
}

// An event held for a target unavailable for longer than the consumer's ack wait is not redelivered
// by the server meanwhile (the dispatcher tells it the event is in progress): one delivery, one
// processing, nothing dead-lettered.
func TestHeldEventOutlastsAckWait(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	f := &flaky{down: true}
	d := runDispatcher(t, b, []broker.Trigger{{Name: "slow", Types: []string{events.RideRequested}, URL: serve(t, f)}}, 3,
		broker.WithBackOff(50*time.Millisecond), broker.WithAckWait(time.Second))
	// Others queued behind it on other subjects are held too.
	for i := 0; i < 20; i++ {
		if err := b.Publish(context.Background(), newEvent(t, "evt-a"+strconv.Itoa(i), events.RideRequested, "ride-"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(3500 * time.Millisecond) // three and a half ack waits
	f.setDown(false)
	testkit.Eventually(t, 30*time.Second, func() (bool, string) {
		_, processed := f.counts()
		return processed >= 20 && idle(t, b, "slow"), "processed " + strconv.Itoa(processed)
	})
	c, err := b.JetStream().Consumer(context.Background(), b.Stream(), broker.ConsumerName("slow"))
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.Delivered.Consumer != 20 {
		t.Fatalf("the server made %d deliveries of 20 events, want 20 (none redelivered while held)", info.Delivered.Consumer)
	}
	if _, processed := f.counts(); processed != 20 {
		t.Fatalf("processed %d times, want 20", processed)
	}
	if s := d.Stats(); s.Delivered != 20 || s.DeadLettered != 0 || s.Retried != 0 {
		t.Fatalf("stats = %+v", s)
	}
}

// A Retry-After on a 503 (or 429) is honoured: the next attempt waits for it, not for the shorter
// back-off.
func TestRetryAfterHonoured(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	var mu sync.Mutex
	var at []time.Time
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		at = append(at, time.Now())
		if len(at) == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	d := runDispatcher(t, b, []broker.Trigger{{Name: "ra", Types: []string{events.RideRequested}, URL: serve(t, h)}}, 3,
		broker.WithBackOff(10*time.Millisecond))
	if err := b.Publish(context.Background(), newEvent(t, "evt-ra", events.RideRequested, "ride-1")); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, func() (bool, string) { return d.Stats().Delivered == 1 && idle(t, b, "ra"), "delivered" })
	mu.Lock()
	defer mu.Unlock()
	if len(at) != 2 {
		t.Fatalf("%d attempts, want 2", len(at))
	}
	if gap := at[1].Sub(at[0]); gap < 950*time.Millisecond {
		t.Fatalf("retried %s after a Retry-After of 1 s", gap)
	}
}

// A function that does not answer within the delivery timeout is away (hung on a dependency, out of
// workers): the attempt does not spend a delivery, and the event is processed once it answers.
func TestTimeoutIsUnavailable(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	var mu sync.Mutex
	calls := 0
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		if n <= 2 {
			select { // hang past the client's timeout
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	d, err := broker.NewDispatcher(b, []broker.Trigger{{Name: "hang", Types: []string{events.RideRequested}, URL: serve(t, h)}}, 2,
		&http.Client{Timeout: 200 * time.Millisecond}, nil, broker.WithBackOff(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	testkit.Run(t, d.Run)
	if err := b.Publish(context.Background(), newEvent(t, "evt-h", events.RideRequested, "ride-1")); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, func() (bool, string) {
		s := d.Stats()
		return (s.Delivered == 1 || s.DeadLettered == 1) && idle(t, b, "hang"), "delivered or dead-lettered"
	})
	if s := d.Stats(); s.Delivered != 1 || s.DeadLettered != 0 || s.Retried != 0 || s.Unavailable != 2 {
		t.Fatalf("stats = %+v, want 2 unavailable attempts then 1 delivery", s)
	}
}
