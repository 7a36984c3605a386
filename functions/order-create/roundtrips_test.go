package function_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	fareestimate "github.com/flagdown/flagdown/functions/fare-estimate"
	"github.com/flagdown/flagdown/internal/testkit/fntest"
	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/config"
)

// roundTrips counts the Redis round trips (single commands and pipelines) sent on one client.
type roundTrips struct{ n atomic.Int64 }

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}
func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.n.Add(1); return next(ctx, cmds) }
}

// TestOrderCreateRoundTrips holds order-create's Redis budget (docs/performance.md): with surge on
// and a driver near the pickup, a ride request costs three Redis round trips: the quote's read,
// which carries the rider's rate-limit check, the search for the nearest driver's cell (the wait
// quote), and the demand record after the commit. With the quote_id of a fare estimate it costs
// two: the quote's GET, carrying the check, and the demand record. Counted with a client hook,
// never timed.
func TestOrderCreateRoundTrips(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, func(c *config.Config) { c.SurgeMode = "on" })
	env.Ping(t, "d-near", fntest.Offset(pickup, 200, 0))
	rt := &roundTrips{}
	env.D.Redis.Client().(*redis.Client).AddHook(rt)

	count := func(name string, body fntest.JSON, rider string) int64 {
		t.Helper()
		before := rt.n.Load()
		if status, b := fntest.Do(t, env.Order, http.MethodPost, "/", body, env.As(auth.RoleRider, rider)); status != http.StatusAccepted {
			t.Fatalf("%s: %d %v, want 202", name, status, b)
		}
		return rt.n.Load() - before
	}
	if got, want := count("without a quote", fntest.JSON{"pickup": pickup, "dropoff": dropoff}, "r-1"), int64(3); got != want {
		t.Errorf("order-create without a quote: %d Redis round trips, want %d", got, want)
	}

	q := url.Values{"pickup": {fmt.Sprintf("%v,%v", pickup.Lat, pickup.Lng)}, "dropoff": {fmt.Sprintf("%v,%v", dropoff.Lat, dropoff.Lng)}}
	status, est := fntest.Do(t, fareestimate.New(env.D.Deps), http.MethodGet, "/?"+q.Encode(), nil, env.As(auth.RoleRider, "r-2"))
	quoteID, _ := est["quote_id"].(string)
	if status != http.StatusOK || quoteID == "" {
		t.Fatalf("fare-estimate: %d %v", status, est)
	}
	if got, want := count("with a quote", fntest.JSON{"pickup": pickup, "dropoff": dropoff, "quote_id": quoteID}, "r-2"), int64(2); got != want {
		t.Errorf("order-create with a quote: %d Redis round trips, want %d", got, want)
	}
}
