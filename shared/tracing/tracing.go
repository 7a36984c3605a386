// Package tracing owns flagdown's distributed traces (OpenTelemetry): the tracer provider of a
// process, set up from the standard OTEL_* environment, and the propagation of the W3C trace
// context over HTTP headers (traceparent, tracestate), outbox rows and CloudEvents (the CloudEvents
// distributed tracing extension: the attributes traceparent and tracestate).
//
// Tracing is off by default. Setup turns it on only when OTEL_TRACES_EXPORTER is otlp, or
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set (and
// OTEL_TRACES_EXPORTER is not none); OTEL_SDK_DISABLED=true always turns it off (Enabled). Off, the
// no-op provider is installed with no propagator: the span helpers return one shared no-op span
// without building a span or its attributes, nothing is exported, and no traceparent is written
// to outbox rows, events or requests (an incoming one is ignored).
//
// On, spans go through a batch span processor (OTEL_BSP_*) to the OTLP/HTTP exporter, which reads
// OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT, _HEADERS, _TIMEOUT, _COMPRESSION, _CERTIFICATE and _INSECURE
// itself; the sampler is OTEL_TRACES_SAMPLER's (default parentbased_always_on) and the resource
// carries OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES. Only the http/protobuf protocol is built
// in (the collector's port 4318): OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL grpc or http/json is refused
// with an error rather than silently ignored.
//
// The trace context is observability data, not a credential: it is not covered by the events'
// internal signature (shared/internalauth) and never changes what a function does.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ScopeName is the instrumentation scope of every flagdown span.
const ScopeName = "github.com/flagdown/flagdown"

// Attribute keys flagdown adds to spans beside the OpenTelemetry semantic conventions.
const (
	// RideIDKey is the ride a span works on.
	RideIDKey = attribute.Key("ride.id")
	// DriverIDKey is the driver a span works on (the one offered the ride, the one who pinged).
	DriverIDKey = attribute.Key("driver.id")
	// OfferIDKey is the offer a span created.
	OfferIDKey = attribute.Key("offer.id")
	// OutcomeKey is the outcome a function returned for an event (offered, duplicate, ...).
	OutcomeKey = attribute.Key("flagdown.outcome")
	// DeliveryAttemptKey is the delivery attempt of an event to a trigger's function, from 1.
	DeliveryAttemptKey = attribute.Key("flagdown.delivery.attempt")
)

// Names of the W3C trace context: the HTTP headers and the CloudEvent extension attributes.
const (
	// TraceParent carries the trace id, the parent span id and the sampled flag.
	TraceParent = "traceparent"
	// TraceState carries vendor-specific trace data.
	TraceState = "tracestate"
)

// Enabled reports whether the environment read by getenv turns tracing on: OTEL_SDK_DISABLED is
// not true, OTEL_TRACES_EXPORTER is not none, and OTEL_TRACES_EXPORTER is otlp or an OTLP endpoint
// (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set.
func Enabled(getenv func(string) string) bool {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	switch strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))) {
	case "none":
		return false
	case "otlp":
		return true
	}
	return strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT")) != "" ||
		strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")) != ""
}

// check refuses settings Setup cannot honour, naming the variable: an exporter other than otlp or
// none, a protocol other than http/protobuf. Nothing is refused when OTEL_SDK_DISABLED is true or
// OTEL_TRACES_EXPORTER is none (tracing is off whatever the rest says).
func check(getenv func(string) string) error {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") ||
		strings.EqualFold(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")), "none") {
		return nil
	}
	if v := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))); v != "" && v != "otlp" && v != "none" {
		return fmt.Errorf("tracing: OTEL_TRACES_EXPORTER must be otlp or none, got %q", v)
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		v := strings.ToLower(strings.TrimSpace(getenv(name)))
		if v == "" {
			continue
		}
		if v != "http/protobuf" {
			return fmt.Errorf("tracing: %s must be http/protobuf (an OTLP/HTTP collector, port 4318), got %q: "+
				"flagdown does not build in the gRPC exporter", name, v)
		}
		break // the traces-specific variable wins over the general one
	}
	return nil
}

