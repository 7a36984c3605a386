package function_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/internal/testkit/fntest"
	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/dispatch"
)

var (
	pickup  = dispatch.Point{Lat: 40.7549, Lng: -73.9840}
	dropoff = dispatch.Point{Lat: 40.7306, Lng: -73.9866}
)

// offered creates a ride for r-1 with drivers pinging around the pickup (the first nearest) and
// matches it; it returns the ride id and the offered driver.
func offered(t *testing.T, env *fntest.Env, drivers ...string) (string, string) {
	t.Helper()
	for i, d := range drivers {
		env.Ping(t, d, fntest.Offset(pickup, 100+150*float64(i), 0))
	}
	rideID := env.CreateRide(t, "r-1", pickup, dropoff)
	if got, want := env.MatchRide(t, rideID), "offered"; got != want {
		t.Fatalf("match outcome = %q, want %q", got, want)
	}
	return rideID, env.OfferedDriver(t, rideID)
}

// accepted is offered followed by the offered driver's accept.
func accepted(t *testing.T, env *fntest.Env, drivers ...string) (string, string) {
	t.Helper()
	rideID, driver := offered(t, env, drivers...)
	if status, body := env.AcceptRide(t, rideID, driver); status != http.StatusOK {
		t.Fatalf("accept: %d %v", status, body)
	}
	return rideID, driver
}

// act performs an action that must succeed and returns the ride view it answers.
func act(t *testing.T, env *fntest.Env, rideID, action string, body any) fntest.JSON {
	t.Helper()
	status, view := env.RideAction(t, rideID, action, body)
	if status != http.StatusOK {
		t.Fatalf("%s: status %d: %v", action, status, view)
	}
	return view
}

func driverState(t *testing.T, env *fntest.Env, driver string) (status, ride string) {
	t.Helper()
	v, err := env.D.Redis.Client().HMGet(context.Background(), env.Key("driver:"+driver), "status", "ride").Result()
	if err != nil {
		t.Fatal(err)
	}
	status, _ = v[0].(string)
	ride, _ = v[1].(string)
	return status, ride
}

func lastOutbox(t *testing.T, env *fntest.Env, rideID string) string {
	t.Helper()
	types := env.OutboxTypes(t, rideID)
	if len(types) == 0 {
		return ""
	}
	return types[len(types)-1]
}

