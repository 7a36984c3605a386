package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/tracing"
)

// requestRide has driver ping available beside the pickup and rider request a ride through the
// platform's gateway; it returns the ride id.
func requestRide(t *testing.T, p *platform, rider, driver string) string {
	t.Helper()
	post(t, p, auth.RoleDriver, driver, "/function/location-update",
		map[string]any{"driver_id": driver, "lat": 40.7580, "lng": -73.9855, "status": "available"}, nil)
	var ride struct {
		RideID string `json:"ride_id"`
	}
	if code := post(t, p, auth.RoleRider, rider, "/function/order-create", map[string]any{"rider_id": rider,
		"pickup": map[string]float64{"lat": 40.7585, "lng": -73.9855}, "dropoff": map[string]float64{"lat": 40.78, "lng": -73.96}}, &ride); code != http.StatusAccepted {
		t.Fatalf("order-create answered %d", code)
	}
	return ride.RideID
}

// waitOffered waits until ride's ride.offered outbox row is published (match ran and the relay
// published its offer), failing the test after a minute.
func waitOffered(t *testing.T, p *platform, rideID string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; {
		var n int
		if err := p.deps.DB.Pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox
			WHERE subject = $1 AND type = $2 AND published_at IS NOT NULL`, rideID, events.RideOffered).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ride %s: no published ride.offered within a minute", rideID)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// storedEvent returns the last event of type typ JetStream stored for the platform's stream.
func storedEvent(t *testing.T, p *platform, typ string) event.Event {
	t.Helper()
	ctx := context.Background()
	st, err := p.broker.JetStream().Stream(ctx, p.broker.Stream())
	if err != nil {
		t.Fatal(err)
	}
	msg, err := st.GetLastMsgForSubject(ctx, p.broker.Subject(typ))
	if err != nil {
		t.Fatalf("stored %s: %v", typ, err)
	}
	var e event.Event
	if err := json.Unmarshal(msg.Data, &e); err != nil {
		t.Fatal(err)
	}
	return e
}

// rideAttr reports whether s carries ride.id = rideID.
func rideAttr(s sdktrace.ReadOnlySpan, rideID string) bool {
	for _, kv := range s.Attributes() {
		if kv.Key == tracing.RideIDKey && kv.Value.AsString() == rideID {
			return true
		}
	}
	return false
}

// TestTraceFollowsARideFromOrderCreateToTheOffer: with a tracer provider installed, one ride's
// request through the real platform (gateway → order-create → outbox → relay → NATS JetStream →
// trigger → match) gives one trace: the order-create server span is its root, the relay's
// ride.requested publish span, the trigger's delivery, match's process span and its "create
// offer" span (with the driver's id) descend from it, and the ride.requested event stored in
// JetStream carries the publish span's traceparent.
func TestTraceFollowsARideFromOrderCreateToTheOffer(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tracing.Use(sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)))
	t.Cleanup(func() { tracing.Use(nil) })

	p := startTestPlatform(t)
	id := testkit.ID()
	driver := "d-" + id
	rideID := requestRide(t, p, "r-"+id, driver)
	waitOffered(t, p, rideID)

	// Spans end as their work ends; the trigger's delivery span ends after match answered, which
	// may be after the offer was published. Wait for the spans the test needs.
	var spans tracetest.SpanStubs
	byName := map[string]tracetest.SpanStub{}
	want := []string{"order-create", "send " + events.RideRequested, "receive " + p.broker.Subject(events.RideRequested),
		"match", "process " + events.RideRequested, "match ride", "create offer"}
	for deadline := time.Now().Add(time.Minute); ; {
		spans = exp.GetSpans()
		for _, s := range spans {
			ro := s.Snapshot()
			if s.Name == "order-create" || rideAttr(ro, rideID) || s.Name == "match" {
				if _, seen := byName[s.Name]; !seen {
					byName[s.Name] = s
				}
			}
		}
		missing := ""
		for _, n := range want {
			if _, ok := byName[n]; !ok {
				missing = n
			}
		}
		if missing == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("span %q not exported within a minute (got %d spans)", missing, len(spans))
		}
		time.Sleep(50 * time.Millisecond)
	}

	root := byName["order-create"]
	traceID := root.SpanContext.TraceID()
	if root.Parent.IsValid() {
		t.Errorf("order-create span has parent %s; want a root (the request carried no traceparent)", root.Parent.SpanID())
	}
	parentOf := map[string]string{
		"send " + events.RideRequested:                      "order-create",
		"receive " + p.broker.Subject(events.RideRequested): "send " + events.RideRequested,
		"process " + events.RideRequested:                   "match",
		"match ride":                                        "process " + events.RideRequested,
		"create offer":                                      "match ride",
	}
	for child, parent := range parentOf {
		c, pp := byName[child], byName[parent]
		if got := c.SpanContext.TraceID(); got != traceID {
			t.Errorf("span %q is in trace %s; want the order-create trace %s", child, got, traceID)
		}
		if got, want := c.Parent.SpanID(), pp.SpanContext.SpanID(); got != want {
			t.Errorf("span %q has parent %s; want %q (%s)", child, got, parent, want)
		}
	}
	// match's server span continues the trigger's delivery span (the traceparent header).
	var matchServer tracetest.SpanStub
	for _, s := range spans {
		if s.Name == "match" && s.SpanContext.TraceID() == traceID {
			matchServer = s
		}
	}
	if got, want := matchServer.Parent.SpanID(), byName["receive "+p.broker.Subject(events.RideRequested)].SpanContext.SpanID(); got != want {
		t.Errorf("match server span has parent %s; want the trigger's delivery span %s", got, want)
	}
	if k := byName["send "+events.RideRequested].SpanKind; k != trace.SpanKindProducer {
		t.Errorf("relay publish span kind %v; want producer", k)
	}
	offer := byName["create offer"].Snapshot()
	gotDriver := ""
	for _, kv := range offer.Attributes() {
		if kv.Key == tracing.DriverIDKey {
			gotDriver = kv.Value.AsString()
		}
	}
	if gotDriver != driver {
		t.Errorf("create offer span driver.id = %q; want %q", gotDriver, driver)
	}

	// The stored event carries the publish span's context (CloudEvents distributed tracing).
	e := storedEvent(t, p, events.RideRequested)
	sc := tracing.EventContext(e)
	if !sc.IsValid() || sc.TraceID() != traceID || sc.SpanID() != byName["send "+events.RideRequested].SpanContext.SpanID() {
		t.Errorf("stored ride.requested traceparent %v names %s/%s; want the relay's publish span", e.Extensions()[tracing.TraceParent], sc.TraceID(), sc.SpanID())
	}
	// The offer's own outbox row records the create offer span.
	var tp string
	if err := p.deps.DB.Pool.QueryRow(context.Background(), `SELECT coalesce(traceparent, '') FROM outbox WHERE subject = $1 AND type = $2`,
		rideID, events.RideOffered).Scan(&tp); err != nil {
		t.Fatal(err)
	}
	if sc := trace.SpanContextFromContext(tracing.WithContext(context.Background(), tp, "")); sc.SpanID() != byName["create offer"].SpanContext.SpanID() {
		t.Errorf("ride.offered outbox row traceparent %q; want the create offer span %s", tp, byName["create offer"].SpanContext.SpanID())
	}
}

// TestNoTracingByDefault: with no OTEL_* variable set, Setup installs nothing, the platform runs a
// ride to its offer, and no outbox row or stored event carries a trace context.
func TestNoTracingByDefault(t *testing.T) {
	for _, v := range []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		t.Setenv(v, "")
	}
	stop, err := startTracing(context.Background(), "flagdown-test", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	p := startTestPlatform(t)
	id := testkit.ID()
	rideID := requestRide(t, p, "r-"+id, "d-"+id)
	waitOffered(t, p, rideID)

	var rows, traced int
	if err := p.deps.DB.Pool.QueryRow(context.Background(), `SELECT count(*), count(traceparent) + count(tracestate) FROM outbox
		WHERE subject = $1`, rideID).Scan(&rows, &traced); err != nil {
		t.Fatal(err)
	}
	if rows < 2 || traced != 0 {
		t.Errorf("ride %s: %d outbox rows, %d trace context values; want ride.requested and ride.offered without any", rideID, rows, traced)
	}
	for _, typ := range []string{events.RideRequested, events.RideOffered} {
		e := storedEvent(t, p, typ)
		if _, ok := e.Extensions()[tracing.TraceParent]; ok {
			t.Errorf("stored %s carries traceparent %v with tracing off", typ, e.Extensions()[tracing.TraceParent])
		}
	}
}
