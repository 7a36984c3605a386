package redisstore_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// The tests of this file run against the Redis Cluster of REDIS_CLUSTER_URL (make test starts one
// with scripts/redis-cluster.sh) and skip without it.

// newClusterStore returns a store over the Redis Cluster under a prefix of its own carrying a hash
// tag, as one city's deployment has.
func newClusterStore(t *testing.T) *redisstore.Store {
	t.Helper()
	c := testkit.RedisCluster(t)
	return redisstore.New(c, testkit.ClusterPrefix(t, c), 30*time.Second, 55)
}

// Every store test passes on a Redis Cluster as on one server: each script's and each pipeline's
// keys are in the city's slot (a script touching a key another node serves, or a MGET across
// slots, fails there).
func TestStoreOnCluster(t *testing.T) {
	testkit.RedisCluster(t)
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, storeFunc)
	}{
		{"OfferLock", testOfferLock},
		{"LockOfferRechecksEligibility", testLockOfferRechecksEligibility},
		{"ApplyAssignmentCompareAndSet", testApplyAssignmentCompareAndSet},
		{"DriverOnRideResumesHisStatusAfterGoingOffline", testDriverOnRideResumesHisStatusAfterGoingOffline},
		{"RidePositionOnlyShowsTheRidesDriver", testRidePositionOnlyShowsTheRidesDriver},
		{"StalePingOnlyRefreshesTheHeartbeat", testStalePingOnlyRefreshesTheHeartbeat},
		{"DeadlinesUseRedisClock", testDeadlinesUseRedisClock},
		{"DriverHashExpiresDriverStateTTLAfterPing", testDriverHashExpiresDriverStateTTLAfterPing},
		{"ApplyEffects", testApplyEffects},
		{"PositionPushDueOncePerInterval", testPositionPushDueOncePerInterval},
		{"BatchWindowsHaveTheirOwnTimer", testBatchWindowsHaveTheirOwnTimer},
		{"BatchJoinAndClaim", testBatchJoinAndClaim},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newClusterStore) })
	}
}

// pipelineCounter counts the pipelines each node of a cluster client executes (one per round trip).
type pipelineCounter struct {
	mu     sync.Mutex
	byNode map[string]int
}

