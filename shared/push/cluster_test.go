package push_test

import (
	"testing"

	"github.com/flagdown/flagdown/internal/testkit"
)

// The connection registry works on the Redis Cluster of REDIS_CLUSTER_URL (make test starts one;
// skipped without it) under a city's hash-tagged prefix, Count scanning every master.
func TestRegistryOnCluster(t *testing.T) {
	testkit.RedisCluster(t)
	testRegistry(t, testkit.ClusterRedis)
}
