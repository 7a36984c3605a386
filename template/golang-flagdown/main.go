//go:build ignore

// Command handler is the process of one flagdown function image, built by the golang-flagdown
// template (template/golang-flagdown) for OpenFaaS and Knative alike.
//
// In the build context faas-cli lays out, function/ is the whole flagdown module (go.mod, go.sum,
// shared/, events/, migrations/ copied by stack.yml's configuration.copy) with the function's own
// files at its root, so the function is the module's root package, imported here as function. That
// package exists only in the build context, so this file carries the ignore build constraint: it
// stays out of the repository's ./... packages, go vet and go mod tidy (which treats every other tag
// as set). build.sh builds it by naming the file, to which go build applies no build constraints.
//
// It plays the part of the OpenFaaS of-watchdog in http mode and the golang-middleware main: it
// serves function.Handle on :$PORT (default 8080, the port OpenFaaS and Knative call) with
// GET /_/health (process up) and GET /_/ready (PostgreSQL and Redis reachable: ok or not, never
// why) for the probes (host.PublicHandler); GET /metrics (Prometheus, shared/metrics; the
// manifests' scrape annotations name its port) and the readiness details only on the internal
// listener FLAGDOWN_INTERNAL_ADDR (default :9090, host.InternalHandler), which no route reaches; writes
// the /tmp/.lock file exec probes look for, applies read_timeout / write_timeout, drains requests
// on SIGTERM for up to write_timeout, and exports traces when the OTEL_* environment turns them on
// (shared/tracing), flushing them at exit.
package main

import (
	"context"
	"errors"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	function "github.com/flagdown/flagdown"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/host"
	"github.com/flagdown/flagdown/shared/httpx"
	"github.com/flagdown/flagdown/shared/tracing"
)

const defaultTimeout = 10 * time.Second

// maxHeaderBytes caps a request's headers (a bearer token and CloudEvent attributes fit many times
// over); larger headers answer 431.
const maxHeaderBytes = 64 << 10

func main() {
	// The logger of the process (shared/logging: JSON by default). A configuration that does not load
	// is logged here and answered 503 by the function until it is fixed (host.Lazy).
	cfg, cfgErr := config.Load()
	log := host.NewLogger(cfg)
	if cfgErr != nil {
		log.Error("configuration does not load; the function answers 503 until it does", "err", cfgErr)
	}
	// Traces (shared/tracing): off unless the OTEL_* environment names an OTLP endpoint. A setting
	// it cannot honour is logged and the function runs untraced.
	stopTracing, err := tracing.Setup(context.Background(), functionName())
	if err != nil {
		log.Error("tracing off: the OTEL_* settings cannot be used", "err", err)
		stopTracing = func(context.Context) error { return nil }
	}
	readTimeout := duration(os.Getenv("read_timeout"), defaultTimeout)
	writeTimeout := duration(os.Getenv("write_timeout"), defaultTimeout)
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}

	// The public port serves the function and the probes' ok / not ok; metrics and the readiness
	// details (they name hosts, users and databases) only on the internal listener, which no
	// gateway route reaches.
	handler := host.PublicHandler(httpx.Instrument(functionName(), http.HandlerFunc(function.Handle)), host.ProcessReady)
	internalAddr, set := os.LookupEnv(host.InternalAddrVariable)
	if !set {
		internalAddr = host.DefaultInternalAddr
	}
	_, stopInternal, err := host.ServeInternal(internalAddr, host.InternalHandler(host.ProcessReady), log)
	if err != nil {
		log.Error("internal listener", "err", err)
		os.Exit(1)
	}
	defer stopInternal()

	srv := &http.Server{
		Addr:              ":" + port,
		Handler:           handler,
		ReadHeaderTimeout: readTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    maxHeaderBytes,
	}
	_ = os.WriteFile("/tmp/.lock", []byte("ok\n"), 0o644)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	log.Info("flagdown function listening", "addr", srv.Addr)
	select {
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			log.Error("listen", "err", err)
			os.Exit(1)
		}
	case <-ctx.Done():
		_ = os.Remove("/tmp/.lock")
		sctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			log.Error("shutdown", "err", err)
		}
	}
	fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := stopTracing(fctx); err != nil {
		log.Warn("tracing: spans not flushed at exit", "err", err)
	}
}

// duration parses an OpenFaaS timeout: Go syntax (10s) or a whole number of seconds (10).
func duration(v string, def time.Duration) time.Duration {
	if v == "" {
		return def
	}
	if n, err := strconv.Atoi(v); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return d
	}
	return def
}

// functionName is the function label of this image's request metrics: the Knative Service's name
// (K_SERVICE), else the Deployment's name read off the pod's HOSTNAME (<deployment>-<replica set
// hash>-<pod hash>, as faas-netes names a function's pods), else "function".
func functionName() string {
	if n := os.Getenv("K_SERVICE"); n != "" {
		return n
	}
	if parts := strings.Split(os.Getenv("HOSTNAME"), "-"); len(parts) > 2 {
		return strings.Join(parts[:len(parts)-2], "-")
	}
	return "function"
}
