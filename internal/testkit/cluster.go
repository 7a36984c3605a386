package testkit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flagdown/flagdown/shared/redisstore"
)

// RedisClusterURLEnv names the variable holding the URL of the Redis Cluster the cluster tests run
// against (a redisstore.Open URL, redis+cluster://...). scripts/test.sh (`make test`) always sets it,
// from the private cluster of scripts/redis-cluster.sh.
const RedisClusterURLEnv = "REDIS_CLUSTER_URL"

// RedisCluster returns a new client of the Redis Cluster at REDIS_CLUSTER_URL, closed when t ends.
// Without the variable t is skipped with a message naming the command that starts a cluster.
//
// The client holds a shared lock of that cluster (a file lock across test processes) until t ends,
// so Failover, which takes it exclusively, never moves a master under another test's feet.
func RedisCluster(t testing.TB) *redis.ClusterClient {
	t.Helper()
	url := os.Getenv(RedisClusterURLEnv)
	if url == "" {
		t.Skipf("%s is not set: start a Redis Cluster with `scripts/redis-cluster.sh up` and `. .local/redis-cluster.env` "+
			"(make test does both)", RedisClusterURLEnv)
	}
	lockCluster(t, url, syscall.LOCK_SH)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rdb, err := redisstore.Open(ctx, url)
	if err != nil {
		t.Fatalf("testkit: redis cluster at %s: %v (is it running? `scripts/redis-cluster.sh up`)", url, err)
	}
	c, ok := rdb.(*redis.ClusterClient)
	if !ok {
		_ = rdb.Close()
		t.Fatalf("testkit: %s=%s does not name a Redis Cluster (want redis+cluster://...)", RedisClusterURLEnv, url)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// ClusterPrefix returns a new key prefix "t:{<random>}:", a city's hash tag (every key under it is
// in one slot); its keys are deleted from every master when t ends.
func ClusterPrefix(t testing.TB, c *redis.ClusterClient) string {
	t.Helper()
	prefix := "t:{" + ID() + "}:"
	t.Cleanup(func() { deleteClusterKeys(c, prefix) })
	return prefix
}

// ClusterPrefixOn returns a new prefix like ClusterPrefix whose slot is served by the master at addr
// (host:port, as CLUSTER SLOTS names it), so a test can place cities on chosen shards.
func ClusterPrefixOn(t testing.TB, c *redis.ClusterClient, addr string) string {
	t.Helper()
	ctx := context.Background()
	for range 1000 {
		prefix := "t:{" + ID() + "}:"
		m, err := c.MasterForKey(ctx, prefix)
		if err != nil {
			t.Fatalf("testkit: master of %s: %v", prefix, err)
		}
		if m.Options().Addr == addr {
			t.Cleanup(func() { deleteClusterKeys(c, prefix) })
			return prefix
		}
	}
	t.Fatalf("testkit: no prefix served by %s in 1000 tries (is it a master?)", addr)
	return ""
}

// ClusterMasters returns the addresses (host:port) of the cluster's masters, sorted.
func ClusterMasters(t testing.TB, c *redis.ClusterClient) []string {
	t.Helper()
	var mu sync.Mutex
	var out []string
	c.ReloadState(context.Background())
	if err := c.ForEachMaster(context.Background(), func(_ context.Context, m *redis.Client) error {
		mu.Lock()
		out = append(out, m.Options().Addr)
		mu.Unlock()
		return nil
	}); err != nil {
		t.Fatalf("testkit: cluster masters: %v", err)
	}
	slices.Sort(out)
	return out
}

// LockClusterExclusive holds the cluster of REDIS_CLUSTER_URL exclusively until t ends: no test
// holding a RedisCluster client of another test process runs meanwhile. Call it before changing the
// topology (CLUSTER FAILOVER), after RedisCluster (whose shared lock of t it upgrades).
func LockClusterExclusive(t testing.TB) {
	t.Helper()
	lockCluster(t, os.Getenv(RedisClusterURLEnv), syscall.LOCK_EX)
}

var (
	lockMu    sync.Mutex
	lockFiles = map[testing.TB]*os.File{}
)

// lockCluster takes a file lock (LOCK_SH or LOCK_EX) named after the cluster URL in the temp dir,
// released when t ends; a later call for the same t can upgrade a shared lock, never downgrade.
func lockCluster(t testing.TB, url string, how int) {
	t.Helper()
	lockMu.Lock()
	f := lockFiles[t]
	lockMu.Unlock()
	if f != nil && how == syscall.LOCK_SH {
		return // t holds the lock already
	}
	if f == nil {
		sum := sha256.Sum256([]byte(url))
		var err error
		f, err = os.OpenFile(filepath.Join(os.TempDir(), "flagdown-redis-cluster-"+hex.EncodeToString(sum[:8])+".lock"),
			os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			t.Fatalf("testkit: cluster lock: %v", err)
		}
		lockMu.Lock()
		lockFiles[t] = f
		lockMu.Unlock()
		t.Cleanup(func() {
			lockMu.Lock()
			delete(lockFiles, t)
			lockMu.Unlock()
			_ = f.Close() // releases the lock
		})
	}
	if how == syscall.LOCK_EX {
		// Upgrading in place could deadlock with another process doing the same: release first.
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	}
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		t.Fatalf("testkit: cluster lock: %v", err)
	}
}

// deleteClusterKeys deletes every key under prefix on every master.
func deleteClusterKeys(c *redis.ClusterClient, prefix string) {
	ctx := context.Background()
	_ = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		iter := m.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			m.Del(ctx, iter.Val())
		}
		return iter.Err()
	})
}

// RedisFunc returns a Redis client and a new key prefix of the test's own, whose keys are deleted
// when t ends: tests taking one run on one server (SingleRedis) and on a cluster (ClusterRedis).
type RedisFunc = func(t testing.TB) (redis.UniversalClient, string)

// SingleRedis is Redis as a RedisFunc: the server of REDIS_URL, prefix "t:<random>:".
func SingleRedis(t testing.TB) (redis.UniversalClient, string) { return Redis(t) }

// ClusterRedis is a RedisFunc over the Redis Cluster of REDIS_CLUSTER_URL (RedisCluster, skipping
// without it) with a prefix carrying a hash tag (ClusterPrefix), as one city's deployment has.
func ClusterRedis(t testing.TB) (redis.UniversalClient, string) {
	c := RedisCluster(t)
	return c, ClusterPrefix(t, c)
}
