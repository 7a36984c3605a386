package tracing

import (
	"context"
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// StartServer starts the server span of a function answering r, named after the function
// (OpenTelemetry FaaS conventions: faas.trigger http), continuing the trace of r's traceparent and
// tracestate headers when it has them. End it with EndServer.
func StartServer(r *http.Request, function string) (context.Context, trace.Span) {
	if !On() {
		return r.Context(), offSpan
	}
	ctx := ExtractHTTP(r.Context(), r.Header)
	return Start(ctx, function, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(semconv.FaaSTriggerHTTP, semconv.FaaSInvokedName(function),
			semconv.HTTPRequestMethodKey.String(r.Method), semconv.URLPath(r.URL.Path)))
}

// EndServer records the HTTP status the function answered on span (a 5xx is an error, as the HTTP
// conventions say of server spans) and ends it.
func EndServer(span trace.Span, status int) {
	if !span.IsRecording() {
		span.End()
		return
	}
	span.SetAttributes(semconv.HTTPResponseStatusCode(status))
	if status >= 500 {
		span.SetStatus(codes.Error, strconv.Itoa(status)+" "+http.StatusText(status))
	}
	span.End()
}
