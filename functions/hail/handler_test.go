package function_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/internal/testkit/fntest"
	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/invariants"
	"github.com/flagdown/flagdown/shared/metrics"
)

var (
	corner  = dispatch.Point{Lat: 40.7549, Lng: -73.9840}
	dropoff = dispatch.Point{Lat: 40.7306, Lng: -73.9866}
)

// riderHail presses hail as rider at p with code.
func riderHail(t *testing.T, env *fntest.Env, rider string, p dispatch.Point, code string) (int, fntest.JSON) {
	t.Helper()
	return fntest.Do(t, env.Hail, http.MethodPost, "/", fntest.JSON{"lat": p.Lat, "lng": p.Lng, "code": code, "dropoff": dropoff},
		env.As(auth.RoleRider, rider))
}

// driverHail presses hail as driver at p with code.
func driverHail(t *testing.T, env *fntest.Env, driver string, p dispatch.Point, code string) (int, fntest.JSON) {
	t.Helper()
	return fntest.Do(t, env.Hail, http.MethodPost, "/", fntest.JSON{"lat": p.Lat, "lng": p.Lng, "code": code},
		env.As(auth.RoleDriver, driver))
}

func wantStatus(t *testing.T, what string, got int, body fntest.JSON, want int) {
	t.Helper()
	if got != want {
		t.Fatalf("%s: status = %d, want %d: %v", what, got, want, body)
	}
}

func wantConflict(t *testing.T, what string, status int, body fntest.JSON, reason string) fntest.APIError {
	t.Helper()
	wantStatus(t, what, status, body, http.StatusConflict)
	e := fntest.ErrorOf(t, body)
	if e.Reason != reason {
		t.Fatalf("%s: reason = %q, want %q (%s)", what, e.Reason, reason, e.Message)
	}
	return e
}

