package function_test

import (
	"net/http"
	"testing"

	"github.com/flagdown/flagdown/internal/testkit/fntest"
	"github.com/flagdown/flagdown/shared/auth"
)

// TestRideReadAccess: GET /ride/{id} answers its rider, the driver it names and ops; another rider,
// another driver and a driver it was only offered to get 404 like a missing ride; no token 401.
func TestRideReadAccess(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	rideID, driver := accepted(t, env, "d-1", "d-2")
	other := "d-1"
	if driver == other {
		other = "d-2"
	}
	env.Ping(t, driver, pickup)
	get := func(h map[string]string) (int, fntest.JSON) {
		return fntest.Do(t, env.Ride, http.MethodGet, "/"+rideID, nil, h)
	}
	for name, h := range map[string]map[string]string{
		"its rider": env.As(auth.RoleRider, "r-1"), "its driver": env.As(auth.RoleDriver, driver), "ops": env.Ops(),
	} {
		status, body := get(h)
		if status != http.StatusOK || body["ride_id"] != rideID {
			t.Errorf("%s: %d %v, want 200 with the ride", name, status, body)
		}
		if body["driver_position"] == nil {
			t.Errorf("%s: no driver_position while ACCEPTED: %v", name, body)
		}
	}
	for name, h := range map[string]map[string]string{
		"another rider": env.As(auth.RoleRider, "r-2"), "another driver": env.As(auth.RoleDriver, "d-9"),
		"the driver whose offer this was not": env.As(auth.RoleDriver, other),
		"a rider token with the driver's id":  env.As(auth.RoleRider, driver),
	} {
		status, body := get(h)
		if status != http.StatusNotFound || fntest.ErrorOf(t, body).Code != "not_found" {
			t.Errorf("%s: %d %v, want 404 not_found", name, status, body)
		}
		if _, leaked := body["pickup"]; leaked {
			t.Errorf("%s: the answer shows the ride", name)
		}
	}
	if status, body := get(nil); status != http.StatusUnauthorized || fntest.ErrorOf(t, body).Code != "unauthenticated" {
		t.Errorf("no token: %d %v, want 401 unauthenticated", status, body)
	}
	// Once completed the ride still names its driver, who may still read it; after a driver's cancel
	// re-opens a ride it no longer names him.
	act(t, env, rideID, "start", fntest.JSON{"driver_id": driver})
	env.Ping(t, driver, pickup) // no live position is shown once the ride is over
	act(t, env, rideID, "complete", fntest.JSON{"driver_id": driver})
	if status, body := get(env.As(auth.RoleDriver, driver)); status != http.StatusOK || body["driver_position"] != nil {
		t.Errorf("its driver after COMPLETED: %d %v, want 200 without driver_position", status, body)
	}
}

// actAs posts action with body as the caller of headers.
func actAs(t *testing.T, env *fntest.Env, h map[string]string, rideID, action string, body any) (int, fntest.JSON) {
	t.Helper()
	return env.RideActionAs(t, h, rideID, action, body)
}

// TestRideActionAccess: start and complete are the ride's driver's; cancel its rider's (or its
// driver's for a driver cancel); everyone else gets 404 (another party's ride is not revealed) or
// 403 (a role that may not do this, an id that is not the caller's), and nothing changes.
func TestRideActionAccess(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	rideID, driver := accepted(t, env, "d-1")
	deny := []struct {
		name   string
		h      map[string]string
		action string
		body   any
		status int
	}{
		{"another driver starts", env.As(auth.RoleDriver, "d-9"), "start", fntest.JSON{}, 404},
		{"a driver naming the ride's driver in the body", env.As(auth.RoleDriver, "d-9"), "start", fntest.JSON{"driver_id": driver}, 403},
		{"a rider starts", env.As(auth.RoleRider, "r-1"), "start", fntest.JSON{}, 403},
		{"ops start", env.Ops(), "start", fntest.JSON{}, 403},
		{"another rider cancels", env.As(auth.RoleRider, "r-2"), "cancel", fntest.JSON{}, 404},
		{"a rider cancelling as the driver", env.As(auth.RoleRider, "r-1"), "cancel", fntest.JSON{"by": "driver"}, 403},
		{"a driver cancelling as the rider", env.As(auth.RoleDriver, driver), "cancel", fntest.JSON{"by": "rider"}, 403},
		{"ops cancel", env.Ops(), "cancel", fntest.JSON{}, 403},
		{"no token", nil, "cancel", fntest.JSON{"by": "rider", "rider_id": "r-1"}, 401},
	}
	for _, tc := range deny {
		before := env.Snapshot(t)
		status, body := actAs(t, env, tc.h, rideID, tc.action, tc.body)
		if status != tc.status {
			t.Errorf("%s: %d %v, want %d", tc.name, status, body, tc.status)
		}
		if diff := before.Diff(env.Snapshot(t)); diff != "" {
			t.Errorf("%s: a refused action changed %s", tc.name, diff)
		}
	}
	// Allowed: the driver starts without naming himself, the rider of another ride cancels his own.
	if status, body := actAs(t, env, env.As(auth.RoleDriver, driver), rideID, "start", fntest.JSON{}); status != http.StatusOK || body["status"] != "IN_PROGRESS" {
		t.Fatalf("its driver starts: %d %v", status, body)
	}
	mine := env.CreateRide(t, "r-5", fntest.Offset(pickup, 50, 50), dropoff)
	if status, body := actAs(t, env, env.As(auth.RoleRider, "r-5"), mine, "cancel", fntest.JSON{"reason": "changed my mind"}); status != http.StatusOK || body["status"] != "CANCELLED" {
		t.Fatalf("its rider cancels (by omitted): %d %v", status, body)
	}
	if status, body := actAs(t, env, env.As(auth.RoleDriver, driver), rideID, "complete", fntest.JSON{"driver_id": driver}); status != http.StatusOK || body["status"] != "COMPLETED" {
		t.Fatalf("its driver completes: %d %v", status, body)
	}
}

// TestDriverCancelSeesTheReopenedRide: a driver's cancel re-opens the ride without him; he is
// answered with the result even though the ride no longer names him, and may not read it after.
func TestDriverCancelSeesTheReopenedRide(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	rideID, driver := accepted(t, env, "d-1")
	status, body := actAs(t, env, env.As(auth.RoleDriver, driver), rideID, "cancel", fntest.JSON{})
	if status != http.StatusOK || body["status"] != "REQUESTED" {
		t.Fatalf("driver cancel (by omitted): %d %v, want 200 REQUESTED", status, body)
	}
	if status, _ := fntest.Do(t, env.Ride, http.MethodGet, "/"+rideID, nil, env.As(auth.RoleDriver, driver)); status != http.StatusNotFound {
		t.Errorf("the former driver reads the re-opened ride: %d, want 404", status)
	}
}
