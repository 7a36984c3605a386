package function_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/internal/testkit/fntest"
	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/pgstore"
)

var (
	pickup  = dispatch.Point{Lat: 40.7549, Lng: -73.9840}
	dropoff = dispatch.Point{Lat: 40.7306, Lng: -73.9866}
)

// offeredRide pings drivers around the pickup (driver i at 50+20i metres north), creates a ride for
// rider and matches it; it returns the ride id and the offered driver.
func offeredRide(t *testing.T, env *fntest.Env, rider string, drivers []string) (string, string) {
	t.Helper()
	for i, d := range drivers {
		env.Ping(t, d, fntest.Offset(pickup, 50+20*float64(i), 0))
	}
	rideID := env.CreateRide(t, rider, pickup, dropoff)
	if got, want := env.MatchRide(t, rideID), "offered"; got != want {
		t.Fatalf("match outcome = %q, want %q", got, want)
	}
	offered := env.OfferedDriver(t, rideID)
	if offered == "" {
		t.Fatalf("no pending offer after match")
	}
	return rideID, offered
}

func driverIDs(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%02d", prefix, i)
	}
	return out
}

type result struct {
	driver string
	status int
	reason string
}

// acceptConcurrently sends one accept per entry of drivers at the same moment.
func acceptConcurrently(t *testing.T, env *fntest.Env, rideID string, drivers []string) []result {
	t.Helper()
	out := make([]result, len(drivers))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, d := range drivers {
		wg.Go(func() {
			<-start
			status, body := env.AcceptRide(t, rideID, d)
			out[i] = result{driver: d, status: status}
			if status != http.StatusOK {
				out[i].reason = fntest.ErrorOf(t, body).Reason
			}
		})
	}
	close(start)
	wg.Wait()
	return out
}

func checkOneAcceptedRide(t *testing.T, env *fntest.Env, rideID, winner string) {
	t.Helper()
	var status, driver string
	if err := env.D.DB.Pool.QueryRow(context.Background(), `SELECT status, coalesce(driver_id, '') FROM rides WHERE id = $1`, rideID).Scan(&status, &driver); err != nil {
		t.Fatal(err)
	}
	if got, want := status+" "+driver, "ACCEPTED "+winner; got != want {
		t.Errorf("ride status and driver = %q, want %q", got, want)
	}
	if got, want := env.Count(t, `SELECT count(*) FROM rides WHERE driver_id IS NOT NULL`), 1; got != want {
		t.Errorf("rides with a driver = %d, want %d", got, want)
	}
	if got, want := env.Count(t, `SELECT count(*) FROM offers WHERE status = 'ACCEPTED'`), 1; got != want {
		t.Errorf("accepted offers = %d, want %d", got, want)
	}
	if got, want := env.Count(t, `SELECT count(*) FROM outbox WHERE type = $1`, events.RideAccepted), 1; got != want {
		t.Errorf("ride.accepted outbox rows = %d, want %d", got, want)
	}
}

func TestTwentyConcurrentAcceptsOfOneRideHaveOneWinner(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	drivers := driverIDs("d", 20)
	rideID, offered := offeredRide(t, env, "r-1", drivers)

	results := acceptConcurrently(t, env, rideID, drivers)
	wins := 0
	for _, r := range results {
		switch {
		case r.status == http.StatusOK:
			wins++
			if got, want := r.driver, offered; got != want {
				t.Errorf("winner = %s, want the offered driver %s", got, want)
			}
		case r.status == http.StatusNotFound && r.driver != offered:
			// Never offered the ride: it does not exist for him.
		default:
			t.Errorf("%s: status = %d, want 200 for the offered driver, 404 for the others", r.driver, r.status)
		}
	}
	if got, want := wins, 1; got != want {
		t.Errorf("200 answers = %d, want %d", got, want)
	}
	checkOneAcceptedRide(t, env, rideID, offered)
}

