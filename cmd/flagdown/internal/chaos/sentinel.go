package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// sentinelMaster is the master name the run's Sentinel monitors.
const sentinelMaster = "flagdown-chaos"

// sentinelDownAfter is the Sentinel's down-after-milliseconds: how long the primary may not answer
// before it is taken down and its replica promoted. Shorter than a RedisSIGSTOP fault (so a frozen
// primary is failed over, as a production Sentinel would after its own, longer, setting) and longer
// than a RedisRestart fault's down time (a quick restart is not failed over).
const sentinelDownAfter = 2500 * time.Millisecond

// sentinel is the run's Redis Sentinel (a redis-server in sentinel mode, a child process) watching
// the primary and its replica (run.redis and run.replica) under sentinelMaster, quorum 1. It is
// started only when the run injects RedisFailover; the platform then finds the primary through it
// (REDIS_URL redis+sentinel://) and must follow every promotion.
type sentinel struct {
	port int
	dir  string
	proc *proc
}

// addr is the Sentinel's host:port.
func (s *sentinel) addr() string { return fmt.Sprintf("127.0.0.1:%d", s.port) }

// url is the REDIS_URL naming the primary through the Sentinel.
func (s *sentinel) url() string {
	return fmt.Sprintf("redis+sentinel://%s/%s?db=0", s.addr(), sentinelMaster)
}

func (s *sentinel) client() *redis.SentinelClient {
	return redis.NewSentinelClient(&redis.Options{Addr: s.addr(), DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second})
}

// start writes the Sentinel's configuration (it rewrites it as it learns the topology) and starts
// it watching the primary on primaryPort, then waits until it knows a replica in sync.
func (s *sentinel) start(ctx context.Context, path string, primaryPort int) error {
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return err
	}
	conf := filepath.Join(s.dir, "sentinel.conf")
	text := fmt.Sprintf("bind 127.0.0.1\nport %d\ndir %s\nsentinel monitor %s 127.0.0.1 %d 1\n"+
		"sentinel down-after-milliseconds %s %d\nsentinel failover-timeout %s 10000\n",
		s.port, s.dir, sentinelMaster, primaryPort, sentinelMaster, sentinelDownAfter.Milliseconds(), sentinelMaster)
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		return err
	}
	s.proc = &proc{name: "redis-sentinel", path: path, env: os.Environ(), logPath: filepath.Join(s.dir, "sentinel.log"),
		args: []string{conf, "--sentinel"}}
	if err := s.proc.start(); err != nil {
		return err
	}
	c := s.client()
	defer c.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		reps, err := c.Replicas(qctx, sentinelMaster).Result()
		cancel()
		for _, rep := range reps {
			if rep["master-link-status"] == "ok" && !strings.Contains(rep["flags"], "down") &&
				!strings.Contains(rep["flags"], "disconnected") {
				return nil
			}
		}
		if up, _ := s.proc.running(); !up {
			return fmt.Errorf("chaos: redis-sentinel exited with status %d (log %s)", s.proc.exitCode(), s.proc.logPath)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("chaos: the Sentinel knows no replica in sync after 60 s (replicas %v, err %v)", reps, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// masterPort is the port of the primary as the Sentinel names it now.
func (s *sentinel) masterPort(ctx context.Context) (int, error) {
	c := s.client()
	defer c.Close()
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	a, err := c.GetMasterAddrByName(qctx, sentinelMaster).Result()
	if err != nil {
		return 0, err
	}
	if len(a) != 2 {
		return 0, fmt.Errorf("chaos: the Sentinel named %v as the primary", a)
	}
	return strconv.Atoi(a[1])
}

// stop stops the Sentinel.
func (s *sentinel) stop() {
	if s.proc != nil {
		s.proc.stop()
	}
}

// followPrimary makes run.redis the server the Sentinel names as the primary (after a promotion,
// the run's other Redis faults break the new primary) and reports whether they swapped. Without a
// Sentinel it does nothing.
func (r *run) followPrimary(ctx context.Context) (bool, error) {
	if r.sentinel == nil {
		return false, nil
	}
	port, err := r.sentinel.masterPort(ctx)
	if err != nil {
		return false, err
	}
	switch port {
	case r.redis.port:
		return false, nil
	case r.replica.port:
		r.redis, r.replica = r.replica, r.redis
		r.redis.replicaOf, r.replica.replicaOf = 0, r.redis.port
		return true, nil
	}
	return false, fmt.Errorf("chaos: the Sentinel names port %d, neither of the run's servers", port)
}

// failover kills the primary with SIGKILL (its data is gone: the run's servers never save) and
// waits until the Sentinel has promoted the replica and the new primary accepts writes; then it
// starts the old primary again as a replica of the new one (the Sentinel would make it one) and
// waits for it to be in sync. Writes the primary acknowledged and had not yet sent to the replica
// are lost, as in a real asynchronous failover. It returns how long no primary accepted writes.
func (r *run) failover(ctx context.Context) (time.Duration, error) {
	if r.sentinel == nil {
		return 0, fmt.Errorf("no Sentinel in this run")
	}
	old := r.redis
	began := time.Now()
	old.proc.kill()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if swapped, err := r.followPrimary(ctx); err == nil && swapped {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return time.Since(began), fmt.Errorf("the Sentinel did not promote the replica within 60 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := waitWritable(ctx, r.redis, deadline); err != nil {
		return time.Since(began), err
	}
	down := time.Since(began)
	old.replicaOf = r.redis.port
	if err := old.start(ctx); err != nil {
		return down, err
	}
	return down, nil
}

// waitWritable waits until s answers ROLE as a master (a promoted replica takes a moment to stop
// refusing writes) or deadline.
func waitWritable(ctx context.Context, s *redisServer, deadline time.Time) error {
	c := s.client()
	defer c.Close()
	for {
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		role, err := c.Do(qctx, "ROLE").Slice()
		cancel()
		if err == nil && len(role) > 0 && role[0] == "master" {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("chaos: the promoted replica on port %d is not a master: %v %v", s.port, role, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
