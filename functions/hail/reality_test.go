package function_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/flagdown/flagdown/internal/testkit/fntest"
	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/dispatch"
)

// Places of the JFK → Brooklyn attack (issue 19): a driver whose last ping was at JFK presses hail
// with a position next to a rider waiting 20 km away in Brooklyn.
var (
	jfk      = dispatch.Point{Lat: 40.6413, Lng: -73.7781}
	brooklyn = dispatch.Point{Lat: 40.6782, Lng: -73.9442}
)

// pingAt sends one ping of driver at p stamped at (the device's fix time), as the driver; it fails
// the test unless the answer is 200 and the ping was applied.
func pingAt(t *testing.T, env *fntest.Env, driver string, p dispatch.Point, at time.Time) {
	t.Helper()
	status, body := fntest.Do(t, env.Location, http.MethodPost, "/", fntest.JSON{
		"lat": p.Lat, "lng": p.Lng, "status": "available", "ts": at.UTC().Format(time.RFC3339Nano),
	}, env.As(auth.RoleDriver, driver))
	if status != http.StatusOK || body["applied"] != true {
		t.Fatalf("ping of %s: %d %v, want 200 applied", driver, status, body)
	}
}

// TestDriversPressIsBoundToHisLastPing: the JFK → Brooklyn attack is refused with
// hail_far_from_last_ping and takes nothing (the rider keeps waiting, no ride); a driver whose last
// ping is where he presses pairs with her.
func TestDriversPressIsBoundToHisLastPing(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	env.Ping(t, "d-jfk", jfk)
	status, body := riderHail(t, env, "r-1", brooklyn, "")
	wantStatus(t, "rider waits in Brooklyn", status, body, http.StatusAccepted)
	before := env.Count(t, `SELECT count(*) FROM rides`)
	status, body = driverHail(t, env, "d-jfk", fntest.Offset(brooklyn, 20, 0), "")
	e := wantConflict(t, "driver last seen at JFK presses in Brooklyn", status, body, "hail_far_from_last_ping")
	if e.Field != "lat" {
		t.Errorf("field = %q, want lat (%s)", e.Field, e.Message)
	}
	if _, leaked := body["rider_id"]; leaked {
		t.Errorf("refused press answers a rider: %v", body)
	}
	if got := env.Count(t, `SELECT count(*) FROM rides`); got != before {
		t.Errorf("rides = %d, want %d", got, before)
	}
	if !waiting(t, env, dispatch.HailRider, "r-1") {
		t.Errorf("the refused press took the rider's entry")
	}
	// Allowed: a driver whose last ping is at the corner where he presses.
	env.Ping(t, "d-bk", fntest.Offset(brooklyn, 30, 0))
	status, body = driverHail(t, env, "d-bk", fntest.Offset(brooklyn, 20, 0), "")
	wantStatus(t, "driver pinging in Brooklyn presses there", status, body, http.StatusCreated)
	checkPaired(t, env, body, "r-1", "d-bk")
}

// TestDriversPressNeedsAFreshPing: a driver whose last accepted ping is older than a stationary
// client's ping interval (15 s) plus slack is refused with hail_last_ping_stale; a fresh ping hails.
func TestDriversPressNeedsAFreshPing(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	pingAt(t, env, "d-old", corner, time.Now().Add(-time.Minute))
	status, body := driverHail(t, env, "d-old", corner, "")
	wantConflict(t, "driver whose last ping is a minute old", status, body, "hail_last_ping_stale")
	if waiting(t, env, dispatch.HailDriver, "d-old") {
		t.Errorf("a refused press was entered")
	}
	pingAt(t, env, "d-old", corner, time.Now())
	status, body = driverHail(t, env, "d-old", corner, "")
	wantStatus(t, "the same driver after a fresh ping", status, body, http.StatusAccepted)
}

// TestDriversPressAfterTheSendRulesQuietStretch: a stationary driver's app sends nothing for 15 s
// under the seed's send rule (16 s on a 4 s tick, and a second more on the way): his press then
// is fresh enough for the default FLAGDOWN_HAIL_PING_MAX_AGE (25 s).
func TestDriversPressAfterTheSendRulesQuietStretch(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	pingAt(t, env, "d-quiet", corner, time.Now().Add(-17*time.Second))
	status, body := driverHail(t, env, "d-quiet", fntest.Offset(corner, 10, 0), "")
	wantStatus(t, "driver whose last ping is 17 s old", status, body, http.StatusAccepted)
}

