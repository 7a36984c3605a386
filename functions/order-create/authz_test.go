package function_test

import (
	"net/http"
	"testing"

	"github.com/flagdown/flagdown/internal/testkit/fntest"
	"github.com/flagdown/flagdown/shared/auth"
)

// TestOrderAccess: a rider orders only for himself (rider_id left out or his own); another rider's
// id is 403 and a driver or ops token 403, so the 409 naming an open ride answers only its rider.
func TestOrderAccess(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	ends := fntest.JSON{"pickup": pickup, "dropoff": dropoff}
	status, body := fntest.Do(t, env.Order, http.MethodPost, "/", ends, env.As(auth.RoleRider, "r-1"))
	if status != http.StatusAccepted {
		t.Fatalf("r-1 orders without rider_id: %d %v", status, body)
	}
	first := body["ride_id"]
	if got := env.GetRide(t, first.(string))["rider_id"]; got != "r-1" {
		t.Errorf("the ride's rider = %v, want r-1", got)
	}
	deny := []struct {
		name   string
		body   fntest.JSON
		h      map[string]string
		status int
	}{
		{"r-2 orders for r-1 (who has an open ride)", fntest.JSON{"rider_id": "r-1", "pickup": pickup, "dropoff": dropoff}, env.As(auth.RoleRider, "r-2"), 403},
		{"a driver orders", ends, env.As(auth.RoleDriver, "r-1"), 403},
		{"ops order", fntest.JSON{"rider_id": "r-1", "pickup": pickup, "dropoff": dropoff}, env.Ops(), 403},
		{"no token", fntest.JSON{"rider_id": "r-1", "pickup": pickup, "dropoff": dropoff}, nil, 401},
	}
	for _, tc := range deny {
		before := env.Snapshot(t)
		status, body := fntest.Do(t, env.Order, http.MethodPost, "/", tc.body, tc.h)
		if status != tc.status {
			t.Errorf("%s: %d %v, want %d", tc.name, status, body, tc.status)
		}
		if e := fntest.ErrorOf(t, body); e.Details["ride_id"] != nil {
			t.Errorf("%s: the answer names a ride: %v", tc.name, e.Details)
		}
		if diff := before.Diff(env.Snapshot(t)); diff != "" {
			t.Errorf("%s: a refused order changed %s", tc.name, diff)
		}
	}
	// Only r-1 himself hits his open ride and learns its id.
	status, body = fntest.Do(t, env.Order, http.MethodPost, "/", ends, env.As(auth.RoleRider, "r-1"))
	if status != http.StatusConflict || fntest.ErrorOf(t, body).Details["ride_id"] != first {
		t.Errorf("r-1's second order: %d %v, want 409 naming his ride", status, body)
	}
}
