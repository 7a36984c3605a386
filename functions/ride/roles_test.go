package function_test

import (
	"net/http"
	"testing"

	"github.com/flagdown/flagdown/internal/testkit/fntest"
	"github.com/flagdown/flagdown/shared/auth"
)

// TestDeclineAnswersOnlyTheOffer: a driver who declines learns nothing more of the ride than he was
// offered: the answer is the ride id and his offer's status, without the rider, pickup or dropoff.
func TestDeclineAnswersOnlyTheOffer(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	rideID, driver := offered(t, env, "d-1")
	view := act(t, env, rideID, "decline", fntest.JSON{"driver_id": driver})
	if view["ride_id"] != rideID || view["status"] != "DECLINED" {
		t.Errorf("decline answer = %v, want ride_id %s and status DECLINED", view, rideID)
	}
	for _, k := range []string{"rider_id", "pickup", "dropoff", "fare_estimate_cents", "driver_id"} {
		if _, ok := view[k]; ok {
			t.Errorf("decline answer carries %s: %v", k, view)
		}
	}
}

// TestRideReadsAreNotTheServicesOrTheAdmins: the gateway aggregator (service) and an admin read no
// ride; an operator (ops) reads any.
func TestRideReadsAreNotTheServicesOrTheAdmins(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	rideID := env.CreateRide(t, "r-1", pickup, dropoff)
	for _, role := range []auth.Role{auth.Role("service"), auth.Role("admin")} {
		status, body := fntest.Do(t, env.Ride, http.MethodGet, "/"+rideID, nil, env.As(role, "someone"))
		if status != http.StatusForbidden {
			t.Errorf("%s reads a ride: %d %v, want 403", role, status, body)
		}
	}
	if status, body := fntest.Do(t, env.Ride, http.MethodGet, "/"+rideID, nil, env.Ops()); status != http.StatusOK {
		t.Errorf("ops reads a ride: %d %v, want 200", status, body)
	}
}
