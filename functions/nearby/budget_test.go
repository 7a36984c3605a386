package function_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"

	fareestimate "github.com/flagdown/flagdown/functions/fare-estimate"
	"github.com/flagdown/flagdown/internal/testkit/fntest"
	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/dispatch"
)

// TestReadsAreBudgeted: a burst of fare-estimate, nearby and hail calls of one caller gets 429 with
// Retry-After past his budget (and fare-estimate stores no quote then); with the gateway trusted
// (FLAGDOWN_TRUSTED_PROXY_HOPS=1) many callers behind one client IP share that IP's budget, and an
// X-Forwarded-For entry the client prepends himself does not escape it.
func TestReadsAreBudgeted(t *testing.T) {
	t.Parallel()
	const perCaller, perIP = 5, 8
	env := fntest.NewEnv(t, func(c *config.Config) {
		c.RateEstimatesPerMin, c.RateNearbyPerMin, c.RateHailsPerMin, c.RatePerIPPerMin = perCaller, perCaller, perCaller, perIP
		c.TrustedProxyHops = 1
	})
	fare := fareestimate.New(env.D.Deps)
	pu, do := dispatch.Point{Lat: 40.7549, Lng: -73.9840}, dispatch.Point{Lat: 40.7306, Lng: -73.9866}
	estimateQ := "/?" + url.Values{"pickup": {fmt.Sprintf("%v,%v", pu.Lat, pu.Lng)}, "dropoff": {fmt.Sprintf("%v,%v", do.Lat, do.Lng)}}.Encode()
	nearbyQ := fmt.Sprintf("/?lat=%v&lng=%v", pu.Lat, pu.Lng)
	hail := func(h map[string]string) (int, fntest.JSON) {
		return fntest.Do(t, env.Hail, http.MethodPost, "/", fntest.JSON{"lat": pu.Lat, "lng": pu.Lng, "dropoff": do}, h)
	}
	calls := []struct {
		name  string
		call  func(h map[string]string) (int, fntest.JSON)
		field string
	}{
		{"fare-estimate", func(h map[string]string) (int, fntest.JSON) {
			return fntest.Do(t, fare, http.MethodGet, estimateQ, nil, h)
		}, "rider_id"},
		{"nearby", func(h map[string]string) (int, fntest.JSON) {
			return fntest.Do(t, env.Nearby, http.MethodGet, nearbyQ, nil, h)
		}, "sub"},
		{"hail", hail, "rider_id"},
	}
	for _, c := range calls {
		// One rider from his own IP: perCaller calls, then 429 naming him.
		h := env.AsWith(auth.RoleRider, "r-"+c.name, map[string]string{"X-Forwarded-For": "198.51.100.1"})
		for i := range perCaller {
			if st, body := c.call(h); st >= 300 {
				t.Fatalf("%s call %d of %d: %d %v", c.name, i+1, perCaller, st, body)
			}
		}
		st, body := c.call(h)
		if st != http.StatusTooManyRequests || fntest.ErrorOf(t, body).Field != c.field {
			t.Fatalf("%s past the caller's budget: %d %v, want 429 naming %s", c.name, st, body, c.field)
		}
		// Many riders behind one IP, each claiming another address left of the gateway's entry:
		// perIP calls, then 429 naming client_ip.
		for i := range perIP + 1 {
			h := env.AsWith(auth.RoleRider, fmt.Sprintf("r-%s-%d", c.name, i),
				map[string]string{"X-Forwarded-For": fmt.Sprintf("10.0.0.%d, 203.0.113.7", i)})
			st, body := c.call(h)
			if i < perIP && st >= 300 {
				t.Fatalf("%s call %d of %d from one IP: %d %v", c.name, i+1, perIP, st, body)
			}
			if i == perIP && (st != http.StatusTooManyRequests || fntest.ErrorOf(t, body).Field != "client_ip") {
				t.Fatalf("%s past the IP's budget: %d %v, want 429 naming client_ip", c.name, st, body)
			}
		}
	}
	// The rider's over-budget estimate stored nothing: one quote per allowed estimate.
	keys, err := env.D.Redis.Client().Keys(context.Background(), env.D.Config.RedisPrefix+"quote:*").Result()
	if err != nil || len(keys) != perCaller+perIP {
		t.Fatalf("%d quotes stored (%v), want %d: one per allowed estimate", len(keys), err, perCaller+perIP)
	}
}
