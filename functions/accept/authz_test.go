package function_test

import (
	"net/http"
	"testing"

	"github.com/flagdown/flagdown/internal/testkit/fntest"
	"github.com/flagdown/flagdown/shared/auth"
)

// TestAcceptAccess: only the offered driver, as himself, accepts (driver_id may be left out);
// another driver gets not_your_offer, a body naming the offered driver under another driver's token
// 403, a rider 403, no token 401; nothing changes on a refusal.
func TestAcceptAccess(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	rideID, driver := offeredRide(t, env, "r-1", []string{"d-1", "d-2"})
	other := "d-2"
	if driver == other {
		other = "d-1"
	}
	deny := []struct {
		name   string
		body   fntest.JSON
		h      map[string]string
		status int
	}{
		{"another driver, as himself (never offered it: the ride does not exist for him)", fntest.JSON{"ride_id": rideID}, env.As(auth.RoleDriver, other), 404},
		{"another driver naming the offered one", fntest.JSON{"ride_id": rideID, "driver_id": driver}, env.As(auth.RoleDriver, other), 403},
		{"the rider", fntest.JSON{"ride_id": rideID}, env.As(auth.RoleRider, "r-1"), 403},
		{"ops", fntest.JSON{"ride_id": rideID, "driver_id": driver}, env.Ops(), 403},
		{"no token", fntest.JSON{"ride_id": rideID, "driver_id": driver}, nil, 401},
	}
	for _, tc := range deny {
		before := env.Snapshot(t)
		status, body := fntest.Do(t, env.Accept, http.MethodPost, "/", tc.body, tc.h)
		if status != tc.status {
			t.Errorf("%s: %d %v, want %d", tc.name, status, body, tc.status)
		}
		if diff := before.Diff(env.Snapshot(t)); diff != "" {
			t.Errorf("%s: a refused accept changed %s", tc.name, diff)
		}
	}
	status, body := fntest.Do(t, env.Accept, http.MethodPost, "/", fntest.JSON{"ride_id": rideID}, env.As(auth.RoleDriver, driver))
	if status != http.StatusOK || body["driver_id"] != driver || body["status"] != "ACCEPTED" {
		t.Fatalf("the offered driver accepts without driver_id: %d %v", status, body)
	}
}
