package broker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/broker"
	"github.com/flagdown/flagdown/shared/cloudevent"
)

// newBroker connects to the test NATS server with a stream and subject prefix of its own.
func newBroker(t *testing.T) *broker.Broker {
	t.Helper()
	id := testkit.ID()
	ctx := context.Background()
	b, err := broker.Connect(ctx, testkit.NATS(t), "T_"+strings.ToUpper(id), "t"+id+".events")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = b.JetStream().DeleteStream(context.Background(), b.Stream())
		_ = b.JetStream().DeleteStream(context.Background(), b.DLQStream())
		b.Close()
	})
	return b
}

// runDispatcher runs a dispatcher until the test ends and checks that Run returns nil.
func runDispatcher(t *testing.T, b *broker.Broker, triggers []broker.Trigger, maxDeliver int, opts ...broker.DispatcherOption) *broker.Dispatcher {
	t.Helper()
	d, err := broker.NewDispatcher(b, triggers, maxDeliver, nil, nil, opts...)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Run(t, d.Run)
	return d
}

func newEvent(t *testing.T, id, typ, subject string) event.Event {
	t.Helper()
	e, err := cloudevent.New(id, typ, "/flagdown/test", subject, map[string]any{"ride_id": subject, "n": id}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// recorder is a function endpoint that records the CloudEvents it receives and answers with the
// statuses of plan in turn (200 once the plan is used up).
type recorder struct {
	mu     sync.Mutex
	got    []event.Event
	header []http.Header
	plan   []int
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	e, err := cloudevent.FromRequest(&http.Request{Header: r.Header, Body: io.NopCloser(strings.NewReader(string(body))), ContentLength: int64(len(body))})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rec.got = append(rec.got, e)
	rec.header = append(rec.header, r.Header.Clone())
	status := http.StatusOK
	if len(rec.plan) > 0 {
		status, rec.plan = rec.plan[0], rec.plan[1:]
	}
	w.WriteHeader(status)
	_, _ = w.Write([]byte(`{"ok":true}`))
}

func (rec *recorder) count() int {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return len(rec.got)
}

func (rec *recorder) events() []event.Event {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]event.Event(nil), rec.got...)
}

func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// idle reports whether the trigger's consumer has nothing pending or in flight.
func idle(t *testing.T, b *broker.Broker, trigger string) bool {
	t.Helper()
	c, err := b.JetStream().Consumer(context.Background(), b.Stream(), broker.ConsumerName(trigger))
	if err != nil {
		return false
	}
	info, err := c.Info(context.Background())
	if err != nil {
		return false
	}
	return info.NumPending == 0 && info.NumAckPending == 0 && info.NumRedelivered == 0
}

// dlqMessages returns the messages of the dead-letter stream.
func dlqMessages(t *testing.T, b *broker.Broker) []jetstream.RawStreamMsg {
	return testkit.StreamMessages(t, b.JetStream(), b.DLQStream())
}

func TestPublishDeliversInBinaryMode(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	rec := &recorder{}
	url := serve(t, rec)
	d := runDispatcher(t, b, []broker.Trigger{{Name: "match", Types: []string{events.RideRequested, events.RideReopened}, URL: url}}, 5)

	ctx := context.Background()
	e := newEvent(t, "evt-1", events.RideRequested, "ride-1")
	if err := b.Publish(ctx, e); err != nil {
		t.Fatal(err)
	}
	// Not one of the trigger's types: never delivered to it.
	if err := b.Publish(ctx, newEvent(t, "evt-2", events.RideAccepted, "ride-1")); err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(ctx, newEvent(t, "evt-3", events.RideReopened, "ride-1")); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, func() (bool, string) { return rec.count() == 2 && idle(t, b, "match"), "two deliveries" })

	got := rec.events()
	if got[0].ID() != "evt-1" || got[1].ID() != "evt-3" {
		t.Fatalf("delivered %s, %s", got[0].ID(), got[1].ID())
	}
	h := rec.header[0]
	if h.Get("Ce-Id") != "evt-1" || h.Get("Ce-Type") != events.RideRequested || h.Get("Ce-Subject") != "ride-1" ||
		h.Get("Ce-Specversion") != "1.0" || h.Get("Ce-Source") != "/flagdown/test" {
		t.Fatalf("binary-mode headers missing: %v", h)
	}
	if !strings.HasPrefix(h.Get("Content-Type"), "application/json") {
		t.Fatalf("Content-Type = %q, want the data's type (binary mode)", h.Get("Content-Type"))
	}
	if string(got[0].Data()) != string(e.Data()) {
		t.Fatalf("data = %s, want %s", got[0].Data(), e.Data())
	}
	if s := d.Stats(); s.Delivered != 2 || s.Retried != 0 || s.DeadLettered != 0 {
		t.Fatalf("stats = %+v", s)
	}

	// The stream holds the structured event on <prefix>.<type> with the id as Nats-Msg-Id.
	s, err := b.JetStream().Stream(ctx, b.Stream())
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx, b.Subject(events.RideRequested))
	if err != nil {
		t.Fatal(err)
	}
	if m.Header.Get("Nats-Msg-Id") != "evt-1" || m.Header.Get("Content-Type") != broker.ContentTypeStructured {
		t.Fatalf("stored headers: %v", m.Header)
	}
	var stored event.Event
	if err := json.Unmarshal(m.Data, &stored); err != nil || stored.ID() != "evt-1" {
		t.Fatalf("stored event: %v %s", err, m.Data)
	}
}

