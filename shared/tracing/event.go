package tracing

import (
	"context"
	"net/http"
	"sync/atomic"

	"github.com/cloudevents/sdk-go/v2/event"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/flagdown/flagdown/events"
)

// Values of messaging.system on flagdown's spans.
const (
	// SystemNATS: NATS JetStream (flagdown dev, OpenFaaS), the default.
	SystemNATS = "nats"
	// SystemKnative: a Knative Broker (the relay and the expiry source publish to K_SINK).
	SystemKnative = "knative"
)

// publishSystem is the messaging.system of the publish spans, set once at start (SetPublishSystem).
var publishSystem atomic.Value

// SetPublishSystem names the broker this process publishes to (SystemNATS, SystemKnative) for the
// messaging.system of its publish spans; the default is SystemNATS. Call it at start, before
// publishing.
func SetPublishSystem(system string) { publishSystem.Store(system) }

// publishTo returns the messaging.system of publish spans.
func publishTo() string {
	if s, ok := publishSystem.Load().(string); ok {
		return s
	}
	return SystemNATS
}

// InjectEvent sets e's traceparent and tracestate extension attributes (the CloudEvents distributed
// tracing extension) to ctx's trace context, replacing any earlier ones; with tracing off or no
// valid span in ctx, e carries neither. The relay and the expiry source call it on the span that
// publishes e, before signing (the signature does not cover them).
func InjectEvent(ctx context.Context, e *event.Event) {
	tp, ts := Context(ctx)
	setExtension(e, TraceParent, tp)
	setExtension(e, TraceState, ts)
}

// setExtension sets the string extension name of e, or removes it when v is empty.
func setExtension(e *event.Event, name, v string) {
	if v == "" {
		e.SetExtension(name, nil)
		return
	}
	e.SetExtension(name, v)
}

// EventContext returns the span context the producer of e recorded in its traceparent and
// tracestate extension attributes (invalid when e carries none, a malformed one, or tracing is off).
func EventContext(e event.Event) trace.SpanContext {
	tp, _ := e.Extensions()[TraceParent].(string)
	ts, _ := e.Extensions()[TraceState].(string)
	return trace.SpanContextFromContext(WithContext(context.Background(), tp, ts))
}

// EventAttributes are the span attributes of e: the CloudEvents semantic conventions
// (cloudevents.event_id, _type, _source, _subject), messaging.message.id, and ride.id or driver.id
// when the subject names a ride or a driver (events.SubjectOf).
func EventAttributes(e event.Event) []attribute.KeyValue {
	kv := []attribute.KeyValue{
		semconv.CloudEventsEventID(e.ID()),
		semconv.CloudEventsEventType(e.Type()),
		semconv.CloudEventsEventSource(e.Source()),
		semconv.CloudEventsEventSubject(e.Subject()),
		semconv.MessagingMessageID(e.ID()),
	}
	switch events.SubjectOf(e.Type()) {
	case events.SubjectRide:
		kv = append(kv, RideIDKey.String(e.Subject()))
	case events.SubjectDriver:
		kv = append(kv, DriverIDKey.String(e.Subject()))
	}
	return kv
}

// StartPublish starts the producer span of publishing e, called "send <type>" (OpenTelemetry
// messaging conventions: operation type send, operation name publish), as a child of ctx's span,
// and sets e's trace context extension attributes to it (InjectEvent). End it with End once the
// broker answered.
func StartPublish(ctx context.Context, e *event.Event) (context.Context, trace.Span) {
	if !On() {
		InjectEvent(ctx, e)
		return ctx, offSpan
	}
	ctx, span := Start(ctx, "send "+e.Type(), trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(semconv.MessagingSystemKey.String(publishTo()),
			semconv.MessagingOperationTypeSend, semconv.MessagingOperationName("publish"),
			semconv.MessagingDestinationName(e.Type())),
		trace.WithAttributes(EventAttributes(*e)...))
	InjectEvent(ctx, e)
	return ctx, span
}

// StartDeliver starts the span of a trigger delivering e to its function (OpenTelemetry messaging
// conventions: a consumer span, operation type receive, named "receive <subject>" after the NATS
// subject, consumer group the trigger's consumer), as a child of the span e's traceparent names, and
// returns the headers that carry that span to the function (traceparent, tracestate; nil when
// tracing is off). attempt is the delivery attempt, from 1.
func StartDeliver(ctx context.Context, e event.Event, subject, consumer string, attempt int) (context.Context, trace.Span, http.Header) {
	if !On() {
		return ctx, offSpan, nil
	}
	if sc := EventContext(e); sc.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	ctx, span := Start(ctx, "receive "+subject, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(semconv.MessagingSystemKey.String(SystemNATS),
			semconv.MessagingOperationTypeReceive, semconv.MessagingOperationName("deliver"),
			semconv.MessagingDestinationName(subject), semconv.MessagingConsumerGroupName(consumer),
			DeliveryAttemptKey.Int(attempt)),
		trace.WithAttributes(EventAttributes(e)...))
	h := http.Header{}
	InjectHTTP(ctx, h)
	return ctx, span, h
}

// StartProcess starts the span of a function processing e, called "process <type>" (OpenTelemetry
// messaging conventions: a consumer span, operation type process). Its parent is ctx's span (the
// HTTP server span) when that is in the trace e's traceparent names, which is the case when the
// broker passed the trace on in the request's headers; otherwise it is the span e's traceparent
// names, with a link to ctx's span, so the trace continues from the event's producer whatever the
// broker in between did. An event without a valid traceparent is processed under ctx's span.
func StartProcess(ctx context.Context, function string, e event.Event) (context.Context, trace.Span) {
	if !On() {
		return ctx, offSpan
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(semconv.MessagingSystemKey.String(SystemNATS),
			semconv.MessagingOperationTypeProcess, semconv.MessagingOperationName("process"),
			semconv.MessagingDestinationName(e.Type()), semconv.MessagingConsumerGroupName(function)),
		trace.WithAttributes(EventAttributes(e)...)}
	created := EventContext(e)
	current := trace.SpanContextFromContext(ctx)
	if created.IsValid() && created.TraceID() != current.TraceID() {
		if current.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: current,
				Attributes: []attribute.KeyValue{attribute.String("flagdown.link", "http.request")}}))
		}
		ctx = trace.ContextWithRemoteSpanContext(ctx, created)
	}
	return Start(ctx, "process "+e.Type(), opts...)
}

// EndDeliver records on span the HTTP status the function answered (0: no answer) and the
// delivery's failure (nil when the function acknowledged the event), and ends it.
func EndDeliver(span trace.Span, status int, err error) {
	if status > 0 && span.IsRecording() {
		span.SetAttributes(semconv.HTTPResponseStatusCode(status))
	}
	End(span, err)
}