// waiting reports whether side's id has a live hail entry.
func waiting(t *testing.T, env *fntest.Env, side dispatch.HailSide, id string) bool {
	t.Helper()
	ok, err := env.D.Redis.HailWaiting(context.Background(), side, id)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// checkInvariants fails t unless every invariant of flagdown verify holds, with no grace (no relay
// runs here: the outbox rows are marked published first).
func checkInvariants(t *testing.T, env *fntest.Env) {
	t.Helper()
	if _, err := env.D.DB.Pool.Exec(context.Background(), `UPDATE outbox SET published_at = now() WHERE published_at IS NULL`); err != nil {
		t.Fatal(err)
	}
	rep, err := invariants.Check(context.Background(), env.D.DB, env.D.Redis, 0)
	if err != nil {
		t.Fatalf("invariants: %v", err)
	}
	for _, inv := range invariants.All {
		if n := rep.Count(inv.Name); n != 0 {
			t.Errorf("invariant %s = %d (%v)", inv.Name, n, rep.Examples(inv.Name))
		}
	}
}

// checkPaired checks that body (a 201) names an ACCEPTED ride of rider with driver, that
// PostgreSQL holds exactly that (origin hail, no offer, one ride.accepted with hail true) and that
// Redis has the driver on the ride, out of the available set; it returns the ride id.
func checkPaired(t *testing.T, env *fntest.Env, body fntest.JSON, rider, driver string) string {
	t.Helper()
	id, _ := body["ride_id"].(string)
	if body["hail"] != "paired" || body["status"] != "ACCEPTED" || body["rider_id"] != rider || body["driver_id"] != driver || id == "" {
		t.Fatalf("paired answer = %v, want an ACCEPTED ride of rider %s with driver %s", body, rider, driver)
	}
	var status, gotDriver, origin string
	if err := env.D.DB.Pool.QueryRow(context.Background(), `SELECT status, driver_id, origin FROM rides WHERE id = $1`, id).
		Scan(&status, &gotDriver, &origin); err != nil {
		t.Fatal(err)
	}
	if got, want := status+" "+gotDriver+" "+origin, "ACCEPTED "+driver+" hail"; got != want {
		t.Errorf("ride row = %q, want %q", got, want)
	}
	if got := env.Count(t, `SELECT count(*) FROM offers WHERE ride_id = $1`, id); got != 0 {
		t.Errorf("offers of a hailed ride = %d, want 0", got)
	}
	if got, want := env.Count(t, `SELECT count(*) FROM outbox WHERE subject = $1 AND type = $2 AND (data->>'hail')::boolean`, id, events.RideAccepted), 1; got != want {
		t.Errorf("ride.accepted (hail) outbox rows = %d, want %d", got, want)
	}
	st, err := env.D.Redis.AssignmentStates(context.Background(), []string{driver})
	if err != nil {
		t.Fatal(err)
	}
	if st[0].RideID != id || st[0].InAvailable || st[0].Status != dispatch.DriverNavigating {
		t.Errorf("driver in Redis = %+v, want on ride %s, navigating, out of the available set", st[0], id)
	}
	if got := env.GetRide(t, id)["status"]; got != "ACCEPTED" {
		t.Errorf("GET ride status = %v, want ACCEPTED", got)
	}
	return id
}

func TestRiderWaitsThenDriverPairs(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	env.Ping(t, "d-1", corner)
	status, body := riderHail(t, env, "r-1", fntest.Offset(corner, 40, 30), "")
	wantStatus(t, "rider hail", status, body, http.StatusAccepted)
	if body["hail"] != "waiting" || body["expires_in_s"] != env.D.Config.HailWindow.Seconds() {
		t.Errorf("waiting answer = %v, want hail waiting, expires_in_s %v", body, env.D.Config.HailWindow.Seconds())
	}
	if _, err := time.Parse(time.RFC3339Nano, body["expires_at"].(string)); err != nil {
		t.Errorf("expires_at = %v: %v", body["expires_at"], err)
	}
	status, body = driverHail(t, env, "d-1", corner, "")
	wantStatus(t, "driver hail", status, body, http.StatusCreated)
	checkPaired(t, env, body, "r-1", "d-1")
	if d, _ := body["distance_m"].(float64); d < 45 || d > 55 {
		t.Errorf("distance_m = %v, want about 50", body["distance_m"])
	}
	if waiting(t, env, dispatch.HailRider, "r-1") || waiting(t, env, dispatch.HailDriver, "d-1") {
		t.Errorf("an entry still waits after the pairing")
	}
	checkInvariants(t, env)
}

func TestDriverWaitsThenRiderPairs(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	env.Ping(t, "d-1", corner)
	status, body := driverHail(t, env, "d-1", corner, "k7k7")
	wantStatus(t, "driver hail", status, body, http.StatusAccepted)
	status, body = riderHail(t, env, "r-1", fntest.Offset(corner, -200, 100), "K7K7")
	wantStatus(t, "rider hail", status, body, http.StatusCreated)
	id := checkPaired(t, env, body, "r-1", "d-1")
	// The pickup is the rider's press, the fare is estimated to his dropoff.
	var lat float64
	var fare int64
	if err := env.D.DB.Pool.QueryRow(context.Background(), `SELECT pickup_lat, fare_estimate_cents FROM rides WHERE id = $1`, id).Scan(&lat, &fare); err != nil {
		t.Fatal(err)
	}
	if want := fntest.Offset(corner, -200, 100).Lat; !fntest.Near(dispatch.Point{Lat: lat, Lng: 0}, dispatch.Point{Lat: want, Lng: 0}, 1e-6) || fare <= 0 {
		t.Errorf("pickup lat %v fare %d, want the rider's press %v and a fare", lat, fare, want)
	}
	// Both are now taken: a second press of either is refused, naming the ride.
	status, body = riderHail(t, env, "r-1", corner, "")
	if e := wantConflict(t, "rider hails again", status, body, dispatch.ReasonRiderHasOpenRide); e.Details["ride_id"] != id {
		t.Errorf("details = %v, want ride_id %s", e.Details, id)
	}
	status, body = driverHail(t, env, "d-1", corner, "")
	wantConflict(t, "driver hails again", status, body, dispatch.ReasonDriverBusy)
	checkInvariants(t, env)
}

func TestNoPairing(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name               string
		riderAt            dispatch.Point
		riderCode, drvCode string
	}{
		{"TooFar", fntest.Offset(corner, 400, 0), "", ""},
		{"CodeMismatch", corner, "AB12", "AB13"},
		{"CodeOnRiderOnly", corner, "AB12", ""},
		{"CodeOnDriverOnly", corner, "", "AB12"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			env := fntest.NewEnv(t, nil)
			env.Ping(t, "d-1", corner)
			status, body := riderHail(t, env, "r-1", c.riderAt, c.riderCode)
			wantStatus(t, "rider hail", status, body, http.StatusAccepted)
			status, body = driverHail(t, env, "d-1", corner, c.drvCode)
			wantStatus(t, "driver hail", status, body, http.StatusAccepted)
			if got := env.Count(t, `SELECT count(*) FROM rides`); got != 0 {
				t.Errorf("rides = %d, want 0", got)
			}
			if !waiting(t, env, dispatch.HailRider, "r-1") || !waiting(t, env, dispatch.HailDriver, "d-1") {
				t.Errorf("both presses should wait")
			}
			if p := env.GeoPos(t, "d-1"); p == nil {
				t.Errorf("a waiting driver left the available set")
			}
			checkInvariants(t, env)
		})
	}
}