// countPipelines installs a pipelineCounter on every node client of c.
func countPipelines(t *testing.T, c *redis.ClusterClient) *pipelineCounter {
	t.Helper()
	p := &pipelineCounter{byNode: map[string]int{}}
	err := c.ForEachShard(context.Background(), func(_ context.Context, n *redis.Client) error {
		addr := n.Options().Addr
		n.AddHook(nodeHook{p: p, addr: addr})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// nodeHook is the hook of one node (addr) counting into p.
type nodeHook struct {
	p    *pipelineCounter
	addr string
}

func (h nodeHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h nodeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h nodeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.p.mu.Lock()
		h.p.byNode[h.addr]++
		h.p.mu.Unlock()
		return next(ctx, cmds)
	}
}

// take returns the counts since the last take and starts again from zero.
func (p *pipelineCounter) take() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.byNode
	p.byNode = map[string]int{}
	return out
}

// nodeClient returns the client of the master at addr.
func nodeClient(t *testing.T, c *redis.ClusterClient, addr string) *redis.Client {
	t.Helper()
	var mu sync.Mutex
	var out *redis.Client
	_ = c.ForEachMaster(context.Background(), func(_ context.Context, m *redis.Client) error {
		if m.Options().Addr == addr {
			mu.Lock()
			out = m
			mu.Unlock()
		}
		return nil
	})
	if out == nil {
		t.Fatalf("no master %s", addr)
	}
	return out
}

// One city per master (the cluster spreads cities over shards): a batch of 300 pings of a city is
// one round trip, to its shard only, and leaves every key of the city on that shard.
func TestClusterPingBatchIsOneRoundTripPerShard(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := testkit.RedisCluster(t)
	masters := testkit.ClusterMasters(t, c)
	if len(masters) < 3 {
		t.Fatalf("cluster masters %v, want 3", masters)
	}
	counter := countPipelines(t, c)
	start := time.Now().Add(-time.Minute)
	for i, m := range masters {
		s := redisstore.New(c, testkit.ClusterPrefixOn(t, c, m), 30*time.Second, 55)
		ping(t, s, "warm-up", midtown, start, dispatch.DriverAvailable) // loads the script where it is missing
		counter.take()
		pings := make([]redisstore.Ping, 300)
		for k := range pings {
			p := dispatch.Point{Lat: midtown.Lat + float64(k%20)*0.0002, Lng: midtown.Lng + float64(k/20)*0.0002}
			pings[k] = redisstore.Ping{DriverID: fmt.Sprintf("d-%d", k), Position: p, At: start.Add(time.Second), Status: dispatch.DriverAvailable}
		}
		res, err := s.ApplyPings(ctx, pings)
		if err != nil {
			t.Fatalf("city %d: ApplyPings: %v", i, err)
		}
		for k, r := range res {
			if !r.Applied || r.Status != dispatch.DriverAvailable {
				t.Fatalf("city %d: ping %d = %+v, want applied, available", i, k, r)
			}
		}
		if got := counter.take(); len(got) != 1 || got[m] != 1 {
			t.Fatalf("city %d on %s: pipelines per node %v, want one round trip to %s only", i, m, got, m)
		}
		for _, other := range masters {
			n := keysUnder(t, nodeClient(t, c, other), s.Prefix())
			if (other == m) != (n > 0) {
				t.Fatalf("city %d: %d of its keys on %s; want them all on its shard %s", i, n, other, m)
			}
		}
		if n, err := s.AvailableDrivers(ctx); err != nil || n != 301 {
			t.Fatalf("city %d: AvailableDrivers = %d, %v; want 301", i, n, err)
		}
	}
}

// Matching on a cluster: the candidate search (GEOSEARCH, the heartbeats' MGET and the states'
// pipeline), then eight matchers racing for the nearest driver's offer lock: exactly one wins.
func TestClusterMatchAndOfferLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newClusterStore(t)
	now := time.Now()
	var pings []redisstore.Ping
	for k := range 20 {
		p := dispatch.Point{Lat: midtown.Lat + float64(k+1)*0.0005, Lng: midtown.Lng}
		pings = append(pings, redisstore.Ping{DriverID: fmt.Sprintf("d-%02d", k), Position: p, At: now, Status: dispatch.DriverAvailable})
	}
	if _, err := s.ApplyPings(ctx, pings); err != nil {
		t.Fatal(err)
	}
	hits, err := s.Nearby(ctx, midtown, 2000, 5)
	if err != nil || len(hits) != 5 || hits[0].DriverID != "d-00" {
		t.Fatalf("Nearby = %+v, %v; want the 5 nearest, d-00 first", hits, err)
	}
	many, err := s.NearbyMany(ctx, []redisstore.NearbyQuery{{Center: midtown, RadiusM: 2000, Count: 3}, {Center: soho, RadiusM: 100, Count: 3}})
	if err != nil || len(many) != 2 || len(many[0]) != 3 || len(many[1]) != 0 {
		t.Fatalf("NearbyMany = %+v, %v; want 3 hits at midtown, none at soho", many, err)
	}
	ids := make([]string, len(hits))
	for i, h := range hits {
		ids[i] = h.DriverID
	}
	infos, err := s.DriverInfos(ctx, ids)
	if err != nil || len(infos) != len(ids) {
		t.Fatalf("DriverInfos = %+v, %v", infos, err)
	}
	for i, in := range infos {
		if !in.Alive || in.Status != dispatch.DriverAvailable || in.RideID != "" {
			t.Fatalf("DriverInfos[%s] = %+v, want alive, available, no ride", ids[i], in)
		}
	}
	var won atomic.Int32
	var wg sync.WaitGroup
	for m := range 8 {
		wg.Go(func() {
			ok, err := s.LockOffer(ctx, "d-00", liveOffer(fmt.Sprintf("offer-%d", m), fmt.Sprintf("ride-%d", m)), time.Minute)
			if err != nil {
				t.Errorf("LockOffer %d: %v", m, err)
			}
			if ok {
				won.Add(1)
			}
		})
	}
	wg.Wait()
	if n := won.Load(); n != 1 {
		t.Fatalf("%d matchers won d-00's offer lock, want exactly 1", n)
	}
	if hits, err := s.Nearby(ctx, midtown, 2000, 1); err != nil || len(hits) != 1 || hits[0].DriverID != "d-01" {
		t.Fatalf("Nearby after the lock = %+v, %v; want d-01 (d-00 is out of the available set)", hits, err)
	}
}

// keysUnder counts the keys under prefix that node n holds (SCAN, which any node answers for its
// own keys).
func keysUnder(t *testing.T, n *redis.Client, prefix string) int {
	t.Helper()
	ctx := context.Background()
	count := 0
	iter := n.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		count++
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return count
}

func TestHashTag(t *testing.T) {
	for prefix, want := range map[string]string{
		"flagdown:{nyc}:": "nyc", "{sf}": "sf", "flagdown:": "", "a{}b{c}:": "", "a{b": "", "a}{b}": "b",
	} {
		if got := redisstore.HashTag(prefix); got != want {
			t.Errorf("HashTag(%q) = %q, want %q", prefix, got, want)
		}
	}
}

// A Redis Cluster URL naming another database than 0 is refused before connecting.
func TestOpenClusterURLDatabase(t *testing.T) {
	_, err := redisstore.Open(context.Background(), "redis+cluster://127.0.0.1:1/3?addr=127.0.0.1:2")
	if err == nil || !strings.Contains(err.Error(), "database 3") {
		t.Fatalf("Open = %v, want an error naming database 3", err)
	}
}

// A cluster needs the city's hash tag in the prefix; one server takes any prefix.
func TestCheckPrefix(t *testing.T) {
	single, _ := testkit.Redis(t)
	if err := redisstore.CheckPrefix(single, "flagdown:"); err != nil {
		t.Errorf("CheckPrefix on one server = %v, want nil", err)
	}
	c := testkit.RedisCluster(t)
	if err := redisstore.CheckPrefix(c, "flagdown:{nyc}:"); err != nil {
		t.Errorf("CheckPrefix(cluster, tagged) = %v, want nil", err)
	}
	err := redisstore.CheckPrefix(c, "flagdown:")
	if err == nil || !strings.Contains(err.Error(), "FLAGDOWN_REDIS_PREFIX") || !strings.Contains(err.Error(), "hash tag") {
		t.Errorf("CheckPrefix(cluster, untagged) = %v, want an error naming FLAGDOWN_REDIS_PREFIX and the hash tag", err)
	}
}