func TestConcurrentDuplicateAcceptsOfTheWinnerCreateNothingNew(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	drivers := driverIDs("d", 10)
	rideID, offered := offeredRide(t, env, "r-1", drivers)

	var callers []string
	for i := range 10 {
		callers = append(callers, offered, drivers[i])
	}
	results := acceptConcurrently(t, env, rideID, callers)
	for _, r := range results {
		want := http.StatusNotFound // never offered the ride
		if r.driver == offered {
			want = http.StatusOK
		}
		if r.status != want {
			t.Errorf("%s: status = %d, want %d (%s)", r.driver, r.status, want, r.reason)
		}
	}
	checkOneAcceptedRide(t, env, rideID, offered)

	before := env.Snapshot(t)
	if status, body := env.AcceptRide(t, rideID, offered); status != http.StatusOK {
		t.Errorf("repeated accept: %d %v, want 200", status, body)
	}
	if diff := before.Diff(env.Snapshot(t)); diff != "" {
		t.Errorf("repeated accept wrote something: %s", diff)
	}
}

func TestADriverWithAnActiveRideIsNeverOfferedAnother(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	rideID, driver := offeredRide(t, env, "r-1", []string{"d-1"})
	if status, body := env.AcceptRide(t, rideID, driver); status != http.StatusOK {
		t.Fatalf("accept: %d %v", status, body)
	}
	for _, step := range []string{"accepted", "started"} {
		t.Run(step, func(t *testing.T) {
			if step == "started" {
				if status, body := env.RideAction(t, rideID, "start", fntest.JSON{"driver_id": driver}); status != http.StatusOK {
					t.Fatalf("start: %d %v", status, body)
				}
			}
			body := env.Ping(t, driver, fntest.Offset(pickup, 60, 0)) // he asks to be available
			if got := body["status"]; got == "available" {
				t.Errorf("status after ping = %v, want navigating or busy", got)
			}
			if env.GeoPos(t, driver) != nil {
				t.Errorf("a driver with an active ride is in the available set")
			}
			other := env.CreateRide(t, "r-"+step, pickup, dropoff)
			if got, want := env.MatchRide(t, other), "no_driver"; got != want {
				t.Errorf("match of another ride = %q, want %q", got, want)
			}
			if got, want := env.Count(t, `SELECT count(*) FROM offers WHERE ride_id = $1`, other), 0; got != want {
				t.Errorf("offers for the other ride = %d, want %d", got, want)
			}
		})
	}
}

func TestTheDatabaseRejectsASecondActiveRideForADriver(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	rideID, driver := offeredRide(t, env, "r-1", []string{"d-1"})
	if status, body := env.AcceptRide(t, rideID, driver); status != http.StatusOK {
		t.Fatalf("accept: %d %v", status, body)
	}
	second := env.CreateRide(t, "r-2", pickup, dropoff)
	for _, status := range []string{"ACCEPTED", "IN_PROGRESS"} {
		_, err := env.D.DB.Pool.Exec(context.Background(),
			`UPDATE rides SET status = $2, driver_id = $3 WHERE id = $1`, second, status, driver)
		if !pgstore.IsUniqueViolation(err, "rides_one_active_per_driver") {
			t.Errorf("raw UPDATE of a second ride to %s: err = %v, want a unique violation of rides_one_active_per_driver", status, err)
		}
	}
}

// PostgreSQL is the source of truth: an offer lock lost in Redis (deleted, a Redis restart) does not
// take away an offer whose window is still open there.
func TestAcceptWithTheLockLostButTheWindowOpenSucceeds(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	rideID, driver := offeredRide(t, env, "r-1", []string{"d-1"})
	if err := env.D.Redis.Client().Del(context.Background(), env.Key("offer:"+driver)).Err(); err != nil {
		t.Fatal(err)
	}
	if status, body := env.AcceptRide(t, rideID, driver); status != http.StatusOK {
		t.Fatalf("accept: status = %d, want 200 (%v)", status, body)
	}
	if got, want := env.GetRide(t, rideID)["status"], "ACCEPTED"; got != want {
		t.Errorf("ride status = %v, want %v", got, want)
	}
	if got, want := env.DriverField(t, driver, "ride"), rideID; got != want {
		t.Errorf("Redis ride of %s = %q, want %q", driver, got, want)
	}
}