func TestTooLateDoesNotPairAndEntriesExpireByThemselves(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, func(c *config.Config) { c.HailWindow = 200 * time.Millisecond })
	env.Ping(t, "d-1", corner)
	status, body := riderHail(t, env, "r-1", corner, "")
	wantStatus(t, "rider hail", status, body, http.StatusAccepted)
	rdb := env.D.Redis.Client()
	keys := []string{env.Key("hail:geo:rider"), env.Key("hail:exp:rider"), env.Key("hail:entry:rider")}
	if n := rdb.Exists(context.Background(), keys...).Val(); n != 3 {
		t.Fatalf("hail keys of riders = %d, want 3 while r-1 waits", n)
	}
	// Nobody touches the entry: Redis's own TTLs remove it (by Redis's clock; no press trims it).
	fntest.Eventually(t, 10*time.Second, "rider hail keys gone", func() bool {
		return rdb.Exists(context.Background(), keys...).Val() == 0
	})
	if waiting(t, env, dispatch.HailRider, "r-1") {
		t.Errorf("r-1 still waits after his window")
	}
	status, body = driverHail(t, env, "d-1", corner, "")
	wantStatus(t, "driver hail after the window", status, body, http.StatusAccepted)
	if got := env.Count(t, `SELECT count(*) FROM rides`); got != 0 {
		t.Errorf("rides = %d, want 0", got)
	}
	checkInvariants(t, env)
}

func TestAmbiguousHailIsRefused(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	env.Ping(t, "d-1", corner)
	for _, r := range []string{"r-1", "r-2"} {
		status, body := riderHail(t, env, r, fntest.Offset(corner, 20, 0), "")
		wantStatus(t, "hail of "+r, status, body, http.StatusAccepted)
	}
	status, body := driverHail(t, env, "d-1", corner, "")
	wantConflict(t, "driver hail", status, body, dispatch.ReasonHailAmbiguous)
	if got := env.Count(t, `SELECT count(*) FROM rides`); got != 0 {
		t.Errorf("rides = %d, want 0", got)
	}
	if !waiting(t, env, dispatch.HailRider, "r-1") || !waiting(t, env, dispatch.HailRider, "r-2") || waiting(t, env, dispatch.HailDriver, "d-1") {
		t.Errorf("the riders should still wait and the refused driver not")
	}
	if env.GeoPos(t, "d-1") == nil {
		t.Errorf("a refused driver left the available set")
	}
	// With a code on both phones the right pair is found.
	status, body = riderHail(t, env, "r-2", fntest.Offset(corner, 20, 0), "Q9Q9")
	wantStatus(t, "r-2 again with a code", status, body, http.StatusAccepted)
	status, body = driverHail(t, env, "d-1", corner, "q9q9")
	wantStatus(t, "driver with the code", status, body, http.StatusCreated)
	checkPaired(t, env, body, "r-2", "d-1")
	if !waiting(t, env, dispatch.HailRider, "r-1") {
		t.Errorf("r-1 should still wait")
	}
	checkInvariants(t, env)
}

