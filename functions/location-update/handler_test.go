package function_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/flagdown/flagdown/internal/testkit/fntest"
	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/dispatch"
)

// midtown is a point in Manhattan, inside the service area.
var midtown = dispatch.Point{Lat: 40.7549, Lng: -73.9840}

func ts(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func TestLocationUpdateRejectsBadInputAndWritesNothing(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, func(c *config.Config) {
		c.MaxBatch = 3
		c.MaxBodyBytes = 1024
	})
	env.Ping(t, "d-base", midtown) // existing state that must stay as it is

	ping := func(lat, lng string) string {
		return fmt.Sprintf(`{"driver_id": "d-1", "lat": %s, "lng": %s, "status": "available"}`, lat, lng)
	}
	good := ping("40.75", "-73.98")
	future := ts(time.Now().Add(time.Hour))
	big := `{"pings": [` + strings.Repeat(good+",", 20) + good + `]}`

	tests := []struct {
		name       string
		body       string
		wantStatus int
		wantCode   string
		wantField  string
		wantRule   string
	}{
		{"lat above 90", ping("90.5", "-73.98"), 400, "invalid_argument", "lat", "between -90 and 90"},
		{"lat below -90", ping("-91", "-73.98"), 400, "invalid_argument", "lat", "between -90 and 90"},
		{"lng above 180", ping("40.75", "180.0001"), 400, "invalid_argument", "lng", "between -180 and 180"},
		{"lng below -180", ping("40.75", "-200"), 400, "invalid_argument", "lng", "between -180 and 180"},
		{"lat beyond the Redis GEO limit north", ping("85.05113", "-73.98"), 400, "invalid_argument", "lat", "85.05112878"},
		{"lat beyond the Redis GEO limit south", ping("-89.9", "-73.98"), 400, "invalid_argument", "lat", "85.05112878"},
		{"NaN literal", ping("NaN", "-73.98"), 400, "invalid_argument", "body", "NaN"},
		{"Infinity literal", ping("40.75", "Infinity"), 400, "invalid_argument", "body", "Infinity"},
		{"negative Infinity literal", ping("-Infinity", "-73.98"), 400, "invalid_argument", "body", "Infinity"},
		{"lat sent as a string", ping(`"40.75"`, "-73.98"), 400, "invalid_argument", "lat", "must be a JSON number"},
		{"lng sent as a string", ping("40.75", `"-73.98"`), 400, "invalid_argument", "lng", "must be a JSON number"},
		{"unknown field", `{"driver_id": "d-1", "lat": 40.75, "lng": -73.98, "altitude": 12}`, 400, "invalid_argument", "altitude", "not a known field"},
		{"trailing bytes after the JSON", good + ` {"x": 1}`, 400, "invalid_argument", "body", "trailing"},
		{"trailing garbage after the JSON", good + `]`, 400, "invalid_argument", "body", "trailing"},
		{"empty body", ``, 400, "invalid_argument", "body", "empty"},
		{"body over the size limit", big, 413, "too_large", "body", "at most 1024 bytes"},
		{"empty batch", `{"pings": []}`, 400, "invalid_argument", "pings", "at least one"},
		{"batch over MaxBatch", `{"pings": [` + good + "," + good + "," + good + "," + good + `]}`, 413, "too_large", "pings", "at most 3"},
		{"empty driver id", `{"driver_id": "", "lat": 40.75, "lng": -73.98}`, 400, "invalid_argument", "driver_id", "is required"},
		{"driver id over 128 bytes", `{"driver_id": "` + strings.Repeat("d", 129) + `", "lat": 40.75, "lng": -73.98}`, 400, "invalid_argument", "driver_id", "at most 128"},
		{"driver id with a space", `{"driver_id": "d 1", "lat": 40.75, "lng": -73.98}`, 400, "invalid_argument", "driver_id", "without spaces"},
		{"ts far in the future", `{"driver_id": "d-1", "lat": 40.75, "lng": -73.98, "ts": "` + future + `"}`, 400, "invalid_argument", "ts", "in the future"},
		{"ts not a time", `{"driver_id": "d-1", "lat": 40.75, "lng": -73.98, "ts": "yesterday"}`, 400, "invalid_argument", "ts", "must be an RFC 3339 time string"},
		{"ts a number", `{"driver_id": "d-1", "lat": 40.75, "lng": -73.98, "ts": 12345}`, 400, "invalid_argument", "ts", "not number"},
		{"a batch ping with ts not a time", `{"pings": [` + good + `, {"driver_id": "d-2", "lat": 40.75, "lng": -73.98, "ts": "soon"}]}`, 400, "invalid_argument", "pings[1].ts", "RFC 3339"},
		{"missing lat", `{"driver_id": "d-1", "lng": -73.98}`, 400, "invalid_argument", "lat", "is required"},
		{"heading above 360", `{"driver_id": "d-1", "lat": 40.75, "lng": -73.98, "heading": 361}`, 400, "invalid_argument", "heading", "between 0 and 360"},
		{"status set by the system", `{"driver_id": "d-1", "lat": 40.75, "lng": -73.98, "status": "busy"}`, 400, "invalid_argument", "status", "offline, available, paused"},
		{"a bad ping in a batch names its index and nothing of the batch is applied",
			`{"pings": [` + good + "," + ping("40.75", "181") + `]}`, 400, "invalid_argument", "pings[1].lng", "between -180 and 180"},
		{"a batch ping with a string number", `{"pings": [` + good + "," + ping(`"1"`, "-73.98") + `]}`, 400, "invalid_argument", "pings[1].lat", "must be a JSON number"},
		{"a batch ping with an unknown field", `{"pings": [{"driver_id": "d-1", "lat": 40.75, "lng": -73.98, "alt": 3}]}`, 400, "invalid_argument", "pings[0].alt", "not a known field"},
		{"a batch ping that is not an object", `{"pings": [` + good + `, 7]}`, 400, "invalid_argument", "pings[1]", "must be a JSON object"},
		{"a batch with an unknown top-level field", `{"pings": [` + good + `], "extra": true}`, 400, "invalid_argument", "extra", "not a known field"},
		{"not an object", `[1, 2]`, 400, "invalid_argument", "body", "JSON object"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := env.Snapshot(t)
			status, body := fntest.Do(t, env.Location, http.MethodPost, "/", tc.body, env.Service())
			if got, want := status, tc.wantStatus; got != want {
				t.Fatalf("status = %d, want %d (%v)", got, want, body)
			}
			e := fntest.ErrorOf(t, body)
			if got, want := e.Code, tc.wantCode; got != want {
				t.Errorf("code = %q, want %q", got, want)
			}
			if got, want := e.Field, tc.wantField; got != want {
				t.Errorf("field = %q, want %q (%s)", got, want, e.Message)
			}
			if !strings.Contains(e.Message, tc.wantField) || !strings.Contains(e.Message, tc.wantRule) {
				t.Errorf("message %q should name the field %q and the rule %q", e.Message, tc.wantField, tc.wantRule)
			}
			if diff := before.Diff(env.Snapshot(t)); diff != "" {
				t.Errorf("a rejected request wrote something: %s", diff)
			}
		})
	}
}

