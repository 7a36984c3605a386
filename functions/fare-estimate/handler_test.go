package function_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	fareestimate "github.com/flagdown/flagdown/functions/fare-estimate"
	"github.com/flagdown/flagdown/internal/testkit/fntest"
	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/metrics"
	"github.com/flagdown/flagdown/shared/pgstore"
)

var (
	pickup  = dispatch.Point{Lat: 40.7549, Lng: -73.9840}
	dropoff = dispatch.Point{Lat: 40.7306, Lng: -73.9866}
	// baseFare is EstimateFare of pickup → dropoff with the default parameters, in cents.
	baseFare = dispatch.EstimateFare(dispatch.FareParams{BaseCents: 300, PerKmCents: 175, PerMinCents: 50,
		MinimumCents: 800, RoadFactor: 1.3, AvgSpeedMPS: 7}, pickup, dropoff).FareCents
	cell = dispatch.Geohash(pickup, dispatch.SurgeCellPrecision)
)

func query(pu, do string) string {
	return "/?" + url.Values{"pickup": {pu}, "dropoff": {do}}.Encode()
}

func pt(p dispatch.Point) string { return fmt.Sprintf("%v,%v", p.Lat, p.Lng) }

// quoteKeys counts the quotes stored under the env's prefix.
func quoteKeys(t *testing.T, env *fntest.Env) int {
	t.Helper()
	keys, err := env.D.Redis.Client().Keys(context.Background(), env.D.Config.RedisPrefix+"quote:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	return len(keys)
}

func TestFareEstimateRejectsBadInputAndWritesNothing(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	fn := fareestimate.New(env.D.Deps)
	rider := env.As(auth.RoleRider, "r-1")
	tests := []struct {
		name, path string
		headers    map[string]string
		status     int
		field      string
		rule       string
	}{
		{"missing pickup", "/?dropoff=" + pt(dropoff), rider, 400, "pickup", "is required"},
		{"missing dropoff", "/?pickup=" + pt(pickup), rider, 400, "dropoff", "is required"},
		{"no comma", query("40.7549", pt(dropoff)), rider, 400, "pickup", "lat,lng"},
		{"lat not a number", query("abc,-73.98", pt(dropoff)), rider, 400, "pickup.lat", "finite decimal"},
		{"lng NaN", query(pt(pickup), "40.73,NaN"), rider, 400, "dropoff.lng", "finite decimal"},
		{"lat above 90", query("90.5,-73.98", pt(dropoff)), rider, 400, "pickup.lat", "between -90 and 90"},
		{"outside the service area", query("51.5072,-0.1276", pt(dropoff)), rider, 400, "pickup", "service area"},
		{"zero coordinate", query(pt(pickup), "40.73,0"), rider, 400, "dropoff", "must not be 0"},
		{"given twice", query(pt(pickup), pt(dropoff)) + "&pickup=" + url.QueryEscape(pt(pickup)), rider, 400, "pickup", "once"},
		{"unknown parameter", query(pt(pickup), pt(dropoff)) + "&surge=1", rider, 400, "surge", "not a known parameter"},
		{"driver token", query(pt(pickup), pt(dropoff)), env.As(auth.RoleDriver, "d-1"), 403, "", ""},
		{"no token", query(pt(pickup), pt(dropoff)), nil, 401, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, body := fntest.Do(t, fn, http.MethodGet, tc.path, nil, tc.headers)
			if status != tc.status {
				t.Fatalf("status %d, want %d: %v", status, tc.status, body)
			}
			if tc.field != "" {
				e := fntest.ErrorOf(t, body)
				if e.Field != tc.field || !strings.Contains(e.Message, tc.rule) {
					t.Fatalf("error %+v, want field %s and %q", e, tc.field, tc.rule)
				}
			}
		})
	}
	if n := quoteKeys(t, env); n != 0 {
		t.Fatalf("%d quotes stored by refused requests", n)
	}
	if status, _ := fntest.Do(t, fn, http.MethodPost, query(pt(pickup), pt(dropoff)), nil, rider); status != http.StatusMethodNotAllowed {
		t.Fatalf("POST answered %d", status)
	}
}