// TestRidersRaceForOneDriver: one driver waits and eight riders press at the same moment: exactly
// one ride, one 201, the seven others left waiting; every invariant holds.
func TestRidersRaceForOneDriver(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	env.Ping(t, "d-1", corner)
	status, body := driverHail(t, env, "d-1", corner, "")
	wantStatus(t, "driver hail", status, body, http.StatusAccepted)
	const n = 8
	statuses := make([]int, n)
	bodies := make([]fntest.JSON, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			statuses[i], bodies[i] = riderHail(t, env, "r-"+strconv.Itoa(i), fntest.Offset(corner, float64(10*i), 0), "")
		})
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, s := range statuses {
		switch s {
		case http.StatusCreated:
			if winner >= 0 {
				t.Errorf("riders %d and %d both paired", winner, i)
			}
			winner = i
		case http.StatusAccepted:
		default:
			t.Errorf("rider %d: status %d: %v", i, s, bodies[i])
		}
	}
	if winner < 0 {
		t.Fatalf("no rider paired: %v", statuses)
	}
	checkPaired(t, env, bodies[winner], "r-"+strconv.Itoa(winner), "d-1")
	if got := env.Count(t, `SELECT count(*) FROM rides`); got != 1 {
		t.Errorf("rides = %d, want 1", got)
	}
	checkInvariants(t, env)
}

// TestDriverAndTwoRidersPressTogether: a driver and two riders press at the same moment, for
// several rounds: whatever the order Redis runs them in, there is at most one ride per round (the
// driver's), never two, and every invariant holds.
func TestDriverAndTwoRidersPressTogether(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	for round := range 6 {
		driver := "d-" + strconv.Itoa(round)
		at := fntest.Offset(corner, float64(1000*round), 0)
		env.Ping(t, driver, at)
		riders := []string{"ra-" + strconv.Itoa(round), "rb-" + strconv.Itoa(round)}
		statuses := make([]int, 3)
		start := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() { <-start; statuses[0], _ = driverHail(t, env, driver, at, "") })
		for i, r := range riders {
			wg.Go(func() { <-start; statuses[i+1], _ = riderHail(t, env, r, at, "") })
		}
		close(start)
		wg.Wait()
		created := 0
		for _, s := range statuses {
			switch s {
			case http.StatusCreated:
				created++
			case http.StatusAccepted, http.StatusConflict: // waiting, or refused as ambiguous
			default:
				t.Errorf("round %d: status %d", round, s)
			}
		}
		rides := env.Count(t, `SELECT count(*) FROM rides WHERE driver_id = $1`, driver)
		if rides > 1 || created != rides {
			t.Errorf("round %d: %d rides of %s and %d answers 201 (%v), want at most one, equal", round, rides, driver, created, statuses)
		}
	}
	checkInvariants(t, env)
}

func TestDriverWithRideOrOfferCannotHail(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	env.Ping(t, "d-1", fntest.Offset(corner, 50, 0))
	rideID := env.CreateRide(t, "r-req", corner, dropoff)
	if got := env.MatchRide(t, rideID); got != "offered" {
		t.Fatalf("match = %q, want offered", got)
	}
	// Offered, not accepted yet: his live offer keeps him from hailing.
	status, body := driverHail(t, env, "d-1", corner, "")
	if e := wantConflict(t, "offered driver hails", status, body, dispatch.ReasonHailDriverUnavailable); e.Details["driver_state"] != "offer" {
		t.Errorf("details = %v, want driver_state offer", e.Details)
	}
	if status, body := env.AcceptRide(t, rideID, "d-1"); status != http.StatusOK {
		t.Fatalf("accept: %d %v", status, body)
	}
	riderHail(t, env, "r-1", corner, "")
	status, body = driverHail(t, env, "d-1", corner, "")
	if e := wantConflict(t, "driver on a ride hails", status, body, dispatch.ReasonDriverBusy); e.Details["ride_id"] != rideID {
		t.Errorf("details = %v, want ride_id %s", e.Details, rideID)
	}
	// A driver who is not online cannot hail either.
	status, body = driverHail(t, env, "d-offline", corner, "")
	if e := wantConflict(t, "offline driver hails", status, body, dispatch.ReasonHailDriverUnavailable); e.Details["driver_state"] != "offline" {
		t.Errorf("details = %v, want driver_state offline", e.Details)
	}
	if got := env.Count(t, `SELECT count(*) FROM rides`); got != 1 {
		t.Errorf("rides = %d, want 1", got)
	}
	if !waiting(t, env, dispatch.HailRider, "r-1") {
		t.Errorf("r-1 should still wait")
	}
	checkInvariants(t, env)
}

