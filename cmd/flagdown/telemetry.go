package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/host"
	"github.com/flagdown/flagdown/shared/internalauth"
	"github.com/flagdown/flagdown/shared/metrics"
	"github.com/flagdown/flagdown/shared/tracing"
)

// worker is what a long-running worker command (the relay, the expiry source) starts with: its
// configuration, the event signer, the logger, traces and the metrics endpoint.
type worker struct {
	cfg  *config.Config
	keys *internalauth.Signer
	log  *slog.Logger
	// stop ends the metrics endpoint and flushes the traces; call it before exiting.
	stop func()
}

// startWorker loads the configuration and the event signing key, then starts traces under service
// (service.name) and, when metricsAddr is not empty, the metrics endpoint (serveMetrics).
func startWorker(ctx context.Context, service, metricsAddr string) (*worker, error) {
	cfg, err := config.Load()
	if err != nil {
		return nil, err
	}
	keys, err := eventSigner(cfg)
	if err != nil {
		return nil, err
	}
	log := host.NewLogger(cfg)
	stopTracing, err := startTracing(ctx, service, log)
	if err != nil {
		return nil, err
	}
	_, stopMetrics, err := serveMetrics(metricsAddr, log)
	if err != nil {
		stopTracing()
		return nil, err
	}
	return &worker{cfg: cfg, keys: keys, log: log, stop: func() { stopMetrics(); stopTracing() }}, nil
}

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

// serveMetrics serves GET /metrics (shared/metrics: the process's families, e.g. the relay's
// flagdown_outbox_published_total, and the Go runtime's) and GET /healthz on addr until stop is
// called, for the long-running Deployments (relay, expiry source) whose pods Prometheus scrapes.
// It returns the address listened on (addr with the port chosen for port 0). An empty addr serves
// nothing. It fails when addr cannot be listened on.
func serveMetrics(addr string, log *slog.Logger) (bound string, stop func(), err error) {
	if addr == "" {
		return "", func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("metrics: listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics.Handler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 120 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "addr", addr, "err", err)
		}
	}()
	log.Info("serving metrics", "addr", ln.Addr().String(), "path", "/metrics")
	return ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}

// metricsAddrUsage is the help of the --metrics-addr flag of the long-running commands.
const metricsAddrUsage = "serve GET /metrics (Prometheus) and GET /healthz on this address, e.g. :9090 (the manifests' scrape annotations name it); empty: none"