func TestAcceptAfterTheOfferWindowIsOfferExpired(t *testing.T) {
	t.Parallel()
	check := func(t *testing.T, env *fntest.Env, rideID, driver string) {
		t.Helper()
		status, body := env.AcceptRide(t, rideID, driver)
		if got, want := status, http.StatusConflict; got != want {
			t.Fatalf("status = %d, want %d (%v)", got, want, body)
		}
		if got, want := fntest.ErrorOf(t, body).Reason, dispatch.ReasonOfferExpired; got != want {
			t.Errorf("reason = %q, want %q", got, want)
		}
		if got, want := env.GetRide(t, rideID)["status"], "REQUESTED"; got != want {
			t.Errorf("ride status = %v, want %v", got, want)
		}
		if got, want := env.Count(t, `SELECT count(*) FROM outbox WHERE type = $1`, events.RideAccepted), 0; got != want {
			t.Errorf("ride.accepted outbox rows = %d, want %d", got, want)
		}
	}

	t.Run("offer window passed", func(t *testing.T) {
		t.Parallel()
		env := fntest.NewEnv(t, func(c *config.Config) { c.OfferWindow = time.Second })
		rideID, driver := offeredRide(t, env, "r-1", []string{"d-1"})
		fntest.Eventually(t, 10*time.Second, "offer lock to expire", func() bool {
			n, err := env.D.Redis.Client().Exists(context.Background(), env.Key("offer:"+driver)).Result()
			return err == nil && n == 0
		})
		check(t, env, rideID, driver)
	})
}

func TestAcceptRejects(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	rideID, driver := offeredRide(t, env, "r-1", []string{"d-1", "d-2"})
	other := "d-2"
	if driver == other {
		other = "d-1"
	}
	tests := []struct {
		name       string
		body       any
		wantStatus int
		wantField  string
		wantReason string
	}{
		{"a driver without an offer", fntest.JSON{"ride_id": rideID, "driver_id": other}, 404, "", ""},
		{"an unknown ride", fntest.JSON{"ride_id": "00000000-0000-4000-8000-000000000000", "driver_id": driver}, 404, "", ""},
		{"a ride id that is not a uuid", fntest.JSON{"ride_id": "nope", "driver_id": driver}, 400, "ride_id", ""},
		{"a ride id with NUL", fntest.JSON{"ride_id": rideID + "\x00", "driver_id": driver}, 400, "ride_id", ""},
		{"an upper-case ride id", fntest.JSON{"ride_id": strings.ToUpper(rideID), "driver_id": driver}, 400, "ride_id", ""},
		{"a driver id with a hash tag", fntest.JSON{"ride_id": rideID, "driver_id": "{d-1}"}, 400, "driver_id", ""},
		{"a driver id with NUL", fntest.JSON{"ride_id": rideID, "driver_id": "d\x001"}, 400, "driver_id", ""},
		{"another driver's id", fntest.JSON{"ride_id": rideID, "driver_id": "d-3"}, 403, "driver_id", ""},
		{"an empty ride id", fntest.JSON{"ride_id": "", "driver_id": driver}, 400, "ride_id", ""},
		{"an unknown field", `{"ride_id": "` + rideID + `", "driver_id": "d-1", "x": 1}`, 400, "x", ""},
		{"a number for the driver id", `{"ride_id": "` + rideID + `", "driver_id": 7}`, 400, "driver_id", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := env.Snapshot(t)
			// As the driver the body names when that is a valid id, else as the offered driver.
			as := driver
			if m, ok := tc.body.(fntest.JSON); ok {
				if d, _ := m["driver_id"].(string); d != "" && d != "d-3" && dispatch.ValidateID("driver_id", d) == nil {
					as = d
				}
			}
			status, body := fntest.Do(t, env.Accept, http.MethodPost, "/", tc.body, env.As(auth.RoleDriver, as))
			if got, want := status, tc.wantStatus; got != want {
				t.Fatalf("status = %d, want %d (%v)", got, want, body)
			}
			e := fntest.ErrorOf(t, body)
			if got, want := e.Field, tc.wantField; got != want {
				t.Errorf("field = %q, want %q", got, want)
			}
			if got, want := e.Reason, tc.wantReason; got != want {
				t.Errorf("reason = %q, want %q", got, want)
			}
			if diff := before.Diff(env.Snapshot(t)); diff != "" {
				t.Errorf("a rejected accept wrote something: %s", diff)
			}
		})
	}
}