// hotCell gives the pickup's cell 1 available driver (200 m from the pickup) and 6 requests: a
// ratio of 6, whose target is the ceiling (1 + 0.5 × (6 − 1) = 3.5 > 3).
func hotCell(t *testing.T, env *fntest.Env) {
	t.Helper()
	env.Ping(t, "d-near", fntest.Offset(pickup, 200, 0))
	for i := range 6 {
		if err := env.D.Redis.CountDemand(context.Background(), cell, fmt.Sprintf("seed-%d", i), env.D.Config.SurgeWindow); err != nil {
			t.Fatal(err)
		}
	}
}

// driveS is the drive a rider is quoted (the rider view, dispatch.RiderWait) from pickup to a
// driver at p, seconds, with the default road factor (1.3) and speed (7 m/s).
func driveS(p dispatch.Point) float64 {
	return dispatch.RoundWaitS(dispatch.RiderDistanceM(pickup, p) * 1.3 / 7)
}

func estimate(t *testing.T, env *fntest.Env, rider string) fntest.JSON {
	t.Helper()
	status, body := fntest.Do(t, fareestimate.New(env.D.Deps), http.MethodGet, query(pt(pickup), pt(dropoff)), nil, env.As(auth.RoleRider, rider))
	if status != http.StatusOK {
		t.Fatalf("fare-estimate: %d %v", status, body)
	}
	return body
}

func num(t *testing.T, body fntest.JSON, k string) float64 {
	t.Helper()
	v, ok := body[k].(float64)
	if !ok {
		t.Fatalf("%s missing in %v", k, body)
	}
	return v
}

func surgeOn(c *config.Config) {
	c.SurgeMode = "on"
	c.SurgeUpdateInterval = time.Hour // one update in the test: the step limit shows
}

// A quote of mode on is charged on the ride: multiplier, fare and quoted wait recorded in
// PostgreSQL and shown by GET ride; a second estimate within the update interval does not step again.
func TestSurgeQuoteIsRecordedOnTheRide(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, surgeOn)
	hotCell(t, env)

	q := estimate(t, env, "r-1")
	// From no data (1.0) towards 3.0 by one step of 0.25.
	if m := num(t, q, "surge_multiplier"); m != 1.25 {
		t.Fatalf("multiplier %v, want 1.25 (one max step from 1.0): %v", m, q)
	}
	if c := num(t, q, "surge_computed"); c != 1.25 || q["surge_mode"] != "on" {
		t.Fatalf("computed %v mode %v", c, q["surge_mode"])
	}
	wantFare := math.Round(float64(baseFare) * 1.25)
	if f := num(t, q, "fare_estimate_cents"); f != wantFare {
		t.Fatalf("fare %v, want %v (base %d × 1.25)", f, wantFare, baseFare)
	}
	// Driver 200 m away: the distance to his cell's centre × 1.3 / 7 s of drive, in the rider
	// view's steps; no accept yet, so no match delay.
	wantWait := driveS(fntest.Offset(pickup, 200, 0))
	if w := num(t, q, "est_wait_s"); w != wantWait || num(t, q, "wait_match_s") != 0 {
		t.Fatalf("wait %v, want %v s: %v", w, wantWait, q)
	}
	if again := estimate(t, env, "r-2"); num(t, again, "surge_multiplier") != 1.25 {
		t.Fatalf("second estimate within the update interval stepped again: %v", again)
	}

	quoteID, _ := q["quote_id"].(string)
	status, body := fntest.Do(t, env.Order, http.MethodPost, "/", fntest.JSON{"pickup": pickup, "dropoff": dropoff, "quote_id": quoteID},
		env.As(auth.RoleRider, "r-1"))
	if status != http.StatusAccepted || num(t, body, "surge_multiplier") != 1.25 || num(t, body, "fare_estimate_cents") != wantFare {
		t.Fatalf("order-create with the quote: %d %v", status, body)
	}
	rideID, _ := body["ride_id"].(string)
	ride, err := pgstore.GetRide(context.Background(), env.D.DB.Pool, rideID, false)
	if err != nil {
		t.Fatal(err)
	}
	if ride.SurgeMultiplier != 1.25 || ride.SurgeComputed == nil || *ride.SurgeComputed != 1.25 ||
		float64(ride.FareEstimateCents) != wantFare || ride.QuotedWaitS == nil || *ride.QuotedWaitS != wantWait {
		t.Fatalf("ride in PostgreSQL: multiplier %v computed %v fare %d wait %v", ride.SurgeMultiplier, ride.SurgeComputed, ride.FareEstimateCents, ride.QuotedWaitS)
	}
	if ride.QuotedWaitCalS == nil || *ride.QuotedWaitCalS != 0 {
		t.Errorf("ride in PostgreSQL: quoted calibration part %v, want 0 (no pickup yet)", ride.QuotedWaitCalS)
	}
	status, view := fntest.Do(t, env.Ride, http.MethodGet, "/"+rideID, nil, env.As(auth.RoleRider, "r-1"))
	if status != http.StatusOK || num(t, view, "surge_multiplier") != 1.25 || num(t, view, "est_wait_s") != wantWait ||
		num(t, view, "quoted_wait_s") != wantWait {
		t.Fatalf("GET ride: %d %v", status, view)
	}
	// The ride counted in the cell's demand.
	box, _ := dispatch.GeohashBox(cell)
	rd, err := env.D.Redis.ReadSurge(context.Background(), true, cell, box, env.D.Config.SurgeWindow, 200, pickup, 8000)
	if err != nil || rd.Load.Demand != 7 {
		t.Fatalf("demand after the ride: %+v %v, want 7", rd, err)
	}
}

