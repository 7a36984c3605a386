package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisServer is the run's private redis-server (a child process), with no automatic saves and
// without notify-keyspace-events on its command line: flagdown owns the setting and must apply it
// at start and again after every restart (run.checkNotifications checks it did).
type redisServer struct {
	path string
	port int
	dir  string
	// replicaOf is the port of the primary this server replicates at its next start (0: none, a
	// primary). A Sentinel may change the role of a running server; this is only how it starts.
	replicaOf int
	proc      *proc
}

func (s *redisServer) url() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", s.port) }

func (s *redisServer) client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", s.port), DialTimeout: 2 * time.Second,
		ReadTimeout: 5 * time.Second, MaxRetries: -1})
}

// start starts redis-server and waits until it answers PING (loading a dump.rdb left by SHUTDOWN
// SAVE, if any).
func (s *redisServer) start(ctx context.Context) error {
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return err
	}
	if s.proc == nil {
		s.proc = &proc{name: "redis-server", path: s.path, env: os.Environ(), logPath: filepath.Join(s.dir, "redis.log")}
	}
	s.proc.args = []string{"--bind", "127.0.0.1", "--port", strconv.Itoa(s.port), "--save", "", "--appendonly", "no",
		"--dir", s.dir, "--dbfilename", "dump.rdb", "--protected-mode", "yes"}
	if s.replicaOf != 0 {
		s.proc.args = append(s.proc.args, "--replicaof", "127.0.0.1", strconv.Itoa(s.replicaOf))
	}
	if err := s.proc.start(); err != nil {
		return err
	}
	c := s.client()
	defer c.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := c.Ping(pctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if up, _ := s.proc.running(); !up {
			return fmt.Errorf("chaos: redis-server exited with status %d (log %s)", s.proc.exitCode(), s.proc.logPath)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("chaos: redis-server on port %d not answering: %v", s.port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// restart shuts Redis down with SHUTDOWN SAVE (save: its data comes back) or SHUTDOWN NOSAVE (the
// dump of an earlier SAVE is deleted too: everything is lost), waits down for a moment, and starts
// it again.
func (s *redisServer) restart(ctx context.Context, save bool, down time.Duration) error {
	c := s.client()
	cmd := "NOSAVE"
	if save {
		cmd = "SAVE"
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_ = c.Do(sctx, "SHUTDOWN", cmd).Err() // the connection closes: an error is the normal answer
	cancel()
	c.Close()
	_, done := s.proc.running()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		s.proc.kill()
	}
	if !save {
		if err := os.Remove(filepath.Join(s.dir, "dump.rdb")); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	time.Sleep(down)
	return s.start(ctx)
}

// notificationsOn reports whether s answers CONFIG GET notify-keyspace-events with E and x (or A)
// in it: flagdown applied it. An unreachable server answers false.
func (s *redisServer) notificationsOn(ctx context.Context) bool {
	c := s.client()
	defer c.Close()
	gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	m, err := c.ConfigGet(gctx, "notify-keyspace-events").Result()
	v := m["notify-keyspace-events"]
	return err == nil && strings.ContainsRune(v, 'E') && (strings.ContainsRune(v, 'x') || strings.ContainsRune(v, 'A'))
}

// stopFor freezes Redis with SIGSTOP for d (it neither answers nor expires keys: a Sentinel
// failover window, a partition or a slow load look like this), then resumes it with SIGCONT and
// waits until it answers PING.
func (s *redisServer) stopFor(ctx context.Context, d time.Duration) error {
	if !s.proc.send(syscall.SIGSTOP) {
		return fmt.Errorf("redis-server is not running")
	}
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	if !s.proc.send(syscall.SIGCONT) {
		return fmt.Errorf("redis-server exited while stopped")
	}
	c := s.client()
	defer c.Close()
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := c.Ping(pctx).Err()
		cancel()
		if err == nil || ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// killPubSub closes every pub/sub connection (CLIENT KILL TYPE pubsub) and returns how many.
func (s *redisServer) killPubSub(ctx context.Context) (int64, error) {
	c := s.client()
	defer c.Close()
	return c.ClientKillByFilter(ctx, "TYPE", "pubsub").Result()
}

// stop shuts Redis down without saving.
func (s *redisServer) stop() {
	if s.proc == nil {
		return
	}
	if up, _ := s.proc.running(); !up {
		return
	}
	s.proc.send(syscall.SIGCONT) // a run cancelled during a SIGSTOP fault
	c := s.client()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = c.Do(ctx, "SHUTDOWN", "NOSAVE").Err()
	cancel()
	c.Close()
	s.proc.signal(15, 10*time.Second)
}