func TestRiderWithOpenRideCannotHail(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	env.Ping(t, "d-1", corner)
	rideID := env.CreateRide(t, "r-1", corner, dropoff)
	status, body := riderHail(t, env, "r-1", corner, "")
	if e := wantConflict(t, "rider with a ride hails", status, body, dispatch.ReasonRiderHasOpenRide); e.Details["ride_id"] != rideID {
		t.Errorf("details = %v, want ride_id %s", e.Details, rideID)
	}
	if waiting(t, env, dispatch.HailRider, "r-1") {
		t.Errorf("a refused rider was entered")
	}
	// The driver's press finds nobody and waits.
	status, body = driverHail(t, env, "d-1", corner, "")
	wantStatus(t, "driver hail", status, body, http.StatusAccepted)
	if got := env.Count(t, `SELECT count(*) FROM rides`); got != 1 {
		t.Errorf("rides = %d, want 1", got)
	}
}

// TestPairingRefusedInPostgres: a rider waits, then opens a ride with order-create; the driver's
// press takes his entry and PostgreSQL refuses the pairing (the rider's open ride): the rider's
// entry is not restored, the driver's press is judged again and waits, and he stays available.
func TestPairingRefusedInPostgres(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	env.Ping(t, "d-1", corner)
	env.Ping(t, "d-far", fntest.Offset(corner, 0, 3000))
	status, body := riderHail(t, env, "r-1", corner, "")
	wantStatus(t, "rider hail", status, body, http.StatusAccepted)
	env.CreateRide(t, "r-1", corner, dropoff)
	status, body = driverHail(t, env, "d-1", corner, "")
	wantStatus(t, "driver pairs with a rider who has an open ride", status, body, http.StatusAccepted)
	if env.GeoPos(t, "d-1") == nil {
		t.Errorf("d-1 should be back in the available set")
	}
	if !waiting(t, env, dispatch.HailDriver, "d-1") {
		t.Errorf("d-1's press should wait")
	}
	if waiting(t, env, dispatch.HailRider, "r-1") {
		t.Errorf("the rider's entry was restored although his open ride refused it")
	}
	if got := env.Count(t, `SELECT count(*) FROM rides WHERE driver_id IS NOT NULL`); got != 0 {
		t.Errorf("rides with a driver = %d, want 0", got)
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	rider, driver := env.As(auth.RoleRider, "r-1"), env.As(auth.RoleDriver, "d-1")
	cases := []struct {
		name    string
		headers map[string]string
		body    any
		status  int
		field   string
	}{
		{"NoLat", rider, fntest.JSON{"lng": corner.Lng, "dropoff": dropoff}, 400, "lat"},
		{"NoLng", driver, fntest.JSON{"lat": corner.Lat}, 400, "lng"},
		{"OutsideArea", driver, fntest.JSON{"lat": 48.85, "lng": 2.35}, 400, "lat"},
		{"RiderWithoutDropoff", rider, fntest.JSON{"lat": corner.Lat, "lng": corner.Lng}, 400, "dropoff"},
		{"DropoffWithoutLng", rider, fntest.JSON{"lat": corner.Lat, "lng": corner.Lng, "dropoff": fntest.JSON{"lat": 40.7}}, 400, "dropoff.lng"},
		{"DriverWithDropoff", driver, fntest.JSON{"lat": corner.Lat, "lng": corner.Lng, "dropoff": dropoff}, 400, "dropoff"},
		{"CodeTooShort", driver, fntest.JSON{"lat": corner.Lat, "lng": corner.Lng, "code": "123"}, 400, "code"},
		{"CodeTooLong", driver, fntest.JSON{"lat": corner.Lat, "lng": corner.Lng, "code": "123456789"}, 400, "code"},
		{"CodeNotAlphanumeric", driver, fntest.JSON{"lat": corner.Lat, "lng": corner.Lng, "code": "12-3"}, 400, "code"},
		{"UnknownField", driver, fntest.JSON{"lat": corner.Lat, "lng": corner.Lng, "radius": 5}, 400, "radius"},
		{"AsAnotherRider", rider, fntest.JSON{"rider_id": "r-2", "lat": corner.Lat, "lng": corner.Lng, "dropoff": dropoff}, 403, "rider_id"},
		{"AsAnotherDriver", driver, fntest.JSON{"driver_id": "d-2", "lat": corner.Lat, "lng": corner.Lng}, 403, "driver_id"},
		{"RiderNamingADriver", rider, fntest.JSON{"driver_id": "d-1", "lat": corner.Lat, "lng": corner.Lng, "dropoff": dropoff}, 400, "driver_id"},
		{"OpsToken", env.Ops(), fntest.JSON{"lat": corner.Lat, "lng": corner.Lng}, 403, ""},
		{"NoToken", nil, fntest.JSON{"lat": corner.Lat, "lng": corner.Lng}, 401, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, body := fntest.Do(t, env.Hail, http.MethodPost, "/", c.body, c.headers)
			if status != c.status {
				t.Fatalf("status = %d, want %d: %v", status, c.status, body)
			}
			if e := fntest.ErrorOf(t, body); c.field != "" && e.Field != c.field {
				t.Errorf("field = %q, want %q (%s)", e.Field, c.field, e.Message)
			}
		})
	}
	if got := env.D.Redis.Client().Exists(context.Background(), env.Key("hail:geo:rider"), env.Key("hail:geo:driver")).Val(); got != 0 {
		t.Errorf("hail keys after bad input = %d, want 0", got)
	}
	if status, _ := fntest.Do(t, env.Hail, http.MethodGet, "/", nil, driver); status != http.StatusMethodNotAllowed {
		t.Errorf("GET: status %d, want 405", status)
	}
}