// The rider cannot choose his multiplier: a quote is his own, for his pickup and dropoff, and
// current; without one order-create prices the ride itself.
func TestOrderCreateQuoteRules(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, surgeOn)
	hotCell(t, env)
	q := estimate(t, env, "r-1")
	quoteID, _ := q["quote_id"].(string)
	other := fntest.Offset(dropoff, 300, 0)
	tests := []struct {
		name   string
		rider  string
		body   fntest.JSON
		status int
		field  string
		reason string
	}{
		{"another rider's quote", "r-2", fntest.JSON{"pickup": pickup, "dropoff": dropoff, "quote_id": quoteID}, 409, "", dispatch.ReasonQuoteExpired},
		{"unknown quote", "r-1", fntest.JSON{"pickup": pickup, "dropoff": dropoff, "quote_id": "5b0b9c5e-8a51-4f7b-9d7e-0d2f3c7c1a11"}, 409, "", dispatch.ReasonQuoteExpired},
		{"another dropoff", "r-1", fntest.JSON{"pickup": pickup, "dropoff": other, "quote_id": quoteID}, 400, "quote_id", ""},
		{"not a quote id", "r-1", fntest.JSON{"pickup": pickup, "dropoff": dropoff, "quote_id": "1.0"}, 400, "quote_id", ""},
		{"a multiplier sent", "r-1", fntest.JSON{"pickup": pickup, "dropoff": dropoff, "surge_multiplier": 1.0}, 400, "surge_multiplier", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, body := fntest.Do(t, env.Order, http.MethodPost, "/", tc.body, env.As(auth.RoleRider, tc.rider))
			if status != tc.status {
				t.Fatalf("status %d, want %d: %v", status, tc.status, body)
			}
			e := fntest.ErrorOf(t, body)
			if e.Field != tc.field || e.Reason != tc.reason {
				t.Fatalf("error %+v, want field %q reason %q", e, tc.field, tc.reason)
			}
		})
	}
	var n int
	if err := env.D.DB.Pool.QueryRow(context.Background(), `SELECT count(*) FROM rides`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d rides written by refused requests (%v)", n, err)
	}
	// Without a quote: priced now, at the cell's current multiplier.
	status, body := fntest.Do(t, env.Order, http.MethodPost, "/", fntest.JSON{"pickup": pickup, "dropoff": dropoff}, env.As(auth.RoleRider, "r-3"))
	if status != http.StatusAccepted || num(t, body, "surge_multiplier") != 1.25 {
		t.Fatalf("order-create without a quote: %d %v", status, body)
	}
}

