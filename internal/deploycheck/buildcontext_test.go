package deploycheck_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/flagdown/flagdown/internal/deploycheck"
	"github.com/flagdown/flagdown/internal/testkit"
)

// TestBuildContexts lays out, for every stack.yml function, the build context faas-cli would create
// and builds it with the template's build step offline (GOPROXY=off, -mod=readonly: go.sum must be
// complete). Each binary is then started the way a platform starts it — PORT set, credentials only
// as files in a secrets folder — and must answer /_/health and /_/ready (real PostgreSQL and Redis),
// and count a request to the function on /metrics of its internal listener under its name.
func TestBuildContexts(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every function image's binary")
	}
	root := repoRoot(t)
	s, err := deploycheck.LoadStack(filepath.Join(root, "stack.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for n := range s.Functions {
		names = append(names, n)
	}
	sort.Strings(names)
	work := t.TempDir()
	secrets := filepath.Join(work, "secrets")
	if err := os.Mkdir(secrets, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]string{"database-url": testkit.DatabaseURL(), "redis-url": testkit.RedisURL()} {
		if err := os.WriteFile(filepath.Join(secrets, name), []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range names {
		t.Run(n, func(t *testing.T) {
			dir := filepath.Join(work, "build", n)
			if err := deploycheck.Layout(root, s, n, dir); err != nil {
				t.Fatal(err)
			}
			for _, p := range []string{"Dockerfile", "build.sh", "main.go", "function/handler.go", "function/go.mod", "function/go.sum"} {
				if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
					t.Errorf("build context lacks %s: %v", p, err)
				}
			}
			bin := filepath.Join(dir, "handler")
			var out bytes.Buffer
			if err := deploycheck.Build(dir, bin, deploycheck.OfflineEnv, &out, &out); err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			serve(t, bin, secrets, n)
		})
	}
}

// serve starts bin like a platform would (as Knative names it: K_SERVICE=name), checks its probes,
// then sends the function one request and finds it counted on /metrics.
func serve(t *testing.T, bin, secrets, name string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	internal := freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = []string{
		fmt.Sprintf("PORT=%d", port), fmt.Sprintf("FLAGDOWN_INTERNAL_ADDR=127.0.0.1:%d", internal), "FLAGDOWN_SECRETS_DIR=" + secrets, "FLAGDOWN_REDIS_PREFIX=t:" + testkit.ID() + ":",
		"read_timeout=5s", "write_timeout=5s", "PATH=" + os.Getenv("PATH"), "K_SERVICE=" + name,
	}
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	deadline := time.Now().Add(20 * time.Second)
	for _, path := range []string{"/_/health", "/_/ready"} {
		for {
			resp, err := http.Get(base + path)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET %s: not 200 within 20s (last: %v %v); process output:\n%s", path, resp, err, logs.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	resp, err := http.Post(base+"/", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	code := resp.StatusCode // whatever the function answers an empty, unsigned request
	resp, err = http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", internal))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	series := fmt.Sprintf(`flagdown_http_requests_total{code="%d",function="%s"} 1`, code, name)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), series+"\n") {
		t.Errorf("GET /metrics: %d, lacks %q:\n%s", resp.StatusCode, series, body)
	}
}