func TestRideLifecycle(t *testing.T) {
	t.Parallel()

	t.Run("start and complete put the driver back in the available set at the dropoff", func(t *testing.T) {
		t.Parallel()
		env := fntest.NewEnv(t, nil)
		rideID, driver := accepted(t, env, "d-1")

		view := act(t, env, rideID, "start", fntest.JSON{"driver_id": driver})
		if got, want := view["status"], "IN_PROGRESS"; got != want {
			t.Errorf("status after start = %v, want %v", got, want)
		}
		if view["started_at"] == nil {
			t.Errorf("started_at is not set")
		}
		if got, want := lastOutbox(t, env, rideID), events.RideStarted; got != want {
			t.Errorf("last outbox type = %q, want %q", got, want)
		}
		if got, _ := driverState(t, env, driver); got != "busy" {
			t.Errorf("driver status during the ride = %q, want busy", got)
		}

		view = act(t, env, rideID, "complete", fntest.JSON{"driver_id": driver})
		if got, want := view["status"], "COMPLETED"; got != want {
			t.Errorf("status after complete = %v, want %v", got, want)
		}
		if view["completed_at"] == nil {
			t.Errorf("completed_at is not set")
		}
		if view["driver_position"] != nil {
			t.Errorf("a completed ride shows a driver_position: %v", view["driver_position"])
		}
		if got, want := lastOutbox(t, env, rideID), events.RideCompleted; got != want {
			t.Errorf("last outbox type = %q, want %q", got, want)
		}
		if p := env.GeoPos(t, driver); p == nil || !fntest.Near(*p, dropoff, 1e-5) {
			t.Errorf("driver's available position = %v, want the dropoff %v", p, dropoff)
		}
		if status, ride := driverState(t, env, driver); status != "available" || ride != "" {
			t.Errorf("driver state = %q ride %q, want available with no ride", status, ride)
		}
	})

	t.Run("the rider cancels a requested ride with a live offer", func(t *testing.T) {
		t.Parallel()
		env := fntest.NewEnv(t, nil)
		rideID, driver := offered(t, env, "d-1")
		view := act(t, env, rideID, "cancel", fntest.JSON{"by": "rider", "rider_id": "r-1", "reason": "changed my mind"})
		if got, want := view["status"], "CANCELLED"; got != want {
			t.Errorf("status = %v, want %v", got, want)
		}
		if got, want := env.Count(t, `SELECT count(*) FROM offers WHERE status = 'CANCELLED'`), 1; got != want {
			t.Errorf("cancelled offers = %d, want %d", got, want)
		}
		if env.GeoPos(t, driver) == nil {
			t.Errorf("the offered driver is not back in the available set")
		}
		if got, want := lastOutbox(t, env, rideID), events.RideCancelled; got != want {
			t.Errorf("last outbox type = %q, want %q", got, want)
		}
	})

	t.Run("the rider cancels an accepted ride and the driver is free again", func(t *testing.T) {
		t.Parallel()
		env := fntest.NewEnv(t, nil)
		rideID, driver := accepted(t, env, "d-1")
		view := act(t, env, rideID, "cancel", fntest.JSON{"by": "rider", "rider_id": "r-1"})
		if got, want := view["status"], "CANCELLED"; got != want {
			t.Errorf("status = %v, want %v", got, want)
		}
		if status, ride := driverState(t, env, driver); status != "available" || ride != "" {
			t.Errorf("driver state = %q ride %q, want available with no ride", status, ride)
		}
		if env.GeoPos(t, driver) == nil {
			t.Errorf("the freed driver is not in the available set")
		}
		next := env.CreateRide(t, "r-2", pickup, dropoff)
		if got, want := env.MatchRide(t, next), "offered"; got != want {
			t.Errorf("match of the next ride = %q, want %q", got, want)
		}
		if got, want := env.OfferedDriver(t, next), driver; got != want {
			t.Errorf("next ride offered to %q, want the freed driver %q", got, want)
		}
	})

	t.Run("the driver cancels an accepted ride and it is matched again without him", func(t *testing.T) {
		t.Parallel()
		env := fntest.NewEnv(t, nil)
		rideID, driver := accepted(t, env, "d-1", "d-2")
		view := act(t, env, rideID, "cancel", fntest.JSON{"by": "driver", "driver_id": driver, "reason": "flat tyre"})
		if got, want := view["status"], "REQUESTED"; got != want {
			t.Errorf("status = %v, want %v", got, want)
		}
		if got, ok := view["driver_id"]; ok {
			t.Errorf("driver_id = %v, want none", got)
		}
		if got, want := env.Count(t, `SELECT count(*) FROM rides WHERE id = $1 AND driver_id IS NULL`, rideID), 1; got != want {
			t.Errorf("rides without a driver = %d, want %d", got, want)
		}
		if got, want := lastOutbox(t, env, rideID), events.RideReopened; got != want {
			t.Errorf("last outbox type = %q, want %q", got, want)
		}
		if status, ride := driverState(t, env, driver); status != "available" || ride != "" {
			t.Errorf("driver state = %q ride %q, want available with no ride", status, ride)
		}
		outcome := env.MatchEvent(t, fntest.Event{Type: events.RideReopened, Source: "/flagdown/ride", Subject: rideID})
		if got, want := outcome, "offered"; got != want {
			t.Fatalf("rematch = %q, want %q", got, want)
		}
		if got := env.OfferedDriver(t, rideID); got == driver || got == "" {
			t.Errorf("rematch offered %q, want the other driver", got)
		}
	})

	t.Run("a decline writes ride.offer.declined and the next match excludes the decliner", func(t *testing.T) {
		t.Parallel()
		env := fntest.NewEnv(t, nil)
		rideID, driver := offered(t, env, "d-1", "d-2")
		if got, want := driver, "d-1"; got != want {
			t.Fatalf("offered %q, want the nearest %q", got, want)
		}
		view := act(t, env, rideID, "decline", fntest.JSON{"driver_id": driver})
		if got, want := view["status"], "DECLINED"; got != want {
			t.Errorf("offer status = %v, want %v", got, want)
		}
		if got, want := env.GetRide(t, rideID)["status"], "REQUESTED"; got != want {
			t.Errorf("ride status = %v, want %v", got, want)
		}
		if got, want := lastOutbox(t, env, rideID), events.RideOfferDeclined; got != want {
			t.Errorf("last outbox type = %q, want %q", got, want)
		}
		if got, want := env.Count(t, `SELECT count(*) FROM offers WHERE driver_id = $1 AND status = 'DECLINED'`, driver), 1; got != want {
			t.Errorf("declined offers = %d, want %d", got, want)
		}
		if env.GeoPos(t, driver) == nil {
			t.Errorf("the decliner is not back in the available set")
		}
		outcome := env.MatchEvent(t, fntest.Event{Type: events.RideOfferDeclined, Source: "/flagdown/ride", Subject: rideID})
		if got, want := outcome, "offered"; got != want {
			t.Fatalf("rematch = %q, want %q", got, want)
		}
		if got, want := env.OfferedDriver(t, rideID), "d-2"; got != want {
			t.Errorf("rematch offered %q, want %q", got, want)
		}
	})
}