// Shadow mode computes and records the multiplier and charges 1.0.
func TestSurgeShadowChargesOne(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, func(c *config.Config) { surgeOn(c); c.SurgeMode = "shadow" })
	hotCell(t, env)
	// The histogram's 1.25 bucket (le=1.25) counts this quote; parallel tests only add to it.
	before := bucketCount(t, "shadow", 1.25)
	q := estimate(t, env, "r-1")
	if num(t, q, "surge_multiplier") != 1 || num(t, q, "surge_computed") != 1.25 || num(t, q, "fare_estimate_cents") != float64(baseFare) {
		t.Fatalf("shadow estimate: %v", q)
	}
	if after := bucketCount(t, "shadow", 1.25); after < before+1 {
		t.Errorf("flagdown_surge_multiplier{mode=shadow} le=1.25 went from %d to %d, want +1 at least", before, after)
	}
	quoteID, _ := q["quote_id"].(string)
	status, body := fntest.Do(t, env.Order, http.MethodPost, "/", fntest.JSON{"pickup": pickup, "dropoff": dropoff, "quote_id": quoteID},
		env.As(auth.RoleRider, "r-1"))
	if status != http.StatusAccepted {
		t.Fatalf("order-create: %d %v", status, body)
	}
	rideID, _ := body["ride_id"].(string)
	ride, err := pgstore.GetRide(context.Background(), env.D.DB.Pool, rideID, false)
	if err != nil || ride.SurgeMultiplier != 1 || ride.SurgeComputed == nil || *ride.SurgeComputed != 1.25 || ride.FareEstimateCents != baseFare {
		t.Fatalf("ride: %+v %v", ride, err)
	}
}

// The ceiling and the emergency cap apply at once to a stored multiplier, without waiting for an
// update; surge off computes nothing; a cell without data is 1.0.
func TestSurgeCapsApplyAtOnce(t *testing.T) {
	t.Parallel()
	store := func(t *testing.T, env *fntest.Env, m float64) {
		t.Helper()
		if _, ok, err := env.D.Redis.StoreSurge(context.Background(), cell, m, 0, time.Hour, time.Hour); err != nil || !ok {
			t.Fatalf("StoreSurge: %v %v", ok, err)
		}
	}
	t.Run("Ceiling", func(t *testing.T) {
		t.Parallel()
		env := fntest.NewEnv(t, func(c *config.Config) { surgeOn(c); c.SurgeCeiling = 2 })
		store(t, env, 2.75) // left by a configuration with a higher ceiling
		if m := num(t, estimate(t, env, "r-1"), "surge_multiplier"); m != 2 {
			t.Fatalf("multiplier %v, want the ceiling 2", m)
		}
	})
	t.Run("Emergency", func(t *testing.T) {
		t.Parallel()
		env := fntest.NewEnv(t, func(c *config.Config) { surgeOn(c); c.SurgeEmergency = true; c.SurgeEmergencyCap = 1.5 })
		store(t, env, 2.75)
		if m := num(t, estimate(t, env, "r-1"), "surge_multiplier"); m != 1.5 {
			t.Fatalf("multiplier %v, want the emergency cap 1.5", m)
		}
	})
	t.Run("NoDataIsOne", func(t *testing.T) {
		t.Parallel()
		env := fntest.NewEnv(t, surgeOn)
		q := estimate(t, env, "r-1") // no driver, no demand, nothing stored
		if num(t, q, "surge_multiplier") != 1 || q["est_wait_s"] != nil {
			t.Fatalf("estimate of an empty cell: %v", q)
		}
	})
	t.Run("Off", func(t *testing.T) {
		t.Parallel()
		env := fntest.NewEnv(t, func(c *config.Config) { surgeOn(c); c.SurgeMode = "off" })
		hotCell(t, env)
		store(t, env, 2.75)
		q := estimate(t, env, "r-1")
		if num(t, q, "surge_multiplier") != 1 || q["surge_computed"] != nil || q["surge_mode"] != "off" {
			t.Fatalf("surge off: %v", q)
		}
	})
}

