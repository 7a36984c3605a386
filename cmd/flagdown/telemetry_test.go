package main

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

// TestServeMetrics: the long-running commands' --metrics-addr serves the Prometheus families
// (the relay's outbox counter among them) and a health answer; an empty address serves nothing.
func TestServeMetrics(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	if addr, stop, err := serveMetrics("", log); err != nil || addr != "" {
		t.Fatalf("empty address: %q, %v; want nothing served", addr, err)
	} else {
		stop()
	}
	addr, stop, err := serveMetrics("127.0.0.1:0", log)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for path, want := range map[string]string{"/metrics": "flagdown_outbox_published_total", "/healthz": `"ok"`} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), want) {
			t.Errorf("GET %s: %d, body lacks %q", path, resp.StatusCode, want)
		}
	}
	if _, _, err := serveMetrics(addr, log); err == nil {
		t.Error("a second server on the same address started")
	}
}
