package function_test

import (
	"net/http"
	"testing"

	"github.com/flagdown/flagdown/internal/testkit/fntest"
	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/dispatch"
)

// A rider past his ride-request budget gets 429 rate_limited naming rider_id, and nothing is
// written; another rider is not affected.
func TestRideRequestsPastTheRidersBudget(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, func(c *config.Config) { c.RateRidesPerMin = 2 })
	body := fntest.JSON{"pickup": pickup, "dropoff": dropoff}
	if status, b := fntest.Do(t, env.Order, http.MethodPost, "/", body, env.As(auth.RoleRider, "r-1")); status != http.StatusAccepted {
		t.Fatalf("first request: %d %v, want 202", status, b)
	}
	if status, b := fntest.Do(t, env.Order, http.MethodPost, "/", body, env.As(auth.RoleRider, "r-1")); status != http.StatusConflict {
		t.Fatalf("second request (ride open): %d %v, want 409", status, b)
	}
	before := env.Snapshot(t)
	status, b := fntest.Do(t, env.Order, http.MethodPost, "/", body, env.As(auth.RoleRider, "r-1"))
	if status != http.StatusTooManyRequests {
		t.Fatalf("third request: %d %v, want 429", status, b)
	}
	if e := fntest.ErrorOf(t, b); e.Code != string(dispatch.CodeRateLimited) || e.Field != "rider_id" {
		t.Errorf("error = %+v, want rate_limited on rider_id", e)
	}
	if diff := before.Diff(env.Snapshot(t)); diff != "" {
		t.Errorf("a refused request changed state:\n%s", diff)
	}
	if status, b := fntest.Do(t, env.Order, http.MethodPost, "/", body, env.As(auth.RoleRider, "r-2")); status != http.StatusAccepted {
		t.Errorf("another rider: %d %v, want 202", status, b)
	}
}
