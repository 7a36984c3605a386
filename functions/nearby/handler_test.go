package function_test

import (
	"context"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/flagdown/flagdown/internal/testkit/fntest"
	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/dispatch"
)

func TestNearbyAnswersLatLngInOurOrderNearestFirst(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	center := dispatch.Point{Lat: 40.7128, Lng: -74.0060}
	env.Ping(t, "d-here", center)
	env.Ping(t, "d-400", fntest.Offset(center, 400, 0))
	env.Ping(t, "d-200", fntest.Offset(center, 0, -200))
	env.Ping(t, "d-far", fntest.Offset(center, 3000, 0))
	env.Ping(t, "d-paused", fntest.Offset(center, 100, 0))
	if status, body := fntest.Do(t, env.Location, http.MethodPost, "/", fntest.JSON{
		"driver_id": "d-paused", "lat": center.Lat, "lng": center.Lng, "status": "paused",
		"ts": time.Now().Add(time.Second).UTC().Format(time.RFC3339Nano), // after his first ping
	}, env.As(auth.RoleDriver, "d-paused")); status != http.StatusOK || body["status"] != "paused" {
		t.Fatalf("pause: %d %v", status, body)
	}

	status, body := fntest.Do(t, env.Nearby, http.MethodGet, "/?lat=40.7128&lng=-74.0060&radius_m=1000", nil, env.Ops())
	if status != http.StatusOK {
		t.Fatalf("status %d: %v", status, body)
	}
	drivers, _ := body["drivers"].([]any)
	var ids []string
	for _, d := range drivers {
		ids = append(ids, d.(map[string]any)["driver_id"].(string))
	}
	if got, want := strings.Join(ids, ","), "d-here,d-200,d-400"; got != want {
		t.Fatalf("drivers = %s, want %s", got, want)
	}
	first := drivers[0].(map[string]any)
	if got, want := first["lat"].(float64), 40.7128; math.Abs(got-want) > 1e-5 {
		t.Errorf("lat = %v, want ≈ %v", got, want)
	}
	if got, want := first["lng"].(float64), -74.0060; math.Abs(got-want) > 1e-5 {
		t.Errorf("lng = %v, want ≈ %v", got, want)
	}
	if got, want := drivers[1].(map[string]any)["distance_m"].(float64), 200.0; math.Abs(got-want) > 2 {
		t.Errorf("distance_m of d-200 = %v, want ≈ %v", got, want)
	}
}

func TestNearbyLeavesOutDriversWhoseHeartbeatExpired(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, func(c *config.Config) { c.HeartbeatTTL = time.Second })
	center := dispatch.Point{Lat: 40.7128, Lng: -74.0060}
	env.Ping(t, "d-gone", center)
	fntest.Eventually(t, 10*time.Second, "heartbeat to expire", func() bool {
		n, err := env.D.Redis.Client().Exists(context.Background(), env.Key("hb:d-gone")).Result()
		return err == nil && n == 0
	})
	env.Ping(t, "d-alive", fntest.Offset(center, 100, 0))
	status, body := fntest.Do(t, env.Nearby, http.MethodGet, "/?lat=40.7128&lng=-74.0060", nil, env.Ops())
	if status != http.StatusOK {
		t.Fatalf("status %d: %v", status, body)
	}
	var ids []string
	for _, d := range body["drivers"].([]any) {
		ids = append(ids, d.(map[string]any)["driver_id"].(string))
	}
	if got, want := strings.Join(ids, ","), "d-alive"; got != want {
		t.Errorf("drivers = %s, want %s", got, want)
	}
}

func TestNearbyRejectsBadQueries(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	tests := []struct {
		name      string
		query     string
		wantField string
		wantRule  string
	}{
		{"missing lat", "lng=-73.98", "lat", "is required"},
		{"lat above 90", "lat=91&lng=-73.98", "lat", "between -90 and 90"},
		{"lng below -180", "lat=40.75&lng=-180.01", "lng", "between -180 and 180"},
		{"lat beyond the Redis GEO limit", "lat=85.06&lng=-73.98", "lat", "85.05112878"},
		{"NaN", "lat=NaN&lng=-73.98", "lat", "finite"},
		{"Infinity", "lat=40.75&lng=Inf", "lng", "finite"},
		{"not a number", "lat=north&lng=-73.98", "lat", "finite decimal"},
		{"radius over the maximum", "lat=40.75&lng=-73.98&radius_m=50000", "radius_m", "at most"},
		{"zero radius", "lat=40.75&lng=-73.98&radius_m=0", "radius_m", "greater than 0"},
		{"unknown parameter", "lat=40.75&lng=-73.98&limit=3", "limit", "not a known parameter"},
		{"lat given twice", "lat=40.75&lat=40.76&lng=-73.98", "lat", "once"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, body := fntest.Do(t, env.Nearby, http.MethodGet, "/?"+tc.query, nil, env.As(auth.RoleRider, "r-1"))
			if got, want := status, http.StatusBadRequest; got != want {
				t.Fatalf("status = %d, want %d (%v)", got, want, body)
			}
			e := fntest.ErrorOf(t, body)
			if got, want := e.Field, tc.wantField; got != want {
				t.Errorf("field = %q, want %q", got, want)
			}
			if !strings.Contains(e.Message, tc.wantField) || !strings.Contains(e.Message, tc.wantRule) {
				t.Errorf("message %q should name %q and the rule %q", e.Message, tc.wantField, tc.wantRule)
			}
		})
	}
}
