package testkit

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// PrivateRedis is a redis-server child process of one test, on a free loopback port, with its
// data in the test's temporary folder: the one a fault test may pause, continue or kill (never the
// shared Redis other tests use). It is killed when the test ends.
type PrivateRedis struct {
	// Addr is host:port of the server.
	Addr string
	// URL is its redis:// URL, database 0.
	URL  string
	cmd  *exec.Cmd
	argv []string
}

// redisServerPath returns the redis-server executable, or fails t with the command that installs it
// (`make test` installs it: scripts/services.sh).
func redisServerPath(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p
	}
	for _, p := range []string{"/usr/bin/redis-server", "/usr/sbin/redis-server", "/usr/local/bin/redis-server"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Fatal("redis-server not found: this test starts its own Redis (scripts/services.sh up --redis-server, or apt-get install redis-server)")
	return ""
}

// FreePort returns a TCP port free on 127.0.0.1 at the time of the call.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// StartPrivateRedis starts a redis-server on a free port (no persistence, expired-key
// notifications on) with the extra command-line arguments args (e.g. "--replicaof", host, port),
// waits until it answers PING and returns it.
func StartPrivateRedis(t testing.TB, args ...string) *PrivateRedis {
	t.Helper()
	port := FreePort(t)
	dir := t.TempDir()
	argv := append([]string{"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no",
		"--dir", dir, "--notify-keyspace-events", "Ex", "--logfile", filepath.Join(dir, "redis.log")}, args...)
	r := &PrivateRedis{Addr: fmt.Sprintf("127.0.0.1:%d", port), URL: fmt.Sprintf("redis://127.0.0.1:%d/0", port), argv: argv}
	r.cmd = startProcess(t, redisServerPath(t), argv...)
	waitPing(t, r.Addr, r.cmd)
	return r
}

// startProcess starts path with args and kills it (SIGKILL, after a SIGCONT so a paused one dies
// too) when t ends.
func startProcess(t testing.TB, path string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(path, args...)
	if err := cmd.Start(); err != nil {
		t.Fatalf("testkit: start %s: %v", path, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-done
	})
	return cmd
}

// waitPing waits until the server at addr answers PING.
func waitPing(t testing.TB, addr string, cmd *exec.Cmd) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second, ReadTimeout: time.Second, MaxRetries: -1})
	defer c.Close()
	Eventually(t, 30*time.Second, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		err := c.Ping(ctx).Err()
		return err == nil, fmt.Sprintf("redis-server %s (pid %d) answers PING: %v", addr, cmd.Process.Pid, err)
	})
}

// Client returns a new client of r, closed when t ends.
func (r *PrivateRedis) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: r.Addr, DialTimeout: time.Second, ReadTimeout: 2 * time.Second})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Pause stops the server with SIGSTOP: it keeps its connections and its port, and answers nothing
// (what a hung Redis, a long fork or a partition look like to a client) until Resume.
func (r *PrivateRedis) Pause(t testing.TB) {
	t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("testkit: SIGSTOP redis-server: %v", err)
	}
}

// Resume continues a paused server (SIGCONT).
func (r *PrivateRedis) Resume(t testing.TB) {
	t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("testkit: SIGCONT redis-server: %v", err)
	}
}

// RestartKeepingData shuts the server down with SHUTDOWN SAVE (its keys are written to its dump)
// and starts it again at the same address with its first arguments followed by args (a later
// argument wins, e.g. "--notify-keyspace-events", "" drops the notifications a restart from a
// configuration that lacks them would lose); it waits until the new server answers PING.
func (r *PrivateRedis) RestartKeepingData(t testing.TB, args ...string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: r.Addr, DialTimeout: time.Second, ReadTimeout: 5 * time.Second, MaxRetries: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_ = c.Do(ctx, "SHUTDOWN", "SAVE").Err() // the connection closes: an error is the normal answer
	cancel()
	c.Close()
	old := r.cmd
	Eventually(t, 15*time.Second, func() (bool, string) {
		return old.Process.Signal(syscall.Signal(0)) != nil, "redis-server exited after SHUTDOWN SAVE"
	})
	argv := append(append([]string{}, r.argv...), args...)
	r.cmd = startProcess(t, redisServerPath(t), argv...)
	waitPing(t, r.Addr, r.cmd)
}

