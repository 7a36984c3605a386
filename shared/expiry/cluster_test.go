package expiry

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// The tests of this file run against the Redis Cluster of REDIS_CLUSTER_URL (make test starts one
// with scripts/redis-cluster.sh) and skip without it.

// newClusterEnv is newEnv on the Redis Cluster, under a prefix carrying a hash tag (one city).
func newClusterEnv(t testing.TB) *env {
	t.Helper()
	c := testkit.RedisCluster(t)
	return newEnvOn(t, c, testkit.ClusterPrefix(t, c))
}

// The expiry tests that do not need one server's CLIENT LIST or ACL pass on a cluster too.
func TestExpiryOnCluster(t *testing.T) {
	testkit.RedisCluster(t)
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, envFunc)
	}{
		{"HeartbeatExpiryPublishesOneEvent", testHeartbeatExpiryPublishesOneEvent},
		{"IgnoresOtherKeys", testIgnoresOtherKeys},
		{"RecreatedKeyIsSkipped", testRecreatedKeyIsSkipped},
		{"SweeperPublishesMissedExpiry", testSweeperPublishesMissedExpiry},
		{"TwoCopiesStoreOneEventPerExpiry", testTwoCopiesStoreOneEventPerExpiry},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newClusterEnv) })
	}
}

// noSweep leaves the source's sweeper idle (it still sweeps once per new subscription): every event
// it publishes then comes from a keyevent notification of a master it subscribed to.
var noSweep = Options{SweepInterval: time.Hour, TopologyInterval: 100 * time.Millisecond}

// One city per master: each city's source hears the heartbeat and offer-lock expiries of its keys
// from the master that holds them, as notifications (not swept), so it subscribed to all three.
func TestClusterExpiriesFromEveryMaster(t *testing.T) {
	c := testkit.RedisCluster(t)
	masters := testkit.ClusterMasters(t, c)
	if len(masters) < 3 {
		t.Fatalf("cluster masters %v, want 3", masters)
	}
	type city struct {
		e    *env
		keys []string
	}
	var cities []city
	for _, m := range masters {
		e := newEnvOn(t, c, testkit.ClusterPrefixOn(t, c, m))
		e.start(t, noSweep)
		cities = append(cities, city{e: e, keys: []string{e.prefix + "hb:d1", e.prefix + "offer:d2"}})
	}
	for _, ct := range cities {
		for _, k := range ct.keys {
			ct.e.setTimer(t, k, 300*time.Millisecond)
		}
	}
	for i, ct := range cities {
		got := ct.e.waitKeys(t, ct.keys, 20*time.Second)
		for _, k := range ct.keys {
			r := got[k]
			if r.Data.Swept {
				t.Errorf("city on %s: %s was swept, want heard as a notification", masters[i], k)
			}
			if kind, _, _ := redisstore.ParseTimedKey(ct.e.prefix, k); r.Data.Kind != string(kind) {
				t.Errorf("city on %s: %s has kind %q, want %q", masters[i], k, r.Data.Kind, kind)
			}
		}
	}
}