func TestIllegalTransitionsAnswerConflictWithTheCurrentStatus(t *testing.T) {
	t.Parallel()
	// setup brings a fresh ride into a status and returns its id and driver.
	setups := map[string]func(t *testing.T, env *fntest.Env) (string, string){
		"REQUESTED": func(t *testing.T, env *fntest.Env) (string, string) { return offered(t, env, "d-1") },
		"ACCEPTED":  func(t *testing.T, env *fntest.Env) (string, string) { return accepted(t, env, "d-1") },
		"IN_PROGRESS": func(t *testing.T, env *fntest.Env) (string, string) {
			id, d := accepted(t, env, "d-1")
			act(t, env, id, "start", fntest.JSON{"driver_id": d})
			return id, d
		},
		"COMPLETED": func(t *testing.T, env *fntest.Env) (string, string) {
			id, d := accepted(t, env, "d-1")
			act(t, env, id, "start", fntest.JSON{"driver_id": d})
			act(t, env, id, "complete", fntest.JSON{"driver_id": d})
			return id, d
		},
		"CANCELLED": func(t *testing.T, env *fntest.Env) (string, string) {
			id, d := accepted(t, env, "d-1")
			act(t, env, id, "cancel", fntest.JSON{"by": "rider", "rider_id": "r-1"})
			return id, d
		},
	}
	tests := []struct {
		from, action string
		byRider      bool
	}{
		{"REQUESTED", "start", false},
		{"REQUESTED", "complete", false},
		{"REQUESTED", "cancel", false}, // a driver cannot cancel a ride he does not have
		{"ACCEPTED", "complete", false},
		{"ACCEPTED", "decline", false},
		{"IN_PROGRESS", "start", false},
		{"IN_PROGRESS", "decline", false},
		{"IN_PROGRESS", "cancel", true},
		{"IN_PROGRESS", "cancel", false},
		{"COMPLETED", "start", false},
		{"COMPLETED", "complete", false},
		{"COMPLETED", "cancel", true},
		{"CANCELLED", "cancel", true},
		{"CANCELLED", "start", false},
	}
	for _, tc := range tests {
		by := "driver"
		if tc.byRider {
			by = "rider"
		}
		t.Run(fmt.Sprintf("%s on a %s ride by the %s", tc.action, tc.from, by), func(t *testing.T) {
			t.Parallel()
			env := fntest.NewEnv(t, nil)
			rideID, driver := setups[tc.from](t, env)
			body := fntest.JSON{"driver_id": driver}
			switch {
			case tc.action == "cancel" && tc.byRider:
				body = fntest.JSON{"by": "rider", "rider_id": "r-1"}
			case tc.action == "cancel":
				body["by"] = "driver"
			}
			before := env.Snapshot(t)
			status, answer := env.RideAction(t, rideID, tc.action, body)
			if got, want := status, http.StatusConflict; got != want {
				t.Fatalf("status = %d, want %d (%v)", got, want, answer)
			}
			e := fntest.ErrorOf(t, answer)
			if got, want := e.Reason, dispatch.ReasonIllegalTransition; got != want {
				t.Errorf("reason = %q, want %q", got, want)
			}
			if got, want := e.Details["current_status"], tc.from; got != want {
				t.Errorf("details.current_status = %v, want %v", got, want)
			}
			if diff := before.Diff(env.Snapshot(t)); diff != "" {
				t.Errorf("an illegal transition wrote something: %s", diff)
			}
		})
	}
}

