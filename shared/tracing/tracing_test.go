package tracing_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/shared/cloudevent"
	"github.com/flagdown/flagdown/shared/tracing"
)

// env returns a getenv over m.
func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestEnabled(t *testing.T) {
	for _, c := range []struct {
		name string
		env  map[string]string
		want bool
	}{
		{"nothing set", nil, false},
		{"endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, true},
		{"traces endpoint", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, true},
		{"exporter otlp", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true},
		{"exporter none beats endpoint", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, false},
		{"sdk disabled beats everything", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, false},
		{"sdk disabled false", map[string]string{"OTEL_SDK_DISABLED": "false", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, true},
		{"service name alone", map[string]string{"OTEL_SERVICE_NAME": "x"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := tracing.Enabled(env(c.env)); got != c.want {
				t.Errorf("Enabled(%v) = %v; want %v", c.env, got, c.want)
			}
		})
	}
}

// clearOTEL unsets every variable Setup reads, for the test.
func clearOTEL(t *testing.T) {
	for _, v := range []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
		"OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_SAMPLER"} {
		t.Setenv(v, "")
	}
	t.Cleanup(func() { tracing.Use(nil) })
}

// TestSetupOffInstallsNothing: with no OTEL_* variable, spans do not record and no trace context
// reaches a header, an outbox row (Context) or an event, even one arriving with a traceparent.
func TestSetupOffInstallsNothing(t *testing.T) {
	clearOTEL(t)
	shutdown, err := tracing.Setup(context.Background(), "test")
	if err != nil {
		t.Fatal(err)
	}
	incoming := tracing.WithContext(context.Background(), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "")
	if trace.SpanContextFromContext(incoming).IsValid() {
		t.Error("an incoming traceparent was accepted with tracing off")
	}
	ctx, span := tracing.Start(incoming, "x")
	if span.IsRecording() {
		t.Error("span records with tracing off")
	}
	if tp, ts := tracing.Context(ctx); tp != "" || ts != "" {
		t.Errorf("Context = %q, %q; want none", tp, ts)
	}
	e := newEvent(t)
	_, pspan := tracing.StartPublish(ctx, &e)
	pspan.End()
	if _, ok := e.Extensions()[tracing.TraceParent]; ok {
		t.Errorf("event got traceparent %v with tracing off", e.Extensions()[tracing.TraceParent])
	}
	span.End()
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestSetupRefusesWhatItCannotHonour: gRPC and JSON protocols and other exporters are errors naming
// the variable.
func TestSetupRefusesWhatItCannotHonour(t *testing.T) {
	for _, c := range []struct{ name, value string }{
		{"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"},
		{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json"},
		{"OTEL_TRACES_EXPORTER", "zipkin"},
	} {
		t.Run(c.name+"="+c.value, func(t *testing.T) {
			clearOTEL(t)
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
			t.Setenv(c.name, c.value)
			if c.name == "OTEL_TRACES_EXPORTER" {
				t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
			}
			_, err := tracing.Setup(context.Background(), "test")
			if err == nil || !strings.Contains(err.Error(), c.name) {
				t.Fatalf("Setup with %s=%s: %v; want an error naming %s", c.name, c.value, err, c.name)
			}
		})
	}
}

// TestSetupExportsOverOTLPHTTP: with OTEL_EXPORTER_OTLP_ENDPOINT set, a span ends up POSTed to
// <endpoint>/v1/traces as protobuf by the time Shutdown returns, with the service name.
func TestSetupExportsOverOTLPHTTP(t *testing.T) {
	var mu sync.Mutex
	var paths []string
	var bodies []byte
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		paths = append(paths, r.URL.Path+" "+r.Header.Get("Content-Type"))
		bodies = append(bodies, b...)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	defer collector.Close()
	clearOTEL(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	shutdown, err := tracing.Setup(context.Background(), "flagdown-test-service")
	if err != nil {
		t.Fatal(err)
	}
	_, span := tracing.Start(context.Background(), "exported span")
	span.End()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(paths) == 0 || paths[0] != "/v1/traces application/x-protobuf" {
		t.Fatalf("collector received %v; want POST /v1/traces application/x-protobuf", paths)
	}
	for _, s := range []string{"exported span", "flagdown-test-service"} {
		if !strings.Contains(string(bodies), s) {
			t.Errorf("exported body lacks %q", s)
		}
	}
}

// memory installs a provider over an in-memory exporter for the test.
func memory(t *testing.T) *tracetest.InMemoryExporter {
	exp := tracetest.NewInMemoryExporter()
	tracing.Use(sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)))
	t.Cleanup(func() { tracing.Use(nil) })
	return exp
}

func newEvent(t *testing.T) event.Event {
	t.Helper()
	e, err := cloudevent.New("11111111-2222-3333-4444-555555555555", events.RideRequested, "/flagdown/order-create", "ride-1",
		map[string]string{"ride_id": "ride-1"}, time.Unix(1700000000, 0))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestEventCarriesThePublishSpan: StartPublish sets traceparent (and tracestate) to the publish
// span, which continues the row's trace, and EventContext reads it back after a JSON round trip
// (the broker's structured mode).
func TestEventCarriesThePublishSpan(t *testing.T) {
	memory(t)
	row := tracing.WithContext(context.Background(), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "vendor=x")
	e := newEvent(t)
	ctx, span := tracing.StartPublish(row, &e)
	span.End()
	sc := trace.SpanContextFromContext(ctx)
	if sc.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" {
		t.Fatalf("publish span in trace %s; want the row's", sc.TraceID())
	}
	b, err := e.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var back event.Event
	if err := back.UnmarshalJSON(b); err != nil {
		t.Fatal(err)
	}
	got := tracing.EventContext(back)
	if got.SpanID() != sc.SpanID() || got.TraceID() != sc.TraceID() || got.TraceState().String() != "vendor=x" {
		t.Errorf("event names %s/%s %q; want the publish span %s/%s vendor=x", got.TraceID(), got.SpanID(), got.TraceState(), sc.TraceID(), sc.SpanID())
	}
	if err := cloudevent.Check(back); err != nil {
		t.Errorf("event with trace context fails Check: %v", err)
	}
}

// TestLongTraceStateIsDropped: a tracestate over MaxTraceStateBytes (a caller may send one) does
// not reach rows or events, so an event never grows past cloudevent.MaxAttributeBytes.
func TestLongTraceStateIsDropped(t *testing.T) {
	memory(t)
	var members []string
	for i := 0; i < 30; i++ {
		members = append(members, "v"+strings.Repeat("k", 10)+string(rune('a'+i%26))+string(rune('a'+i/26))+"="+strings.Repeat("x", 40))
	}
	long := strings.Join(members, ",")
	ctx := tracing.WithContext(context.Background(), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", long)
	if ts := trace.SpanContextFromContext(ctx).TraceState().String(); len(ts) <= tracing.MaxTraceStateBytes {
		t.Fatalf("test tracestate parsed to %d bytes; want more than %d", len(ts), tracing.MaxTraceStateBytes)
	}
	tp, ts := tracing.Context(ctx)
	if tp == "" || ts != "" {
		t.Errorf("Context = %q, %d bytes of tracestate; want the traceparent and no tracestate", tp, len(ts))
	}
}

// TestProcessContinuesTheEventsTrace: the process span nests under the request's span when the
// broker passed the trace on, and otherwise continues the event's producer span with a link to
// the request's span; a malformed traceparent only makes the span a root of its own.
func TestProcessContinuesTheEventsTrace(t *testing.T) {
	memory(t)
	e := newEvent(t)
	pctx, pub := tracing.StartPublish(context.Background(), &e)
	pub.End()
	producer := trace.SpanContextFromContext(pctx)

	t.Run("same trace: child of the request span", func(t *testing.T) {
		_, deliver, h := tracing.StartDeliver(context.Background(), e, "t.events.x", "trigger-match", 1)
		deliver.End()
		req := httptest.NewRequest(http.MethodPost, "/", nil)
		req.Header = h
		sctx, server := tracing.StartServer(req, "match")
		_, proc := tracing.StartProcess(sctx, "match", e)
		proc.End()
		server.End()
		ro := proc.(sdktrace.ReadOnlySpan)
		if ro.Parent().SpanID() != server.SpanContext().SpanID() || ro.SpanContext().TraceID() != producer.TraceID() {
			t.Errorf("process parent %s in trace %s; want the server span %s in %s", ro.Parent().SpanID(), ro.SpanContext().TraceID(), server.SpanContext().SpanID(), producer.TraceID())
		}
	})
	t.Run("broker dropped the trace: child of the producer, linked to the request", func(t *testing.T) {
		sctx, server := tracing.StartServer(httptest.NewRequest(http.MethodPost, "/", nil), "match")
		_, proc := tracing.StartProcess(sctx, "match", e)
		proc.End()
		server.End()
		ro := proc.(sdktrace.ReadOnlySpan)
		if ro.Parent().SpanID() != producer.SpanID() || ro.SpanContext().TraceID() != producer.TraceID() {
			t.Errorf("process parent %s; want the producer span %s", ro.Parent().SpanID(), producer.SpanID())
		}
		if links := ro.Links(); len(links) != 1 || links[0].SpanContext.SpanID() != server.SpanContext().SpanID() {
			t.Errorf("process links %v; want one to the server span", links)
		}
	})
	t.Run("malformed traceparent: the span is under the request, nothing fails", func(t *testing.T) {
		bad := newEvent(t)
		bad.SetExtension(tracing.TraceParent, "00-not-a-trace-01")
		if err := cloudevent.Check(bad); err != nil {
			t.Fatalf("Check: %v", err)
		}
		sctx, server := tracing.StartServer(httptest.NewRequest(http.MethodPost, "/", nil), "match")
		_, proc := tracing.StartProcess(sctx, "match", bad)
		proc.End()
		server.End()
		ro := proc.(sdktrace.ReadOnlySpan)
		if ro.Parent().SpanID() != server.SpanContext().SpanID() {
			t.Errorf("process parent %s; want the server span %s", ro.Parent().SpanID(), server.SpanContext().SpanID())
		}
	})
}

// TestUseNilRestoresTheNoopProvider: Use(nil) after a provider leaves nothing recording.
func TestUseNilRestoresTheNoopProvider(t *testing.T) {
	memory(t)
	tracing.Use(nil)
	_, span := tracing.Start(context.Background(), "x")
	defer span.End()
	if span.IsRecording() {
		t.Error("span records after Use(nil)")
	}
	if f := otel.GetTextMapPropagator().Fields(); len(f) != 0 {
		t.Errorf("propagator fields %v after Use(nil); want none", f)
	}
}

// TestPublishSystem: publish spans name the broker SetPublishSystem set, nats by default.
func TestPublishSystem(t *testing.T) {
	exp := memory(t)
	t.Cleanup(func() { tracing.SetPublishSystem(tracing.SystemNATS) })
	for _, want := range []string{tracing.SystemNATS, tracing.SystemKnative} {
		if want != tracing.SystemNATS {
			tracing.SetPublishSystem(want)
		}
		exp.Reset()
		e := newEvent(t)
		_, span := tracing.StartPublish(context.Background(), &e)
		span.End()
		got := ""
		for _, kv := range exp.GetSpans()[0].Attributes {
			if kv.Key == "messaging.system" {
				got = kv.Value.AsString()
			}
		}
		if got != want {
			t.Errorf("messaging.system = %q; want %q", got, want)
		}
	}
}
