package testkit

import (
	"context"
	"testing"
	"time"

	"github.com/flagdown/flagdown/shared/redisstore"
)

// HealthyRedis marks s's Redis as the expiry source's sweeper would after a long healthy period:
// P health exists, was seen now with a gap threshold of an hour, and its healthy period began at
// the epoch, so every liveness decision of the test has positive evidence (a heartbeat deadline
// moved into the past, as fntest's ExpireHeartbeat does, counts as seen while healthy).
func HealthyRedis(t testing.TB, s *redisstore.Store) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.MarkHealthy(ctx, time.Hour); err != nil {
		t.Fatalf("testkit: mark Redis healthy: %v", err)
	}
	if err := s.Client().HSet(ctx, s.Prefix()+"health", "since", 1).Err(); err != nil {
		t.Fatalf("testkit: mark Redis healthy: %v", err)
	}
}