// An accept feeds the recent match delay (request → accept, PostgreSQL's clock), and the next
// estimate's wait carries it.
func TestAcceptFeedsTheWaitEstimate(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	env.Ping(t, "d-1", fntest.Offset(pickup, 100, 0))
	rideID := env.CreateRide(t, "r-1", pickup, dropoff)
	// The ride waited 40 s for its accept.
	env.Exec(t, `UPDATE rides SET match_started_at = now() - interval '40 seconds' WHERE id = $1`, rideID)
	env.MatchRide(t, rideID)
	driver := env.OfferedDriver(t, rideID)
	if status, body := env.AcceptRide(t, rideID, driver); status != http.StatusOK {
		t.Fatalf("accept: %d %v", status, body)
	}
	d, err := env.D.Redis.MatchDelay(context.Background())
	if err != nil || d < 40 || d > 70 {
		t.Fatalf("match delay %v (%v), want the ride's 40 s and a little", d, err)
	}
	env.Ping(t, "d-2", fntest.Offset(pickup, 700, 0)) // about 700 × 1.3 / 7 = 130 s away
	q := estimate(t, env, "r-2")
	drive, match := driveS(fntest.Offset(pickup, 700, 0)), dispatch.RoundWaitS(d)
	if num(t, q, "wait_match_s") != match || num(t, q, "wait_drive_s") != drive || num(t, q, "est_wait_s") != match+drive {
		t.Fatalf("wait after the accept: %v (match delay %v)", q, d)
	}
}

// bucketCount is the cumulative count of flagdown_surge_multiplier{mode} at bucket le.
func bucketCount(t *testing.T, mode string, le float64) uint64 {
	t.Helper()
	var m dto.Metric
	if err := metrics.SurgeMultiplier.WithLabelValues(mode).(prometheus.Histogram).Write(&m); err != nil {
		t.Fatal(err)
	}
	for _, b := range m.GetHistogram().GetBucket() {
		if b.GetUpperBound() == le {
			return b.GetCumulativeCount()
		}
	}
	t.Fatalf("flagdown_surge_multiplier has no bucket le=%v", le)
	return 0
}

// TestWindowedMatchingQuotesTheUsualPickupDrive: under batch (and auto) matching a ride that does
// not take the nearest driver now waits for a window that gives it a driver about as near as the
// recent pickups', so the drive part of its quote is at most the recent mean drive to a pickup
// (dispatch.DrivePace.DriveS); greedy keeps the nearest driver's drive. On real trips with scarce
// drivers the nearest-driver drive over-quoted batch rides' drive by +59 s on average
// (docs/matching.md, Surge and wait estimate).
func TestWindowedMatchingQuotesTheUsualPickupDrive(t *testing.T) {
	t.Parallel()
	far := fntest.Offset(pickup, 2000, 0)
	for _, mode := range []string{config.MatchGreedy, config.MatchBatch, config.MatchAuto} {
		env := fntest.NewEnv(t, func(c *config.Config) { c.MatchMode = mode })
		// Ten pickups of 60 s over 400 m: a learned pace of 0.15 s per metre, a mean drive of 60 s.
		for range dispatch.DrivePaceMinSamples {
			if err := env.D.Redis.RecordDriveSample(t.Context(), dispatch.DriveSample{DriveS: 60, DistM: 400}); err != nil {
				t.Fatal(err)
			}
		}
		env.Ping(t, "d-1", far)
		got := num(t, estimate(t, env, "r-1"), "wait_drive_s")
		want := dispatch.RoundWaitS(dispatch.RiderDistanceM(pickup, far) * 0.15)
		if mode != config.MatchGreedy {
			want = dispatch.RoundWaitS(60)
		}
		if got != want {
			t.Errorf("%s: wait_drive_s = %v, want %v", mode, got, want)
		}
	}
}
