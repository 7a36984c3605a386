package ratelimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/httpx"
	"github.com/flagdown/flagdown/shared/ratelimit"
)

func TestAllowSpendsTheBudgetThenRefusesWithRetryAfter(t *testing.T) {
	testAllowSpendsTheBudgetThenRefusesWithRetryAfter(t, testkit.SingleRedis)
}

func testAllowSpendsTheBudgetThenRefusesWithRetryAfter(t *testing.T, newRedis testkit.RedisFunc) {
	t.Parallel()
	rdb, prefix := newRedis(t)
	l := ratelimit.New(rdb, prefix, ratelimit.Limits{RidesPerMin: 3, PingsPerMin: 0})
	ctx := t.Context()
	for i := range 3 {
		if err := l.Allow(ctx, ratelimit.RideRequests, "r-1", "rider_id", 1); err != nil {
			t.Fatalf("request %d: %v, want allowed", i+1, err)
		}
	}
	err := l.Allow(ctx, ratelimit.RideRequests, "r-1", "rider_id", 1)
	if got := dispatch.ErrorCode(err); got != dispatch.CodeRateLimited {
		t.Fatalf("4th request: code %q (%v), want %q", got, err, dispatch.CodeRateLimited)
	}
	if wait := ratelimit.RetryAfter(err); wait < time.Second || wait > 20*time.Second {
		t.Errorf("RetryAfter = %s, want about 20 s (one unit of 3 per minute), at least 1 s", wait)
	}
	t.Run("another rider has his own budget", func(t *testing.T) {
		if err := l.Allow(ctx, ratelimit.RideRequests, "r-2", "rider_id", 1); err != nil {
			t.Errorf("r-2: %v, want allowed", err)
		}
	})
	t.Run("a kind with limit 0 is unlimited", func(t *testing.T) {
		for range 100 {
			if err := l.Allow(ctx, ratelimit.Pings, "d-1", "driver_id", 5); err != nil {
				t.Fatalf("pings: %v, want unlimited", err)
			}
		}
	})
	t.Run("the answer is 429 with Retry-After and names the field", func(t *testing.T) {
		rec := httptest.NewRecorder()
		httpx.WriteError(rec, httptest.NewRequest(http.MethodPost, "/", nil), nil, err)
		if rec.Code != http.StatusTooManyRequests {
			t.Errorf("status = %d, want 429", rec.Code)
		}
		if got := rec.Header().Get("Retry-After"); got == "" || got == "0" {
			t.Errorf("Retry-After = %q, want whole seconds >= 1", got)
		}
		if got := dispatch.AsError(err).Field; got != "rider_id" {
			t.Errorf("field = %q, want rider_id", got)
		}
	})
}

func TestABatchLargerThanTheBurstIsRefusedWithoutSpending(t *testing.T) {
	testABatchLargerThanTheBurstIsRefusedWithoutSpending(t, testkit.SingleRedis)
}

func testABatchLargerThanTheBurstIsRefusedWithoutSpending(t *testing.T, newRedis testkit.RedisFunc) {
	t.Parallel()
	rdb, prefix := newRedis(t)
	l := ratelimit.New(rdb, prefix, ratelimit.Limits{PingsPerMin: 10})
	ctx := t.Context()
	if err := l.Allow(ctx, ratelimit.Pings, "d-1", "driver_id", 11); dispatch.ErrorCode(err) != dispatch.CodeRateLimited {
		t.Fatalf("11 pings against a burst of 10: %v, want rate_limited", err)
	}
	if err := l.Allow(ctx, ratelimit.Pings, "d-1", "driver_id", 10); err != nil {
		t.Errorf("10 pings after the refused batch: %v, want allowed (nothing was spent)", err)
	}
}

// AllowEach spends many budgets in one round trip with the same script and keys as Allow: a budget
// spent by one is spent for the other, and only the ids past their budget are refused.
func TestAllowEachSharesBudgetsWithAllow(t *testing.T) {
	testAllowEachSharesBudgetsWithAllow(t, testkit.SingleRedis)
}

func testAllowEachSharesBudgetsWithAllow(t *testing.T, newRedis testkit.RedisFunc) {
	t.Parallel()
	rdb, prefix := newRedis(t)
	l := ratelimit.New(rdb, prefix, ratelimit.Limits{PingsPerMin: 3})
	ctx := t.Context()
	if err := l.Allow(ctx, ratelimit.Pings, "d-1", "driver_id", 2); err != nil {
		t.Fatalf("Allow d-1: %v", err)
	}
	limited, err := l.AllowEach(ctx, ratelimit.Pings, map[string]int{"d-1": 2, "d-2": 3, "d-3": 1}, "driver_id")
	if err != nil {
		t.Fatalf("AllowEach: %v", err)
	}
	if len(limited) != 1 || limited["d-1"] == nil {
		t.Fatalf("limited = %v, want only d-1 (2 of 3 spent by Allow, 2 more asked)", limited)
	}
	e := dispatch.AsError(limited["d-1"])
	if e.Code != dispatch.CodeRateLimited || e.Field != "driver_id" || ratelimit.RetryAfter(e) < time.Second {
		t.Errorf("d-1 refusal = %+v, want rate_limited on driver_id with a Retry-After of at least 1 s", e)
	}
	// d-1 was refused, so nothing of his was spent: one unit is left.
	if err := l.Allow(ctx, ratelimit.Pings, "d-1", "driver_id", 1); err != nil {
		t.Errorf("Allow d-1 after the refused batch: %v, want allowed (the refusal spent nothing)", err)
	}
	// d-2 spent his whole budget in the batch.
	if err := l.Allow(ctx, ratelimit.Pings, "d-2", "driver_id", 1); dispatch.ErrorCode(err) != dispatch.CodeRateLimited {
		t.Errorf("Allow d-2 after the batch: %v, want rate_limited", err)
	}
	t.Run("a kind with limit 0 is unlimited", func(t *testing.T) {
		limited, err := l.AllowEach(ctx, ratelimit.RideRequests, map[string]int{"r-1": 1000}, "rider_id")
		if err != nil || len(limited) != 0 {
			t.Errorf("AllowEach rides = %v, %v; want nothing limited", limited, err)
		}
	})
}

// TestAllowEachAfterTheScriptCacheIsLost: after Redis lost its script cache (SCRIPT FLUSH, as after
// a restart or a failover), a batch is still judged, and each driver's units are spent once: d-1
// asks 2 of 3, so one unit is left after the batch, not none (spent twice by a re-sent batch).
func TestAllowEachAfterTheScriptCacheIsLost(t *testing.T) {
	t.Parallel()
	rdb := testkit.StartPrivateRedis(t).Client(t)
	l := ratelimit.New(rdb, "t:", ratelimit.Limits{PingsPerMin: 3})
	ctx := t.Context()
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	limited, err := l.AllowEach(ctx, ratelimit.Pings, map[string]int{"d-1": 2, "d-2": 1}, "driver_id")
	if err != nil || len(limited) != 0 {
		t.Fatalf("AllowEach after SCRIPT FLUSH = %v, %v; want every driver allowed", limited, err)
	}
	if err := l.Allow(ctx, ratelimit.Pings, "d-1", "driver_id", 1); err != nil {
		t.Errorf("d-1's third unit: %v, want allowed (the batch spent 2 of 3 once)", err)
	}
	if err := l.Allow(ctx, ratelimit.Pings, "d-1", "driver_id", 1); dispatch.ErrorCode(err) != dispatch.CodeRateLimited {
		t.Errorf("d-1's fourth unit: %v, want rate_limited", err)
	}
}