// TestDriversPressGoesThroughTheGPSJumpRule: the press is a move from the last ping, judged by the
// pings' GPS-jump rule (FLAGDOWN_MAX_SPEED_MPS × elapsed + noise): 200 m at 1 m/s within seconds is
// refused with hail_gps_jump, though it lies within the hail radius.
func TestDriversPressGoesThroughTheGPSJumpRule(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, func(c *config.Config) { c.MaxSpeedMPS = 1 })
	env.Ping(t, "d-1", corner)
	status, body := driverHail(t, env, "d-1", fntest.Offset(corner, 200, 0), "")
	wantConflict(t, "press 200 m from a ping of a second ago", status, body, "hail_gps_jump")
	status, body = driverHail(t, env, "d-1", fntest.Offset(corner, 10, 0), "")
	wantStatus(t, "press 10 m from the ping", status, body, http.StatusAccepted)
}

// TestRidersPressIsPlausibilityChecked: a rider pairs only with a driver whose last ping is within
// the hail radius (plus GPS slack) of her, whatever his press said; and her own presses go through
// the GPS-jump rule (a press at JFK seconds after one in Midtown is refused with hail_gps_jump).
func TestRidersPressIsPlausibilityChecked(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, func(c *config.Config) { c.MaxSpeedMPS = 1000 })
	env.Ping(t, "d-1", corner)
	status, body := driverHail(t, env, "d-1", corner, "")
	wantStatus(t, "driver waits at the corner", status, body, http.StatusAccepted)
	// He drives off 2 km (a plausible ping at this test's maximum speed) while his press waits.
	pingAt(t, env, "d-1", fntest.Offset(corner, 2000, 0), time.Now().Add(5*time.Second))
	status, body = riderHail(t, env, "r-1", corner, "")
	wantStatus(t, "rider at the corner the driver left", status, body, http.StatusAccepted)
	if got := env.Count(t, `SELECT count(*) FROM rides`); got != 0 {
		t.Errorf("rides = %d, want 0: the rider paired with a driver 2 km away", got)
	}

	env2 := fntest.NewEnv(t, nil)
	status, body = riderHail(t, env2, "r-2", corner, "")
	wantStatus(t, "rider presses in Midtown", status, body, http.StatusAccepted)
	status, body = riderHail(t, env2, "r-2", jfk, "")
	wantConflict(t, "the same rider presses at JFK at once", status, body, "hail_gps_jump")
}

// TestHailCodesResistGuessing: a code has at least 4 characters, and a presser who typed wrong codes
// (a code none of the coded counterparts near him carries) 3 times is locked out (429
// hail_code_tries), even with the right code; another rider with the right code pairs.
func TestHailCodesResistGuessing(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	env.Ping(t, "d-1", corner)
	status, body := riderHail(t, env, "r-weak", fntest.Offset(corner, 0, 2000), "K7")
	if status != http.StatusBadRequest || fntest.ErrorOf(t, body).Field != "code" {
		t.Errorf("a 2-character code: %d %v, want 400 naming code", status, body)
	}
	status, body = driverHail(t, env, "d-1", corner, "AB12")
	wantStatus(t, "driver waits with a code", status, body, http.StatusAccepted)
	for _, guess := range []string{"ZZ01", "ZZ02", "ZZ03"} {
		status, body = riderHail(t, env, "r-guess", fntest.Offset(corner, 10, 0), guess)
		wantStatus(t, "guess "+guess, status, body, http.StatusAccepted)
	}
	status, body = riderHail(t, env, "r-guess", fntest.Offset(corner, 10, 0), "AB12")
	if status != http.StatusTooManyRequests || fntest.ErrorOf(t, body).Reason != "hail_code_tries" {
		t.Fatalf("the right code after 3 wrong ones: %d %v, want 429 hail_code_tries", status, body)
	}
	if got := env.Count(t, `SELECT count(*) FROM rides`); got != 0 {
		t.Errorf("rides = %d, want 0", got)
	}
	status, body = riderHail(t, env, "r-true", fntest.Offset(corner, 10, 0), "AB12")
	wantStatus(t, "the true rider", status, body, http.StatusCreated)
	checkPaired(t, env, body, "r-true", "d-1")
}

// TestAmbiguousAnswerIsNoOracle: a press refused as ambiguous does not say how many counterparts
// matched.
func TestAmbiguousAnswerIsNoOracle(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	env.Ping(t, "d-1", corner)
	for _, r := range []string{"r-1", "r-2", "r-3"} {
		status, body := riderHail(t, env, r, fntest.Offset(corner, 20, 0), "")
		wantStatus(t, "hail of "+r, status, body, http.StatusAccepted)
	}
	status, body := driverHail(t, env, "d-1", corner, "")
	e := wantConflict(t, "driver hail", status, body, dispatch.ReasonHailAmbiguous)
	if _, ok := e.Details["candidates"]; ok {
		t.Errorf("details = %v: the answer counts the riders who matched", e.Details)
	}
}
