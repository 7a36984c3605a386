package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/ratelimit"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// carry sends spend's check in a pipeline of its own with one other command, as a read that
// carries it does (redisstore.Store.ReadSurge, Quote), and returns the check's answer.
func carry(ctx context.Context, rdb redis.UniversalClient, spend *ratelimit.Spend) error {
	pb := spend.Piggyback()
	pipe := rdb.Pipeline()
	if pb.Queue != nil {
		pb.Queue(ctx, pipe)
	}
	pipe.Get(ctx, "t:spend:the-read")
	_, _ = redisstore.ExecScripts(ctx, rdb, pipe, pb.Scripts...)
	return spend.Err(ctx)
}

// TestSpendSharesTheBudgetWithAllow: a check carried in another read's pipeline spends the same
// budget as Allow, once per check (after SCRIPT FLUSH too), refuses as Allow does once it is spent,
// and, when the read cannot reach Redis, falls back to this process's own budget.
func TestSpendSharesTheBudgetWithAllow(t *testing.T) {
	t.Parallel()
	rdb := testkit.StartPrivateRedis(t).Client(t)
	l := ratelimit.New(rdb, "t:", ratelimit.Limits{RidesPerMin: 3})
	ctx := t.Context()
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := carry(ctx, rdb, l.Queue(ratelimit.RideRequests, "r-1", "rider_id", 1)); err != nil {
			t.Fatalf("carried check %d: %v, want allowed", i+1, err)
		}
	}
	if err := l.Allow(ctx, ratelimit.RideRequests, "r-1", "rider_id", 1); err != nil {
		t.Fatalf("third unit through Allow: %v, want allowed (two carried checks spent 2 of 3)", err)
	}
	err := carry(ctx, rdb, l.Queue(ratelimit.RideRequests, "r-1", "rider_id", 1))
	if e := dispatch.AsError(err); e.Code != dispatch.CodeRateLimited || e.Field != "rider_id" || ratelimit.RetryAfter(err) < time.Second {
		t.Fatalf("fourth unit, carried: %v, want rate_limited on rider_id with a retry_after", err)
	}
	if err := carry(ctx, rdb, l.Queue(ratelimit.Pings, "d-1", "driver_id", 1)); err != nil {
		t.Errorf("a kind without a limit: %v, want allowed", err)
	}

	dead := testkit.UnreachableRedis(t)
	away := ratelimit.New(dead, "t:", ratelimit.Limits{RidesPerMin: 2})
	for i := range 2 {
		if err := carry(ctx, dead, away.Queue(ratelimit.RideRequests, "r-1", "rider_id", 1)); err != nil {
			t.Fatalf("Redis away, check %d: %v, want allowed by the local budget", i+1, err)
		}
	}
	if err := carry(ctx, dead, away.Queue(ratelimit.RideRequests, "r-1", "rider_id", 1)); dispatch.ErrorCode(err) != dispatch.CodeRateLimited {
		t.Errorf("Redis away, third check: %v, want rate_limited by the local budget of 2", err)
	}
}