func TestPingCoordinatesKeepLatLngOrderInRedis(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	body := env.Ping(t, "d-nyc", dispatch.Point{Lat: 40.7128, Lng: -74.0060})
	if got, want := body["applied"], true; got != want {
		t.Fatalf("applied = %v, want %v (%v)", got, want, body)
	}
	// GEOPOS answers [longitude, latitude]; go-redis names them.
	pos, err := env.D.Redis.Client().GeoPos(context.Background(), env.Key("geo:available"), "d-nyc").Result()
	if err != nil || len(pos) != 1 || pos[0] == nil {
		t.Fatalf("GEOPOS = %v, %v; want one position", pos, err)
	}
	if got, want := pos[0].Longitude, -74.0060; got < want-1e-5 || got > want+1e-5 {
		t.Errorf("GEOPOS longitude = %v, want ≈ %v", got, want)
	}
	if got, want := pos[0].Latitude, 40.7128; got < want-1e-5 || got > want+1e-5 {
		t.Errorf("GEOPOS latitude = %v, want ≈ %v", got, want)
	}
	raw, err := env.D.Redis.Client().Do(context.Background(), "GEOPOS", env.Key("geo:available"), "d-nyc").Slice()
	if err != nil {
		t.Fatal(err)
	}
	first := fmt.Sprint(raw[0].([]any)[0])
	if !strings.HasPrefix(first, "-74.00") {
		t.Errorf("raw GEOPOS first element = %s, want the longitude -74.00…", first)
	}
}

