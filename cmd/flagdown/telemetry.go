package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/flagdown/flagdown/shared/tracing"
)

// startTracing sets up the process's traces from the OTEL_* environment (tracing.Setup; off unless
// an OTLP endpoint or OTEL_TRACES_EXPORTER=otlp is set) with service as the default service.name.
// The returned stop flushes the buffered spans, waiting at most 5 seconds; call it before exiting.
func startTracing(ctx context.Context, service string, log *slog.Logger) (stop func(), err error) {
	shutdown, err := tracing.Setup(ctx, service)
	if err != nil {
		return nil, err
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := shutdown(sctx); err != nil {
			log.Warn("tracing: spans not flushed at exit", "err", err)
		}
	}, nil
}
