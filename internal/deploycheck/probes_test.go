package deploycheck_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flagdown/flagdown/internal/deploycheck"
	"github.com/flagdown/flagdown/internal/testkit"
)

// freePort is a loopback port nothing listens on (it was free a moment ago).
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// get answers GET url: status and body ("" and 0 when nothing answered).
func get(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestProbesOffThePublicRoute builds one function image's binary (ride) and starts it with a
// PostgreSQL it cannot reach. Its public port (PORT, the one the gateway routes to) answers the
// liveness probe and a readiness answer without details (503 {"status":"unavailable"}: the
// error names the database host), and never serves /metrics; the internal listener
// (FLAGDOWN_INTERNAL_ADDR, which no route of the gateway reaches) serves /metrics and the
// readiness details.
func TestProbesOffThePublicRoute(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a function image's binary")
	}
	root := repoRoot(t)
	s, err := deploycheck.LoadStack(filepath.Join(root, "stack.yml"))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "ride")
	if err := deploycheck.Layout(root, s, "ride", dir); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "handler")
	var out strings.Builder
	if err := deploycheck.Build(dir, bin, deploycheck.OfflineEnv, &out, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	dbAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t)) // nothing listens there
	public, internal := freePort(t), freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = []string{
		fmt.Sprintf("PORT=%d", public), fmt.Sprintf("FLAGDOWN_INTERNAL_ADDR=127.0.0.1:%d", internal),
		"DATABASE_URL=postgres://flagdown:pw@" + dbAddr + "/flagdown?connect_timeout=1",
		"REDIS_URL=" + testkit.RedisURL(), "FLAGDOWN_REDIS_PREFIX=t:" + testkit.ID() + ":",
		"FLAGDOWN_JWT_SECRET=probe-test-secret-0123456789abcdef0123456789",
		"read_timeout=5s", "write_timeout=5s", "PATH=" + os.Getenv("PATH"), "K_SERVICE=ride",
	}
	var logs testkit.Output
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})
	pub := fmt.Sprintf("http://127.0.0.1:%d", public)
	in := fmt.Sprintf("http://127.0.0.1:%d", internal)
	testkit.Eventually(t, 20*time.Second, func() (bool, string) {
		code, _ := get(pub + "/_/health")
		return code == http.StatusOK, fmt.Sprintf("GET /_/health: %d; output:\n%s", code, logs.String())
	})

	t.Run("PublicReadinessWithoutDetails", func(t *testing.T) {
		code, body := get(pub + "/_/ready")
		if code != http.StatusServiceUnavailable || strings.TrimSpace(body) != `{"status":"unavailable"}` {
			t.Errorf("public GET /_/ready: %d %s, want 503 {\"status\":\"unavailable\"} and nothing else", code, body)
		}
	})
	t.Run("PublicRouteHasNoMetrics", func(t *testing.T) {
		code, body := get(pub + "/metrics")
		if code == http.StatusOK || strings.Contains(body, "go_goroutines") || strings.Contains(body, "flagdown_") {
			t.Errorf("public GET /metrics: %d, serves metrics:\n%.300s", code, body)
		}
	})
	t.Run("InternalListenerServesMetricsAndDetails", func(t *testing.T) {
		code, body := get(in + "/metrics")
		if code != http.StatusOK || !strings.Contains(body, "go_goroutines") {
			t.Errorf("internal GET /metrics: %d, want 200 with the metric families:\n%.300s", code, body)
		}
		code, body = get(in + "/_/ready")
		if code != http.StatusServiceUnavailable || !strings.Contains(body, `"error"`) {
			t.Errorf("internal GET /_/ready: %d %s, want 503 with the error", code, body)
		}
	})
}