func TestPingRules(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	t0 := time.Now().Add(-30 * time.Minute)
	send := func(t *testing.T, driver string, p dispatch.Point, at time.Time) fntest.JSON {
		t.Helper()
		status, body := fntest.Do(t, env.Location, http.MethodPost, "/", fntest.JSON{
			"driver_id": driver, "lat": p.Lat, "lng": p.Lng, "ts": ts(at), "status": "available",
		}, env.As(auth.RoleDriver, driver))
		if status != http.StatusOK {
			t.Fatalf("status %d: %v", status, body)
		}
		return body
	}

	t.Run("an older ping is stale and not applied", func(t *testing.T) {
		send(t, "d-stale", midtown, t0)
		moved := fntest.Offset(midtown, 200, 0)
		body := send(t, "d-stale", moved, t0.Add(-10*time.Second))
		if got, want := body["applied"], false; got != want {
			t.Errorf("applied = %v, want %v", got, want)
		}
		if got, want := body["rejected"], "stale"; got != want {
			t.Errorf("rejected = %v, want %v", got, want)
		}
		body = send(t, "d-stale", moved, t0)
		if got, want := body["rejected"], "stale"; got != want {
			t.Errorf("same timestamp: rejected = %v, want %v", got, want)
		}
		if p := env.GeoPos(t, "d-stale"); p == nil || !fntest.Near(*p, midtown, 1e-5) {
			t.Errorf("position = %v, want unchanged %v", p, midtown)
		}
	})

	t.Run("a ping implying a speed above MaxSpeedMPS is a gps jump and the position stays", func(t *testing.T) {
		send(t, "d-jump", midtown, t0)
		far := fntest.Offset(midtown, 10_000, 0) // 10 km in 1 s
		body := send(t, "d-jump", far, t0.Add(time.Second))
		if got, want := body["applied"], false; got != want {
			t.Errorf("applied = %v, want %v", got, want)
		}
		if got, want := body["rejected"], "gps_jump"; got != want {
			t.Errorf("rejected = %v, want %v", got, want)
		}
		if p := env.GeoPos(t, "d-jump"); p == nil || !fntest.Near(*p, midtown, 1e-5) {
			t.Errorf("position = %v, want unchanged %v", p, midtown)
		}
		// The same 10 km twenty minutes later is 8.3 m/s: plausible, applied.
		body = send(t, "d-jump", far, t0.Add(20*time.Minute))
		if got, want := body["applied"], true; got != want {
			t.Errorf("later ping: applied = %v, want %v (%v)", got, want, body)
		}
		if p := env.GeoPos(t, "d-jump"); p == nil || !fntest.Near(*p, far, 1e-5) {
			t.Errorf("position = %v, want %v", p, far)
		}
	})

	t.Run("a batch answers one result per ping in order", func(t *testing.T) {
		p := func(driver string, at time.Time, status string) fntest.JSON {
			return fntest.JSON{"driver_id": driver, "lat": midtown.Lat, "lng": midtown.Lng, "ts": ts(at), "status": status}
		}
		status, body := fntest.Do(t, env.Location, http.MethodPost, "/", fntest.JSON{"pings": []fntest.JSON{
			p("b-1", t0, "available"),
			p("b-2", t0, "paused"),
			p("b-1", t0.Add(-time.Second), "available"),
			p("b-3", t0, "offline"),
		}}, env.Service())
		if status != http.StatusOK {
			t.Fatalf("status %d: %v", status, body)
		}
		results, _ := body["results"].([]any)
		type res struct {
			driver, status, rejected string
			applied                  bool
		}
		var got []res
		for _, r := range results {
			m := r.(map[string]any)
			rej, _ := m["rejected"].(string)
			got = append(got, res{m["driver_id"].(string), m["status"].(string), rej, m["applied"].(bool)})
		}
		want := []res{
			{"b-1", "available", "", true},
			{"b-2", "paused", "", true},
			{"b-1", "available", "stale", false},
			{"b-3", "offline", "", true},
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("results = %v, want %v", got, want)
		}
		for driver, wantIn := range map[string]bool{"b-1": true, "b-2": false, "b-3": false} {
			if got := env.GeoPos(t, driver) != nil; got != wantIn {
				t.Errorf("%s in the available set = %v, want %v", driver, got, wantIn)
			}
		}
	})
}

