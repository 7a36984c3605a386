package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// TestDeleteAllRemovesOnlyItsPrefix: DeleteAll empties its prefix, glob characters in the prefix
// included, and leaves a neighbour's keys alone; an empty prefix is refused.
func TestDeleteAllRemovesOnlyItsPrefix(t *testing.T) {
	deleteAllRemovesOnlyItsPrefix(t, testkit.SingleRedis)
}

// TestClusterDeleteAllRemovesOnlyItsPrefix is the same on a Redis Cluster (every master scanned).
func TestClusterDeleteAllRemovesOnlyItsPrefix(t *testing.T) {
	deleteAllRemovesOnlyItsPrefix(t, testkit.ClusterRedis)
}

func deleteAllRemovesOnlyItsPrefix(t *testing.T, open testkit.RedisFunc) {
	rdb, prefix := open(t)
	ctx := context.Background()
	mine := redisstore.New(rdb, prefix+"[x]*:", 30*time.Second, 55)
	other := redisstore.New(rdb, prefix+"other:", 30*time.Second, 55)
	now := time.Now()
	for _, s := range []*redisstore.Store{mine, other} {
		var pings []redisstore.Ping
		for _, id := range []string{"d-1", "d-2", "d-3"} {
			pings = append(pings, redisstore.Ping{DriverID: id, Position: midtown, At: now, Status: dispatch.DriverAvailable})
		}
		if _, err := s.ApplyPings(ctx, pings); err != nil {
			t.Fatal(err)
		}
	}
	n, err := mine.DeleteAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("DeleteAll removed nothing")
	}
	if left, err := mine.DeleteAll(ctx); err != nil || left != 0 {
		t.Errorf("a second DeleteAll found %d keys (err %v), want 0", left, err)
	}
	if ok, _ := other.InAvailableSet(ctx, "d-1"); !ok {
		t.Error("DeleteAll removed another prefix's driver")
	}
	if _, err := redisstore.New(rdb, "", time.Second, 55).DeleteAll(ctx); err == nil {
		t.Error("DeleteAll with an empty prefix: want an error")
	}
}