func TestDuplicatePublishDeliveredOnce(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	rec := &recorder{}
	runDispatcher(t, b, []broker.Trigger{{Name: "match", Types: []string{events.RideRequested}, URL: serve(t, rec)}}, 5)

	ctx := context.Background()
	e := newEvent(t, "evt-dup", events.RideRequested, "ride-1")
	for i := 0; i < 3; i++ {
		if err := b.Publish(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Publish(ctx, newEvent(t, "evt-other", events.RideRequested, "ride-1")); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, func() (bool, string) { return rec.count() >= 2 && idle(t, b, "match"), "deliveries" })
	if n := rec.count(); n != 2 {
		t.Fatalf("delivered %d events, want 2 (duplicate publish must be dropped)", n)
	}
	s, _ := b.JetStream().Stream(ctx, b.Stream())
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Fatalf("stream holds %d messages, want 2", info.State.Msgs)
	}
}

func TestRetriesServerErrorsThenAcks(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	rec := &recorder{plan: []int{500, 500, 200}}
	d := runDispatcher(t, b, []broker.Trigger{{Name: "match", Types: []string{events.RideRequested}, URL: serve(t, rec)}}, 5)

	if err := b.Publish(context.Background(), newEvent(t, "evt-r", events.RideRequested, "ride-1")); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, func() (bool, string) { return d.Stats().Delivered == 1 && idle(t, b, "match"), "acked after retries" })
	if n := rec.count(); n != 3 {
		t.Fatalf("handler saw the event %d times, want 3", n)
	}
	for _, e := range rec.events() {
		if e.ID() != "evt-r" {
			t.Fatalf("unexpected event %s", e.ID())
		}
	}
	if s := d.Stats(); s.Retried != 2 || s.DeadLettered != 0 {
		t.Fatalf("stats = %+v", s)
	}
	if m := dlqMessages(t, b); len(m) != 0 {
		t.Fatalf("DLQ holds %d messages, want 0", len(m))
	}
}

func TestClientErrorDeadLettersAtOnce(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	rec := &recorder{plan: []int{400}}
	d := runDispatcher(t, b, []broker.Trigger{{Name: "match.v1", Types: []string{events.RideRequested}, URL: serve(t, rec)}}, 5)

	e := newEvent(t, "evt-poison", events.RideRequested, "ride-1")
	if err := b.Publish(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, func() (bool, string) { return d.Stats().DeadLettered == 1 && idle(t, b, "match.v1"), "dead-letter" })
	msgs := dlqMessages(t, b)
	if len(msgs) != 1 {
		t.Fatalf("DLQ holds %d messages, want 1", len(msgs))
	}
	m := msgs[0]
	if m.Subject != b.DLQSubject(events.RideRequested) {
		t.Fatalf("DLQ subject %s", m.Subject)
	}
	if m.Header.Get(broker.HeaderTrigger) != "match.v1" || m.Header.Get(broker.HeaderLastStatus) != "400" ||
		m.Header.Get(broker.HeaderDeliveries) != "1" || !strings.Contains(m.Header.Get(broker.HeaderReason), "400") {
		t.Fatalf("DLQ headers: %v", m.Header)
	}
	var orig event.Event
	if err := json.Unmarshal(m.Data, &orig); err != nil || orig.ID() != "evt-poison" || string(orig.Data()) != string(e.Data()) {
		t.Fatalf("DLQ data is not the original event: %v %s", err, m.Data)
	}
	if n := rec.count(); n != 1 {
		t.Fatalf("a poison event was delivered %d times, want 1", n)
	}
	if s := d.Stats(); s.Delivered != 0 || s.Retried != 0 {
		t.Fatalf("stats = %+v", s)
	}
}

func TestMaxDeliverExhaustionDeadLetters(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	rec := &recorder{plan: []int{500, 408, 500, 500, 500, 500}}
	d := runDispatcher(t, b, []broker.Trigger{{Name: "match", Types: []string{events.RideRequested}, URL: serve(t, rec)}}, 3,
		broker.WithBackOff(20*time.Millisecond, 50*time.Millisecond))

	if err := b.Publish(context.Background(), newEvent(t, "evt-x", events.RideRequested, "ride-1")); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, func() (bool, string) { return d.Stats().DeadLettered == 1 && idle(t, b, "match"), "dead-letter" })
	if n := rec.count(); n != 3 {
		t.Fatalf("handler saw the event %d times, want 3 (MaxDeliver)", n)
	}
	msgs := dlqMessages(t, b)
	if len(msgs) != 1 {
		t.Fatalf("DLQ holds %d messages, want 1", len(msgs))
	}
	h := msgs[0].Header
	if h.Get(broker.HeaderLastStatus) != "500" || h.Get(broker.HeaderDeliveries) != "3" || !strings.Contains(h.Get(broker.HeaderReason), "exhausted") {
		t.Fatalf("DLQ headers: %v", h)
	}
	if s := d.Stats(); s.Retried != 2 || s.Delivered != 0 {
		t.Fatalf("stats = %+v", s)
	}
}

