package ratelimit_test

import (
	"testing"

	"github.com/flagdown/flagdown/internal/testkit"
)

// The budgets work on the Redis Cluster of REDIS_CLUSTER_URL (make test starts one; skipped
// without it) under a city's hash-tagged prefix: every budget key is in the city's slot, so a
// batch's pipelined scripts go to one shard.
func TestLimiterOnCluster(t *testing.T) {
	testkit.RedisCluster(t)
	for name, fn := range map[string]func(*testing.T, testkit.RedisFunc){
		"AllowSpendsTheBudgetThenRefusesWithRetryAfter":    testAllowSpendsTheBudgetThenRefusesWithRetryAfter,
		"ABatchLargerThanTheBurstIsRefusedWithoutSpending": testABatchLargerThanTheBurstIsRefusedWithoutSpending,
		"AllowEachSharesBudgetsWithAllow":                  testAllowEachSharesBudgetsWithAllow,
	} {
		t.Run(name, func(t *testing.T) { fn(t, testkit.ClusterRedis) })
	}
}