// TestHailPressesSpendTheCallersBudget: a driver's press spends one of his pings, a rider's one of
// his ride requests; past the budget the press is 429 naming the caller and enters nothing.
func TestHailPressesSpendTheCallersBudget(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, func(c *config.Config) { c.RatePingsPerMin, c.RateRidesPerMin = 3, 2 })
	env.Ping(t, "d-1", corner) // one ping of three
	waited := testutil.ToFloat64(metrics.HailPresses.WithLabelValues("driver", "waiting"))
	for i := range 2 {
		status, body := driverHail(t, env, "d-1", corner, "")
		wantStatus(t, fmt.Sprintf("driver press %d", i+1), status, body, http.StatusAccepted)
	}
	if got := testutil.ToFloat64(metrics.HailPresses.WithLabelValues("driver", "waiting")); got < waited+2 {
		t.Errorf("flagdown_hail_presses_total{side=driver,result=waiting} went from %v to %v, want +2 at least", waited, got)
	}
	status, body := driverHail(t, env, "d-1", corner, "")
	if status != http.StatusTooManyRequests || fntest.ErrorOf(t, body).Field != "driver_id" {
		t.Fatalf("driver press past his ping budget: HTTP %d %v, want 429 naming driver_id", status, body)
	}
	env.Ping(t, "d-2", fntest.Offset(corner, 0, 1500)) // far from the riders' presses
	for i := range 2 {
		status, body := riderHail(t, env, "r-1", fntest.Offset(corner, 0, 3000), "")
		wantStatus(t, fmt.Sprintf("rider press %d", i+1), status, body, http.StatusAccepted)
	}
	status, body = riderHail(t, env, "r-1", fntest.Offset(corner, 0, 3000), "")
	if status != http.StatusTooManyRequests || fntest.ErrorOf(t, body).Field != "rider_id" {
		t.Fatalf("rider press past his ride budget: HTTP %d %v, want 429 naming rider_id", status, body)
	}
}
