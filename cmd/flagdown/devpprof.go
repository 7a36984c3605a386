//go:build !production

package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime"
	"time"
)

// Sampling of the block and mutex profiles while the profiling listener runs: one blocking event
// per devBlockProfileRate nanoseconds blocked, one mutex contention event in devMutexFraction.
const (
	devBlockProfileRate = 10_000 // nanoseconds
	devMutexFraction    = 10
)

// startPprof serves net/http/pprof on addr (FLAGDOWN_PPROF_ADDR) and returns the server, which the
// caller closes. The listener is its own, never the gateway's: profiles name functions and
// addresses, and only the machine's user should read them. The block and mutex profiles are turned
// on by enableContentionProfiles, once the platform is up.
func startPprof(addr string, log *slog.Logger) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("FLAGDOWN_PPROF_ADDR: listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("pprof listener stopped", "err", err)
		}
	}()
	log.Info("profiling: net/http/pprof served", "addr", "http://"+ln.Addr().String()+"/debug/pprof/")
	return srv, nil
}

// enableContentionProfiles turns on the block and mutex profiles. It runs after the platform
// started: the embedded nats-server sets the block profile rate from its own options at start
// (to 0, off, unless configured), which would undo an earlier setting.
func enableContentionProfiles() {
	runtime.SetBlockProfileRate(devBlockProfileRate)
	runtime.SetMutexProfileFraction(devMutexFraction)
}