// Shutdown flushes the spans still buffered and stops the exporter; Setup returns it. It is safe to
// call on a process whose tracing is off.
type Shutdown func(context.Context) error

// Setup installs the process's tracer provider and propagator from the OTEL_* environment, with
// service as the default service.name (OTEL_SERVICE_NAME wins). Off (Enabled false) it installs
// the no-op provider and no propagator (Use(nil)) and returns a no-op Shutdown. On, it returns the
// provider's Shutdown, which the process must call before it exits so that buffered spans are
// sent. A setting it cannot honour (check) is an error naming the variable, and nothing is
// installed.
func Setup(ctx context.Context, service string) (Shutdown, error) {
	if err := check(os.Getenv); err != nil {
		return nil, err
	}
	if !Enabled(os.Getenv) {
		Use(nil)
		return func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", service)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("tracing: resource (OTEL_RESOURCE_ATTRIBUTES): %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	Use(tp)
	return tp.Shutdown, nil
}

// Use installs tp as the process's tracer provider with the W3C TraceContext propagator; nil
// installs the no-op provider and no propagator (tracing off). Setup calls it; tests call it with
// a provider over an in-memory exporter.
func Use(tp trace.TracerProvider) {
	if tp == nil {
		on.Store(false)
		otel.SetTracerProvider(noop.NewTracerProvider())
		otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator())
		return
	}
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	on.Store(true)
}

// on says whether Use installed a provider: while it is false the span helpers of this package
// (StartServer, StartPublish, ...) return offSpan without building a span or its attributes.
var on atomic.Bool

// offSpan is the span the helpers return while tracing is off: it records nothing, and holding it
// in an interface once costs no allocation per call.
var offSpan trace.Span = noop.Span{}

// On reports whether a tracer provider is installed (Setup turned tracing on, or a test called
// Use with a provider).
func On() bool { return on.Load() }

// Tracer returns flagdown's tracer from the installed provider. It is looked up on each call (a
// map read) so that a provider installed later is used.
func Tracer() trace.Tracer { return otel.GetTracerProvider().Tracer(ScopeName) }

// Start starts a span called name as a child of ctx's span (a root span when there is none); with
// tracing off it returns ctx and the shared no-op span.
func Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !On() {
		return ctx, offSpan
	}
	return Tracer().Start(ctx, name, opts...)
}

// End records err on span (status Error, an exception event) when it is not nil, then ends it.
func End(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// MaxTraceStateBytes is the longest tracestate Context passes on, in bytes: the size W3C Trace
// Context asks propagators to keep to. A longer one (a caller may send up to 32 members) is
// dropped whole, so that an event never exceeds cloudevent.MaxAttributeBytes because of it.
const MaxTraceStateBytes = 512

// Context returns the W3C trace context of ctx's span as its traceparent and tracestate values,
// empty when tracing is off or ctx has no valid span; a tracestate over MaxTraceStateBytes is
// dropped.
func Context(ctx context.Context) (traceparent, tracestate string) {
	c := propagation.MapCarrier{}
	otel.GetTextMapPropagator().Inject(ctx, c)
	if len(c[TraceState]) > MaxTraceStateBytes {
		return c[TraceParent], ""
	}
	return c[TraceParent], c[TraceState]
}

// WithContext returns ctx carrying the remote span context of traceparent and tracestate, as an
// incoming request or a stored row gives them. A missing or malformed traceparent leaves ctx as it
// is (the next span is a root), and so does tracing off.
func WithContext(ctx context.Context, traceparent, tracestate string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return otel.GetTextMapPropagator().Extract(ctx, propagation.MapCarrier{TraceParent: traceparent, TraceState: tracestate})
}

// InjectHTTP writes ctx's trace context into the headers h of an outgoing request.
func InjectHTTP(ctx context.Context, h http.Header) {
	otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(h))
}

// ExtractHTTP returns ctx carrying the trace context of the headers h of an incoming request.
func ExtractHTTP(ctx context.Context, h http.Header) context.Context {
	return otel.GetTextMapPropagator().Extract(ctx, propagation.HeaderCarrier(h))
}