func TestRideRejects(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	rideID, driver := accepted(t, env, "d-1")
	tests := []struct {
		name       string
		method     string
		path       string
		body       any
		wantStatus int
		wantField  string
	}{
		{"another driver starts the ride", http.MethodPost, "/" + rideID + "/start", fntest.JSON{"driver_id": "d-other"}, 404, ""},
		{"another rider cancels the ride", http.MethodPost, "/" + rideID + "/cancel", fntest.JSON{"by": "rider", "rider_id": "r-other"}, 404, ""},
		{"a cancel by nobody", http.MethodPost, "/" + rideID + "/cancel", fntest.JSON{"by": "nobody", "rider_id": "r-1"}, 400, "by"},
		{"an unknown action", http.MethodPost, "/" + rideID + "/teleport", fntest.JSON{"driver_id": driver}, 400, "action"},
		{"a start with a rider id", http.MethodPost, "/" + rideID + "/start", fntest.JSON{"driver_id": driver, "rider_id": "r-1"}, 400, "body"},
		{"an unknown field", http.MethodPost, "/" + rideID + "/start", `{"driver_id": "d-1", "speed": 3}`, 400, "speed"},
		{"an over-long driver id", http.MethodPost, "/" + rideID + "/start", fntest.JSON{"driver_id": strings.Repeat("d", 129)}, 400, "driver_id"},
		{"an unknown ride", http.MethodGet, "/00000000-0000-4000-8000-000000000000", nil, 404, ""},
		{"a ride id that is not a uuid", http.MethodGet, "/not-a-uuid", nil, 400, "ride_id"},
		{"a ride id with a NUL byte", http.MethodPost, "/" + rideID + "%00/start", fntest.JSON{"driver_id": driver}, 400, "ride_id"},
		{"a cancel reason with a control character", http.MethodPost, "/" + rideID + "/cancel", fntest.JSON{"by": "rider", "rider_id": "r-1", "reason": "late\u0007"}, 400, "reason"},
		{"an over-long cancel reason", http.MethodPost, "/" + rideID + "/cancel", fntest.JSON{"by": "rider", "rider_id": "r-1", "reason": strings.Repeat("x", 501)}, 400, "reason"},
		{"no ride id", http.MethodGet, "/", nil, 400, "path"},
		{"a GET of an action", http.MethodGet, "/" + rideID + "/start", nil, 405, "method"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := env.Snapshot(t)
			// As the actor the body names (fntest.Env.RideAction), or as ops for a bodiless request.
			headers := env.Ops()
			if m, ok := tc.body.(fntest.JSON); ok {
				if r, _ := m["rider_id"].(string); r != "" {
					headers = env.As(auth.RoleRider, r)
				} else if d, _ := m["driver_id"].(string); d != "" && dispatch.ValidateID("driver_id", d) == nil {
					headers = env.As(auth.RoleDriver, d)
				} else {
					headers = env.As(auth.RoleDriver, driver)
				}
			} else if tc.body != nil {
				headers = env.As(auth.RoleDriver, driver)
			}
			status, body := fntest.Do(t, env.Ride, tc.method, tc.path, tc.body, headers)
			if got, want := status, tc.wantStatus; got != want {
				t.Fatalf("status = %d, want %d (%v)", got, want, body)
			}
			if got, want := fntest.ErrorOf(t, body).Field, tc.wantField; got != want {
				t.Errorf("field = %q, want %q", got, want)
			}
			if diff := before.Diff(env.Snapshot(t)); diff != "" {
				t.Errorf("a rejected request wrote something: %s", diff)
			}
		})
	}
	t.Run("a decline by a driver the ride was never offered to is not found", func(t *testing.T) {
		env := fntest.NewEnv(t, nil)
		rideID, _ := offered(t, env, "d-1")
		status, body := env.RideAction(t, rideID, "decline", fntest.JSON{"driver_id": "d-other"})
		if got, want := status, http.StatusNotFound; got != want {
			t.Fatalf("status = %d, want %d (%v)", got, want, body)
		}
		if got, want := fntest.ErrorOf(t, body).Code, "not_found"; got != want {
			t.Errorf("code = %q, want %q", got, want)
		}
	})
}

// A decline after the offer window closed answers offer_expired (as accept does), not not_your_offer.
func TestDeclineAfterTheWindowAnswersOfferExpired(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, func(c *config.Config) { c.OfferWindow = time.Second })
	rideID, driver := offered(t, env, "d-1")
	time.Sleep(1100 * time.Millisecond) // past the offer window (PostgreSQL's clock decides)
	code, body := env.RideAction(t, rideID, "decline", fntest.JSON{"driver_id": driver})
	if got := fntest.ErrorOf(t, body); code != http.StatusConflict || got.Reason != dispatch.ReasonOfferExpired {
		t.Fatalf("decline after the window: %d %+v, want 409 %s", code, got, dispatch.ReasonOfferExpired)
	}
}

// A ride its driver gives back is REQUESTED again without a driver and without an acceptance time.
func TestReopenedRideClearsItsAcceptance(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	rideID, driver := accepted(t, env, "d-1")
	ride := act(t, env, rideID, "cancel", fntest.JSON{"by": "driver", "driver_id": driver})
	if ride["status"] != "REQUESTED" || ride["driver_id"] != nil || ride["accepted_at"] != nil {
		t.Fatalf("re-opened ride: status %v driver %v accepted_at %v; want REQUESTED, none, null", ride["status"], ride["driver_id"], ride["accepted_at"])
	}
}
