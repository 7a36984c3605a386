package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flagdown/flagdown/shared/metrics"
)

// InternalAddrVariable names the address of a function process's internal listener
// (InternalHandler: GET /metrics and the readiness details), and DefaultInternalAddr is the one it
// listens on when the variable is unset. Set it empty to serve no internal listener. The platform
// routes clients to PORT only (8080), so nothing a client can reach serves these.
const (
	InternalAddrVariable = "FLAGDOWN_INTERNAL_ADDR"
	DefaultInternalAddr  = ":9090"
)

// ReadyFunc reports whether a process can serve: nil when PostgreSQL and Redis answer, else why not.
type ReadyFunc func(ctx context.Context) error

// readyTimeout bounds one readiness check.
const readyTimeout = 2 * time.Second

// ProcessReady is the ReadyFunc of a function image's process: its Deps open (Process) and ready.
func ProcessReady(ctx context.Context) error {
	d, err := Process(ctx)
	if err == nil {
		err = d.Ready(ctx)
	}
	return err
}

// PublicHandler is what a function process serves on its public port (PORT, the one the gateway
// and the platform's probes call): GET /_/health (the process is up), GET /_/ready (200
// {"status":"ready"} or 503 {"status":"unavailable"}, never why: the reason names hosts, users
// and databases) and fn for everything else. It serves no metrics: those are on the internal
// listener (InternalHandler).
func PublicHandler(fn http.Handler, ready ReadyFunc) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /_/health", health)
	mux.HandleFunc("GET /_/ready", func(w http.ResponseWriter, r *http.Request) {
		if err := checkReady(r.Context(), ready); err != nil {
			writeStatus(w, http.StatusServiceUnavailable, `{"status":"unavailable"}`)
			return
		}
		writeStatus(w, http.StatusOK, `{"status":"ready"}`)
	})
	mux.Handle("/", fn)
	return mux
}

// InternalHandler is what a process serves on its internal listener (InternalAddrVariable): GET
// /metrics (Prometheus, shared/metrics, with extra's families), GET /_/health and GET /_/ready with
// the reason when it is not ready (503 {"status":"unavailable","error":"..."}). ready may be nil (a
// process without dependencies to check: always ready).
func InternalHandler(ready ReadyFunc, extra ...prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics.Handler(extra...))
	mux.HandleFunc("GET /_/health", health)
	mux.HandleFunc("GET /_/ready", func(w http.ResponseWriter, r *http.Request) {
		if err := checkReady(r.Context(), ready); err != nil {
			writeStatus(w, http.StatusServiceUnavailable, fmt.Sprintf(`{"status":"unavailable","error":%q}`, err.Error()))
			return
		}
		writeStatus(w, http.StatusOK, `{"status":"ready"}`)
	})
	return mux
}

// ServeInternal serves h on addr until the returned stop is called, with the timeouts of every
// flagdown listener. It returns the address listened on (addr with the port chosen for port 0); an
// empty addr serves nothing. It fails when addr cannot be listened on.
func ServeInternal(addr string, h http.Handler, log *slog.Logger) (bound string, stop func(), err error) {
	if addr == "" {
		return "", func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("internal listener: listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 120 * time.Second, MaxHeaderBytes: 64 << 10}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("internal listener stopped", "addr", addr, "err", err)
		}
	}()
	log.Info("internal listener (metrics, readiness details)", "addr", ln.Addr().String())
	return ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}

func checkReady(ctx context.Context, ready ReadyFunc) error {
	if ready == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	return ready(ctx)
}

func health(w http.ResponseWriter, _ *http.Request) {
	writeStatus(w, http.StatusOK, `{"status":"ok"}`)
}

func writeStatus(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(body + "\n"))
}