func TestPingAnswerCarriesThePendingOffer(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	pickup, dropoff := midtown, fntest.Offset(midtown, 2000, 500)
	env.Ping(t, "d-offer", fntest.Offset(pickup, 150, 0))
	if body := env.Ping(t, "d-offer", fntest.Offset(pickup, 150, 0)); body["offer"] != nil {
		t.Fatalf("offer before any ride = %v, want none", body["offer"])
	}
	rideID := env.CreateRide(t, "r-offer", pickup, dropoff)
	if got, want := env.MatchRide(t, rideID), "offered"; got != want {
		t.Fatalf("match outcome = %q, want %q", got, want)
	}
	body := env.Ping(t, "d-offer", fntest.Offset(pickup, 140, 0))
	offer, ok := body["offer"].(map[string]any)
	if !ok {
		t.Fatalf("ping answer has no offer: %v", body)
	}
	if got, want := offer["ride_id"], rideID; got != want {
		t.Errorf("offer.ride_id = %v, want %v", got, want)
	}
	if id, _ := offer["offer_id"].(string); id == "" {
		t.Errorf("offer.offer_id is empty")
	}
	pu := offer["pickup"].(map[string]any)
	if got, want := (dispatch.Point{Lat: pu["lat"].(float64), Lng: pu["lng"].(float64)}), pickup; got != want {
		t.Errorf("offer.pickup = %v, want %v", got, want)
	}
	if env.GeoPos(t, "d-offer") != nil {
		t.Errorf("a driver holding an offer is in the available set")
	}
}

func TestPingsOfADriverOnAnAcceptedRideMoveTheRidesDriverPosition(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	pickup := midtown
	env.Ping(t, "d-pos", fntest.Offset(pickup, 300, 0))
	rideID := env.CreateRide(t, "r-pos", pickup, fntest.Offset(pickup, 3000, 0))
	if got, want := env.MatchRide(t, rideID), "offered"; got != want {
		t.Fatalf("match outcome = %q, want %q", got, want)
	}
	if status, body := env.AcceptRide(t, rideID, "d-pos"); status != http.StatusOK {
		t.Fatalf("accept: %d %v", status, body)
	}
	here := fntest.Offset(pickup, 270, 20) // within GPS noise of his last fix, so applied at once
	body := env.Ping(t, "d-pos", here)
	if got, want := body["applied"], true; got != want {
		t.Fatalf("applied = %v, want %v (%v)", got, want, body)
	}
	if got, want := body["status"], "navigating"; got != want {
		t.Errorf("status = %v, want %v", got, want)
	}
	view := env.GetRide(t, rideID)
	pos, ok := view["driver_position"].(map[string]any)
	if !ok {
		t.Fatalf("ride has no driver_position: %v", view)
	}
	if got, want := (dispatch.Point{Lat: pos["lat"].(float64), Lng: pos["lng"].(float64)}), here; got != want {
		t.Errorf("driver_position = %v, want %v", got, want)
	}
	if env.GeoPos(t, "d-pos") != nil {
		t.Errorf("a driver on an accepted ride is in the available set after pinging available")
	}
}