// Kill kills the server (SIGKILL) and waits for it to exit.
func (r *PrivateRedis) Kill(t testing.TB) {
	t.Helper()
	_ = r.cmd.Process.Signal(syscall.SIGCONT)
	if err := r.cmd.Process.Kill(); err != nil {
		t.Fatalf("testkit: kill redis-server: %v", err)
	}
}

// RedisSentinel is a private Redis primary, one replica of it and one Sentinel watching them under
// master name Master, each a child process of the test on a free port (see StartRedisSentinel).
type RedisSentinel struct {
	// Primary and Replica are the servers as started (after a failover the replica is the primary).
	Primary, Replica *PrivateRedis
	// SentinelAddr is host:port of the Sentinel.
	SentinelAddr string
	// Master is the master name the Sentinel monitors.
	Master string
}

// StartRedisSentinel starts a primary, a replica and a Sentinel (quorum 1, the primary taken down
// after 1 s without answers) and waits until the Sentinel knows the replica in sync, so a
// failover (Failover, or the primary's death) can promote it.
func StartRedisSentinel(t testing.TB) *RedisSentinel {
	t.Helper()
	primary := StartPrivateRedis(t)
	host, port, _ := net.SplitHostPort(primary.Addr)
	replica := StartPrivateRedis(t, "--replicaof", host, port)
	s := &RedisSentinel{Primary: primary, Replica: replica, Master: "flagdown-" + ID()}
	sport := FreePort(t)
	s.SentinelAddr = fmt.Sprintf("127.0.0.1:%d", sport)
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	text := fmt.Sprintf("bind 127.0.0.1\nport %d\ndir %s\nlogfile %s\nsentinel monitor %s %s %s 1\n"+
		"sentinel down-after-milliseconds %s 1000\nsentinel failover-timeout %s 10000\n",
		sport, dir, filepath.Join(dir, "sentinel.log"), s.Master, host, port, s.Master, s.Master)
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := startProcess(t, redisServerPath(t), conf, "--sentinel")
	waitPing(t, s.SentinelAddr, cmd)
	sc := s.SentinelClient(t)
	Eventually(t, 60*time.Second, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		reps, err := sc.Replicas(ctx, s.Master).Result()
		for _, r := range reps {
			if r["ip"]+":"+r["port"] == replica.Addr && r["flags"] == "slave" && r["master-link-status"] == "ok" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("sentinel knows replica %s in sync: %v %v", replica.Addr, reps, err)
	})
	return s
}

// SentinelClient returns a client of the Sentinel, closed when t ends.
func (s *RedisSentinel) SentinelClient(t testing.TB) *redis.SentinelClient {
	t.Helper()
	c := redis.NewSentinelClient(&redis.Options{Addr: s.SentinelAddr, DialTimeout: time.Second, ReadTimeout: 2 * time.Second})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// MasterAddr is the primary's host:port as the Sentinel names it now.
func (s *RedisSentinel) MasterAddr(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	a, err := s.SentinelClient(t).GetMasterAddrByName(ctx, s.Master).Result()
	if err != nil || len(a) != 2 {
		return ""
	}
	return a[0] + ":" + a[1]
}

// Failover asks the Sentinel for a failover (SENTINEL FAILOVER): the replica is promoted without
// waiting for the primary to fail.
func (s *RedisSentinel) Failover(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.SentinelClient(t).Failover(ctx, s.Master).Err(); err != nil {
		t.Fatalf("testkit: SENTINEL FAILOVER %s: %v", s.Master, err)
	}
}