// A replica's CLUSTER FAILOVER moves a city's master; the source subscribes to the promoted node
// (configuring its notifications) and keeps hearing the city's expiries.
func TestClusterExpirySourceFollowsFailover(t *testing.T) {
	c := testkit.RedisCluster(t)
	testkit.LockClusterExclusive(t) // no other test's cluster client while the topology moves
	ctx := context.Background()
	e := newClusterEnv(t)
	old := masterOf(t, c, e.prefix)
	oldAddr := old.Options().Addr
	replica := replicaOf(t, old)
	src := e.start(t, noSweep)

	before := e.prefix + "hb:before"
	e.setTimer(t, before, 300*time.Millisecond)
	if r := e.waitKeys(t, []string{before}, 20*time.Second)[before]; r.Data.Swept {
		t.Fatalf("before the failover %s was swept, want a notification from %s", before, oldAddr)
	}

	r := redis.NewClient(&redis.Options{Addr: replica})
	defer func() { _ = r.Close() }()
	// A failover right after an earlier one of the same pair can be undone by the cluster (the
	// older configuration wins an epoch collision): ask again until the roles have switched.
	for try := 1; ; try++ {
		if err := r.Do(ctx, "CLUSTER", "FAILOVER").Err(); err != nil {
			t.Fatalf("CLUSTER FAILOVER on %s: %v", replica, err)
		}
		if hasRole(r, "master", 10*time.Second) && hasRole(old, "slave", 10*time.Second) {
			break
		}
		if try == 3 {
			t.Fatalf("%s did not replace %s as master after 3 CLUSTER FAILOVER", replica, oldAddr)
		}
	}
	t.Logf("failover: %s replaced %s as the city's master", replica, oldAddr)

	// The source re-reads the topology every 100 ms; a key expiring before it subscribed to the new
	// master is lost to notifications (the idle sweeper would publish it as swept), so try fresh
	// keys until one is heard as a notification.
	for attempt := range 20 {
		key := fmt.Sprintf("%shb:after-%d", e.prefix, attempt)
		e.setTimer(t, key, 300*time.Millisecond)
		end := time.Now().Add(3 * time.Second)
		for time.Now().Before(end) {
			if got, ok := e.firstByKey()[key]; ok {
				if !got.Data.Swept { // heard from the promoted node: a replica publishes no expired event
					t.Logf("attempt %d: %s heard as a notification", attempt, key)
					return
				}
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	e.mu.Lock()
	seen := e.seen
	e.mu.Unlock()
	t.Fatalf("no expiry heard as a notification after the failover to %s: the source did not follow it (source %+v; events %+v)",
		replica, src.Stats(), seen)
}

// replicaOf returns the address of a replica of master m whose link to m is up, waiting up to 30 s
// (right after an earlier failover the demoted master is still becoming m's replica, and m's
// CLUSTER REPLICAS may still list a node that follows another master).
func replicaOf(t *testing.T, m *redis.Client) string {
	t.Helper()
	ctx := context.Background()
	id, err := m.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		t.Fatal(err)
	}
	end := time.Now().Add(30 * time.Second)
	for {
		lines, err := m.Do(ctx, "CLUSTER", "REPLICAS", id).StringSlice()
		for _, line := range lines {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			addr, _, _ := strings.Cut(f[1], "@")
			r := redis.NewClient(&redis.Options{Addr: addr})
			info, _ := r.Info(ctx, "replication").Result()
			_ = r.Close()
			host, port, _ := strings.Cut(m.Options().Addr, ":")
			if strings.Contains(info, "role:slave") && strings.Contains(info, "master_link_status:up") &&
				strings.Contains(info, "master_host:"+host+"\r\n") && strings.Contains(info, "master_port:"+port+"\r\n") {
				return addr
			}
		}
		if time.Now().After(end) {
			t.Fatalf("no replica of %s in sync after 30s (CLUSTER REPLICAS: %v, %v)", m.Options().Addr, lines, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// masterOf returns the client of the master serving key, once the node itself says it is a master
// (the client's view may lag an earlier failover by a moment).
func masterOf(t *testing.T, c *redis.ClusterClient, key string) *redis.Client {
	t.Helper()
	ctx := context.Background()
	end := time.Now().Add(30 * time.Second)
	for {
		m, err := c.MasterForKey(ctx, key)
		if err == nil {
			if v, err := m.Do(ctx, "ROLE").Slice(); err == nil && len(v) > 0 && v[0] == "master" {
				return m
			}
		}
		if time.Now().After(end) {
			t.Fatalf("no master of %s after 30s: %v", key, err)
		}
		c.ReloadState(ctx)
		time.Sleep(100 * time.Millisecond)
	}
}

// hasRole waits up to within for node n to report role ("master" or "slave", the first element of
// ROLE) and tells whether it did.
func hasRole(n *redis.Client, role string, within time.Duration) bool {
	end := time.Now().Add(within)
	for {
		v, err := n.Do(context.Background(), "ROLE").Slice()
		if err == nil && len(v) > 0 && v[0] == role {
			return true
		}
		if time.Now().After(end) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}