// The seed's send rule lets a carrying driver's app stay quiet 15 s (fewer than 50 m moved, or
// a red light then a quick start): the ping after such a gap, at a taxi's real speed, is applied
// by the default GPS-jump rule (55 m/s × 15 s + 50 m), moves the ride's driver position, and
// keeps him on his ride. Fix times are the app's (ts); the rule reads only their difference.
func TestPingAfterTheSendRulesQuietStretchOfACarryingDriverIsApplied(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	const driver = "d-quiet"
	t0 := time.Now().Add(-2 * time.Minute)
	send := func(p dispatch.Point, at time.Time) fntest.JSON {
		t.Helper()
		status, body := fntest.Do(t, env.Location, http.MethodPost, "/", fntest.JSON{
			"driver_id": driver, "lat": p.Lat, "lng": p.Lng, "ts": ts(at), "status": "available",
		}, env.As(auth.RoleDriver, driver))
		if status != http.StatusOK {
			t.Fatalf("ping: status %d: %v", status, body)
		}
		return body
	}
	pickup := midtown
	send(fntest.Offset(pickup, 20, 0), t0)
	rideID := env.CreateRide(t, "r-quiet", pickup, fntest.Offset(pickup, 5000, 0))
	if got, want := env.MatchRide(t, rideID), "offered"; got != want {
		t.Fatalf("match outcome = %q, want %q", got, want)
	}
	if status, body := env.AcceptRide(t, rideID, driver); status != http.StatusOK {
		t.Fatalf("accept: %d %v", status, body)
	}
	if status, body := env.RideAction(t, rideID, "start", fntest.JSON{"driver_id": driver}); status != http.StatusOK {
		t.Fatalf("start: %d %v", status, body)
	}
	last, lastAt := fntest.Offset(pickup, 40, 0), t0.Add(4*time.Second)
	if body := send(last, lastAt); body["applied"] != true {
		t.Fatalf("ping at the pickup: %v", body)
	}
	for _, tc := range []struct {
		name  string
		gap   time.Duration
		moveM float64
	}{
		{"stood still 15 s (held by the rule), then 15 s at 25 m/s", 15 * time.Second, 375},
		{"16 s at 30 m/s (the rule's 15 s on a 4 s tick)", 16 * time.Second, 480},
	} {
		next := fntest.Offset(last, tc.moveM, 0)
		body := send(next, lastAt.Add(tc.gap))
		if body["applied"] != true || body["rejected"] != "" && body["rejected"] != nil {
			t.Errorf("%s: applied %v rejected %v, want applied (%v)", tc.name, body["applied"], body["rejected"], body)
		}
		if got := body["status"]; got == "available" || got == "offline" {
			t.Errorf("%s: status %v, want him still on his ride", tc.name, got)
		}
		view := env.GetRide(t, rideID)
		pos, _ := view["driver_position"].(map[string]any)
		if pos == nil || !fntest.Near(dispatch.Point{Lat: pos["lat"].(float64), Lng: pos["lng"].(float64)}, next, 1e-6) {
			t.Errorf("%s: ride's driver_position %v, want %v", tc.name, view["driver_position"], next)
		}
		last, lastAt = next, lastAt.Add(tc.gap)
	}
}
