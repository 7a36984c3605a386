package testkit

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// PrivateRedis starts a redis-server of the test's own on a free loopback port (no persistence, in
// t.TempDir()) and returns a client of it; the server is shut down when t ends. For tests that read
// or reset server-wide figures (CONFIG RESETSTAT, INFO commandstats), which the shared Redis of
// other tests would disturb. The test fails when redis-server is not installed
// (`scripts/services.sh up --redis-server` installs it).
func PrivateRedis(t testing.TB) *redis.Client {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("testkit: redis-server not found on PATH (scripts/services.sh up --redis-server installs it): %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testkit: free port: %v", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no",
		"--dir", t.TempDir(), "--protected-mode", "yes")
	if err := cmd.Start(); err != nil {
		t.Fatalf("testkit: start redis-server: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	rdb := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), MaxRetries: -1})
	t.Cleanup(func() {
		_ = rdb.Close()
		_ = cmd.Process.Kill()
		<-done
	})
	Eventually(t, 20*time.Second, func() (bool, string) {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("testkit: redis-server on port %d exited: %v", port, err)
		default:
		}
		err := rdb.Ping(context.Background()).Err()
		return err == nil, fmt.Sprintf("redis-server on port %d: %v", port, err)
	})
	return rdb
}