// A target that stays unavailable (nothing listens, or it answers 503) is retried in place, without
// spending a delivery, until the unavailable limit; then the event is dead-lettered, naming it.
func TestUnavailableTargetDeadLettersAfterLimit(t *testing.T) {
	t.Parallel()
	gone := httptest.NewServer(http.NotFoundHandler())
	refused := gone.URL
	gone.Close() // nothing listens there any more
	for _, tc := range []struct {
		name, url, status string
	}{
		{"refused", refused, "0"},
		{"503", serve(t, &flaky{down: true}), "503"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := newBroker(t)
			d := runDispatcher(t, b, []broker.Trigger{{Name: "gone", Types: []string{events.RideRequested}, URL: tc.url}}, 2,
				broker.WithBackOff(10*time.Millisecond, 50*time.Millisecond), broker.WithUnavailableLimit(500*time.Millisecond))
			start := time.Now()
			if err := b.Publish(context.Background(), newEvent(t, "evt-n", events.RideRequested, "ride-1")); err != nil {
				t.Fatal(err)
			}
			testkit.Eventually(t, 20*time.Second, func() (bool, string) { return d.Stats().DeadLettered == 1 && idle(t, b, "gone"), "dead-letter" })
			if took := time.Since(start); took < 500*time.Millisecond {
				t.Fatalf("dead-lettered after %s, before the 500 ms limit", took)
			}
			h := dlqMessages(t, b)[0].Header
			if h.Get(broker.HeaderLastStatus) != tc.status || h.Get(broker.HeaderDeliveries) != "1" ||
				!strings.Contains(h.Get(broker.HeaderReason), "unavailable for") {
				t.Fatalf("DLQ headers: %v", h)
			}
			if s := d.Stats(); s.Unavailable < 3 || s.Retried != 0 || s.Delivered != 0 {
				t.Fatalf("stats = %+v, want several unavailable attempts and no counted retry", s)
			}
		})
	}
}

func TestSameSubjectDeliveredInOrder(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	rec := &recorder{}
	runDispatcher(t, b, []broker.Trigger{{Name: "all", Types: []string{events.RideRequested, events.RideAccepted}, URL: serve(t, rec)}}, 5)
	const perRide, rides = 30, 5
	ctx := context.Background()
	for i := 0; i < perRide; i++ {
		for r := 0; r < rides; r++ {
			typ := events.RideRequested
			if i%2 == 1 {
				typ = events.RideAccepted
			}
			if err := b.Publish(ctx, newEvent(t, fmt.Sprintf("%d-%d", r, i), typ, "ride-"+strconv.Itoa(r))); err != nil {
				t.Fatal(err)
			}
		}
	}
	testkit.Eventually(t, 20*time.Second, func() (bool, string) { return rec.count() == perRide*rides && idle(t, b, "all"), "all deliveries" })
	next := map[string]int{}
	for _, e := range rec.events() {
		var r, i int
		if _, err := fmt.Sscanf(e.ID(), "%d-%d", &r, &i); err != nil {
			t.Fatal(err)
		}
		if next[e.Subject()] != i {
			t.Fatalf("%s: got event %d, want %d", e.Subject(), i, next[e.Subject()])
		}
		next[e.Subject()]++
	}
}

func TestNewDispatcherRejectsBadTriggers(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	bad := [][]broker.Trigger{
		{{Name: "", Types: []string{events.RideRequested}, URL: "http://x"}},
		{{Name: "a", URL: "http://x"}},
		{{Name: "a", Types: []string{"bad type"}, URL: "http://x"}},
		{{Name: "a.b", Types: []string{events.RideRequested}, URL: "http://x"}, {Name: "a_b", Types: []string{events.RideRequested}, URL: "http://y"}},
	}
	for i, tr := range bad {
		if _, err := broker.NewDispatcher(b, tr, 3, nil, nil); err == nil {
			t.Errorf("case %d: accepted", i)
		}
	}
	if _, err := broker.NewDispatcher(b, nil, 0, nil, nil); err == nil {
		t.Error("max deliver 0 accepted")
	}
}

func TestStartEmbedded(t *testing.T) {
	t.Parallel()
	ns, url, err := broker.StartEmbedded(t.TempDir(), -1)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Shutdown()
	b, err := broker.Connect(context.Background(), url, "EMBED", "flagdown.events")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Publish(context.Background(), newEvent(t, "e1", events.RideRequested, "r")); err != nil {
		t.Fatal(err)
	}
}
