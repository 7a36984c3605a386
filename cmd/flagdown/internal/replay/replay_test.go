package replay

import (
	"bytes"
	"container/heap"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/broker"
	"github.com/flagdown/flagdown/shared/invariants"
)

// repoTestdata finds the repository's testdata directory by walking up from this package (tests run
// with the package directory as the working directory).
func repoTestdata(t *testing.T, name string) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "testdata", name)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			_, file, _, _ := runtime.Caller(0)
			t.Fatalf("no go.mod above %s (%s)", dir, file)
		}
		dir = parent
	}
}

func loadReal(t *testing.T) *TripFile {
	t.Helper()
	tf, err := LoadTripsFile(repoTestdata(t, "trips.csv"))
	if err != nil {
		t.Fatal(err)
	}
	return tf
}

func TestLoadRealTrips(t *testing.T) {
	tf := loadReal(t)
	if len(tf.Trips) != 9825 || tf.Skipped != 0 {
		t.Fatalf("got %d trips, %d skipped; want 9825, 0", len(tf.Trips), tf.Skipped)
	}
	first := tf.Trips[0]
	want := time.Date(2013, 1, 1, 5, 0, 0, 0, time.UTC)
	if !first.PickupTime.Equal(want) {
		t.Errorf("first pickup %v, want %v", first.PickupTime, want)
	}
	if _, off := first.PickupTime.Zone(); off != -5*3600 {
		t.Errorf("offset %d, want -05:00 kept", off)
	}
	if first.Row != 1 || first.Pickup != (LatLng{40.716976, -73.956528}) || first.Dropoff != (LatLng{40.715008, -73.962440}) {
		t.Errorf("first trip %+v", first)
	}
	for i, tr := range tf.Trips {
		if i > 0 && tr.PickupTime.Before(tf.Trips[i-1].PickupTime) {
			t.Fatalf("row %d out of pickup order", tr.Row)
		}
		// README bounding box of kept rows: lat first, lng second.
		if tr.Pickup.Lat < 40.57 || tr.Pickup.Lat > 40.89 || tr.Pickup.Lng < -74.24 || tr.Pickup.Lng > -73.77 {
			t.Fatalf("row %d pickup %+v outside the README box (lat/lng swapped?)", tr.Row, tr.Pickup)
		}
	}
}

func TestLoadTripsSkipsBadRows(t *testing.T) {
	in := strings.Join([]string{
		"pickup_time,pickup_lat,pickup_lng,dropoff_lat,dropoff_lng",
		"2013-01-01T00:01:00-05:00,40.7,-73.9,40.8,-73.95",
		"not-a-time,40.7,-73.9,40.8,-73.95",
		"2013-01-01T00:00:30-05:00,abc,-73.9,40.8,-73.95",
		"2013-01-01T00:00:30-05:00,NaN,-73.9,40.8,-73.95",
		"2013-01-01T00:00:30-05:00,40.7,-73.9",
		"2013-01-01T00:00:30-05:00,40.7,-273.9,40.8,-73.95",
		`2013-01-01T00:00:30-05:00,40"7,-73.9,40.8,-73.95`,
		"2013-01-01T00:00:00-05:00,40.6,-73.8,40.65,-73.85",
	}, "\n")
	tf, err := LoadTrips(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(tf.Trips) != 2 || tf.Skipped != 6 {
		t.Fatalf("trips %d skipped %d (%q); want 2, 6", len(tf.Trips), tf.Skipped, tf.SkipReasons)
	}
	if tf.Trips[0].Row != 8 || tf.Trips[1].Row != 1 {
		t.Errorf("not sorted by pickup: rows %d, %d", tf.Trips[0].Row, tf.Trips[1].Row)
	}
	if len(tf.SkipReasons) != maxSkipReasons {
		t.Errorf("skip reasons %v", tf.SkipReasons)
	}
	if _, err := LoadTrips(strings.NewReader("a,b,c\n")); err == nil {
		t.Error("bad header accepted")
	}
}

func TestLoadDirtySample(t *testing.T) {
	// The dirty sample parses (zero coordinates are valid numbers); the platform is what rejects them.
	tf, err := LoadTripsFile(repoTestdata(t, "trips-dirty-sample.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if len(tf.Trips)+tf.Skipped != 200 {
		t.Fatalf("trips %d + skipped %d != 200", len(tf.Trips), tf.Skipped)
	}
}

func TestSelectWindow(t *testing.T) {
	tf := loadReal(t)
	w := SelectWindowAt(tf.Trips, 0, 20*time.Minute)
	if len(w) == 0 || len(w) >= len(tf.Trips) {
		t.Fatalf("window has %d of %d", len(w), len(tf.Trips))
	}
	end := tf.Trips[0].PickupTime.Add(20 * time.Minute)
	for _, tr := range w {
		if !tr.PickupTime.Before(end) {
			t.Fatalf("row %d at %v not before %v", tr.Row, tr.PickupTime, end)
		}
	}
	if next := tf.Trips[len(w)]; next.PickupTime.Before(end) {
		t.Fatalf("row %d at %v excluded", next.Row, next.PickupTime)
	}
	// README: 1,080 pickups 00:00–00:10 and 2,289 in 00:10–00:20.
	if got := len(SelectWindowAt(tf.Trips, 0, 10*time.Minute)); got != 1080 {
		t.Errorf("10 min window %d, want 1080", got)
	}
	if len(w) != 1080+2289 {
		t.Errorf("20 min window %d, want %d", len(w), 1080+2289)
	}
	if SelectWindowAt(nil, 0, time.Minute) != nil || SelectWindowAt(tf.Trips, 0, 0) != nil {
		t.Error("empty cases")
	}
	if got := len(SelectWindowAt(tf.Trips, 0, 24*time.Hour)); got != len(tf.Trips) {
		t.Errorf("whole file %d", got)
	}
}

func TestPercentileNearestRank(t *testing.T) {
	s := []float64{15, 20, 35, 40, 50}
	for _, c := range []struct{ p, want float64 }{{5, 15}, {30, 20}, {40, 20}, {50, 35}, {95, 50}, {100, 50}, {0, 15}} {
		if got := Percentile(s, c.p); got != c.want {
			t.Errorf("p%v = %v, want %v", c.p, got, c.want)
		}
	}
	if s[0] != 15 || s[4] != 50 {
		t.Error("input modified")
	}
	h := make([]float64, 100)
	for i := range h {
		h[i] = float64(100 - i) // 100..1, unsorted
	}
	if Percentile(h, 99) != 99 || Percentile(h, 50) != 50 || Percentile(h, 1) != 1 {
		t.Errorf("1..100: p99 %v p50 %v p1 %v", Percentile(h, 99), Percentile(h, 50), Percentile(h, 1))
	}
	if Percentile(nil, 50) != 0 || Mean(nil) != 0 || Percentile([]float64{math.NaN()}, 50) != 0 {
		t.Error("empty must be 0")
	}
	if Mean([]float64{1, 2, 6}) != 3 {
		t.Error("mean")
	}
}

func TestSummaryJSONKeys(t *testing.T) {
	s := (&sim{opts: DefaultOptions(), rides: map[string]*ride{}, conflictReasons: map[string]int{}, httpErrors: map[string]int{}}).summary(0, 0, 0)
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err) // NaN or Inf would fail here
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{
		"rides_requested", "rides_rejected", "rides_offered", "rides_accepted", "rides_matched", "rides_completed",
		"match_rate", "rides_unmatched", "offers_total", "declines", "accept_conflicts",
		"time_to_match_p50_s", "time_to_match_p95_s", "time_to_match_p99_s", "time_to_match_count",
		"pickup_distance_mean_m", "pickup_distance_p50_m", "pickup_distance_p95_m", "pickup_distance_count",
		"offer_latency_p50_ms", "offer_latency_p99_ms", "offer_latency_count",
		"pings_total", "pings_sent", "send_rule", "pings_saved_by_send_rule", "send_rule_saved_pct", "pings_per_s", "gps_rejected", "wall_seconds", "drivers", "speedup", "window_minutes",
		"ping_interval_s", "accept_prob", "driver_speed_mps", "drain_s", "seed", "concurrency", "batch_size",
		"offer_timeouts", "offers_ignored", "rematches", "rides_reoffered", "rides_reopened", "drivers_went_offline",
		"offline_rides_abandoned", "offline_rides_reopened", "offline_rides_rematched", "rides_never_matched",
		"final_status_known", "no_answer_prob", "offline_prob_per_h", "ride_status_counts", "accept_conflict_reasons",
		"verify_ran", "verify_error", "verify_grace_s", "verify_violations", "verify_examples",
		"match_mode", "driver_starts", "driver_start_trips_before", "driver_start_trips_fallback",
		"surge_mode", "surge_quotes", "surge_charged_p50", "surge_charged_max", "surge_computed_p50", "surge_computed_max",
		"surge_by_minute", "wait_estimate_count", "wait_estimate_mae_s", "wait_estimate_mean_s", "wait_actual_mean_s",
	} {
		if _, ok := m[k]; !ok {
			t.Errorf("summary JSON lacks %q", k)
		}
	}
	if m["match_rate"] != 0.0 || m["time_to_match_p50_s"] != 0.0 {
		t.Errorf("empty summary: match_rate %v p50 %v", m["match_rate"], m["time_to_match_p50_s"])
	}
	for _, k := range []string{"offer_timeouts", "rematches", "drivers_went_offline", "rides_unmatched", "rides_never_matched"} {
		if m[k] != 0.0 {
			t.Errorf("empty summary: %s = %v", k, m[k])
		}
	}
	if m["match_mode"] != "greedy" || m["driver_starts"] != "dropoffs-before" {
		t.Errorf("defaults in the JSON: match_mode %v driver_starts %v", m["match_mode"], m["driver_starts"])
	}
	if m["no_answer_prob"] != 0.05 || m["offline_prob_per_h"] != 0.02 {
		t.Errorf("defaults in the JSON: no_answer_prob %v offline_prob_per_h %v", m["no_answer_prob"], m["offline_prob_per_h"])
	}
	for _, inv := range invariants.All {
		if m[inv.Name.Key()] != 0.0 {
			t.Errorf("summary JSON: %s = %v, want 0", inv.Name.Key(), m[inv.Name.Key()])
		}
	}
	if m["verify_ran"] != false || m["verify_grace_s"] != 10.0 {
		t.Errorf("before verifying: verify_ran %v, verify_grace_s %v", m["verify_ran"], m["verify_grace_s"])
	}
	for _, k := range []string{"ride_status_counts", "accept_conflict_reasons", "http_errors", "verify_examples"} {
		if _, ok := m[k].(map[string]any); !ok {
			t.Errorf("%s is %v, want an object", k, m[k])
		}
	}
	var buf bytes.Buffer
	s.WriteTable(&buf)
	if !strings.Contains(buf.String(), "match rate") {
		t.Errorf("table:\n%s", buf.String())
	}
}

func TestSummaryFromRides(t *testing.T) {
	s := &sim{opts: DefaultOptions(), rides: map[string]*ride{}, conflictReasons: map[string]int{}, httpErrors: map[string]int{}}
	s.rides["a"] = &ride{requested: true, requestedAt: 10 * time.Second, offered: true, accepted: true, acceptedAt: 16 * time.Second, arrivedAt: 70 * time.Second, pickupDistM: 300, completed: true}
	s.rides["b"] = &ride{requested: true, requestedAt: 20 * time.Second, offered: true, accepted: true, acceptedAt: 30 * time.Second, pickupDistM: 500} // still on his way
	s.rides["c"] = &ride{requested: true, offered: true}
	s.rides["d"] = &ride{requested: true}
	s.rides["other"] = &ride{offered: true, accepted: true} // offered to our driver, not created by us
	sum := s.summary(4, 0, 2*time.Second)
	// Without a final GET nothing is known to be UNMATCHED or still REQUESTED.
	if sum.RidesRequested != 4 || sum.RidesOffered != 3 || sum.RidesMatched != 2 || sum.RidesAccepted != 2 ||
		sum.RidesCompleted != 1 || sum.RidesUnmatched != 0 || sum.RidesNeverMatched != 0 || sum.MatchRate != 0.5 || sum.FinalStatusKnown {
		t.Fatalf("%+v", sum)
	}
	if sum.TimeToMatchP50S != 6 || sum.TimeToMatchP99S != 10 || sum.PickupDistanceMeanM != 400 || sum.PickupDistanceP95M != 500 {
		t.Fatalf("ttm %v/%v dist %v/%v", sum.TimeToMatchP50S, sum.TimeToMatchP99S, sum.PickupDistanceMeanM, sum.PickupDistanceP95M)
	}
	// The pickup wait: a's 60 s (request 10 s → pickup 70 s); b, still on the way, is unknown
	// without the replay's end.
	if sum.PickupWaitCount != 1 || sum.PickupWaitP50S != 60 || sum.PickupWaitP99S != 60 {
		t.Errorf("pickup wait n %d p50 %v p99 %v, want 1, 60, 60", sum.PickupWaitCount, sum.PickupWaitP50S, sum.PickupWaitP99S)
	}
	// With the end known (120 s), b counts 100 s, a lower bound, and raises the p99.
	s.simEnded = 120 * time.Second
	sum = s.summary(4, 0, 2*time.Second)
	if sum.PickupWaitCount != 2 || sum.PickupWaitOnTheWay != 1 || sum.PickupWaitP50S != 60 || sum.PickupWaitP99S != 100 {
		t.Errorf("pickup wait n %d (on the way %d) p50 %v p99 %v, want 2 (1), 60, 100",
			sum.PickupWaitCount, sum.PickupWaitOnTheWay, sum.PickupWaitP50S, sum.PickupWaitP99S)
	}
}

func TestLegMovement(t *testing.T) {
	from := LatLng{40.716976, -73.956528} // Williamsburg
	to := LatLng{40.779728, -73.955383}   // Upper East Side, ~7 km north
	leg := Leg{From: from, To: to, Start: 100 * time.Second, SpeedMPS: 8}
	total := leg.LengthM()
	if total < 6900 || total > 7100 {
		t.Fatalf("length %v m", total)
	}
	if d := leg.Duration().Seconds(); math.Abs(d-total/8) > 1e-6 {
		t.Fatalf("duration %v s, want %v", d, total/8)
	}
	if leg.At(0) != from || leg.At(100*time.Second) != from || leg.At(leg.End()+time.Hour) != to {
		t.Fatal("endpoints")
	}
	prev := from
	for _, sec := range []float64{1, 4, 60, 300, 600, 800} {
		p := leg.At(leg.Start + time.Duration(sec*float64(time.Second)))
		// lat,lng order: a move north changes latitude around 40.7, longitude stays around -73.95.
		if p.Lat < 40.7 || p.Lat > 40.8 || p.Lng > -73.9 || p.Lng < -74.0 {
			t.Fatalf("t=%vs position %+v not lat,lng", sec, p)
		}
		covered := Haversine(from, p)
		if math.Abs(covered-8*sec) > 0.001*8*sec+0.01 {
			t.Errorf("t=%vs covered %.3f m, want %.3f", sec, covered, 8*sec)
		}
		if rest := Haversine(p, to); math.Abs(covered+rest-total) > 0.01 {
			t.Errorf("t=%vs off the straight line: %v + %v != %v", sec, covered, rest, total)
		}
		if p.Lat <= prev.Lat {
			t.Errorf("t=%vs not moving north", sec)
		}
		prev = p
	}
	if h := leg.Heading(); h > 2 && h < 358 {
		t.Errorf("heading %v, want ≈ north", h)
	}
	if h := Bearing(LatLng{40.7, -74}, LatLng{40.7, -73.9}); math.Abs(h-90) > 0.1 {
		t.Errorf("east bearing %v", h)
	}
	still := Leg{From: from, To: from, SpeedMPS: 8}
	if still.Duration() != 0 || still.At(time.Hour) != from {
		t.Error("zero-length leg")
	}
}

func TestHaversineKnown(t *testing.T) {
	// One degree of latitude ≈ 111.2 km on the mean sphere.
	if d := Haversine(LatLng{40, -74}, LatLng{41, -74}); math.Abs(d-111195) > 50 {
		t.Errorf("1° lat = %v m", d)
	}
	// JFK → LGA ≈ 17.2 km.
	if d := Haversine(LatLng{40.6413, -73.7781}, LatLng{40.7769, -73.8740}); math.Abs(d-17200) > 300 {
		t.Errorf("JFK-LGA %v m", d)
	}
}

func TestSpreadMinuteStaysInItsMinute(t *testing.T) {
	tf := loadReal(t)
	w := SelectWindowAt(tf.Trips, 0, 10*time.Minute)
	got := SpreadMinute(w, 7)
	if len(got) != len(w) {
		t.Fatalf("got %d trips, want %d", len(got), len(w))
	}
	moved := 0
	for i, tr := range got {
		if i > 0 && tr.PickupTime.Before(got[i-1].PickupTime) {
			t.Fatalf("trip %d out of order", i)
		}
		minute := tr.PickupTime.Truncate(time.Minute)
		if tr.PickupTime.Sub(minute) >= time.Minute {
			t.Fatalf("trip %d left its minute", i)
		}
		if tr.PickupTime.Second() != 0 {
			moved++
		}
	}
	if moved < len(got)/2 {
		t.Errorf("only %d of %d trips spread", moved, len(got))
	}
	again := SpreadMinute(w, 7)
	for i := range got {
		if !got[i].PickupTime.Equal(again[i].PickupTime) {
			t.Fatalf("not deterministic at %d", i)
		}
	}
}

// newTestSim is a scheduler-side sim without workers or platform: submit drops jobs (closed), so
// only the client-visible bookkeeping runs.
func newTestSim(o Options) *sim {
	return &sim{
		opts: o, ctx: context.Background(), origin: time.Now(), closed: true,
		rides: map[string]*ride{}, conflictReasons: map[string]int{}, httpErrors: map[string]int{},
	}
}

func testDriver(id string, i int, o Options) *driver {
	return &driver{id: id, rng: rand.New(rand.NewPCG(o.Seed, uint64(i)+1)), fate: newFateRand(o.Seed, i), seen: map[string]bool{}}
}

func TestOfflineAfter(t *testing.T) {
	if _, ok := OfflineAfter(0.5, 0); ok {
		t.Error("perHour 0 must never drop")
	}
	for _, p := range []float64{-0.1, 1, math.NaN()} {
		if _, ok := OfflineAfter(0.5, p); ok {
			t.Errorf("perHour %v accepted", p)
		}
	}
	if d, ok := OfflineAfter(0, 0.02); !ok || d != 0 {
		t.Errorf("u=0: %v %v, want 0 true", d, ok)
	}
	// u = p is exactly the one-hour quantile: P(drop within 1 h) = p.
	if d, ok := OfflineAfter(0.02, 0.02); !ok || math.Abs(d.Hours()-1) > 1e-9 {
		t.Errorf("u=p: %v, want 1h", d)
	}
	// Two hours: 1 − (1−p)².
	if d, _ := OfflineAfter(1-0.98*0.98, 0.02); math.Abs(d.Hours()-2) > 1e-9 {
		t.Errorf("two-hour quantile %v", d)
	}
	prev := time.Duration(-1)
	for _, u := range []float64{0, 0.001, 0.01, 0.1, 0.5} {
		d, ok := OfflineAfter(u, 0.3)
		if !ok || d <= prev {
			t.Fatalf("u=%v: %v %v not increasing", u, d, ok)
		}
		prev = d
	}
	if _, ok := OfflineAfter(math.Nextafter(1, 0), 1e-9); ok {
		t.Error("a drop beyond 10,000 h must count as never")
	}
}

func TestFateDrawsSeededAndDeterministic(t *testing.T) {
	const n = 200_000
	a, b, other := newFateRand(7, 3), newFateRand(7, 3), newFateRand(7, 4)
	orig := rand.New(rand.NewPCG(7, 3+1)) // driver 3's think/accept stream
	sameOther, sameOrig, noAnswer := 0, 0, 0
	for range n {
		x, y, z, w := a.Float64(), b.Float64(), other.Float64(), orig.Float64()
		if x != y {
			t.Fatal("same seed and driver drew differently")
		}
		if x == z {
			sameOther++
		}
		if x == w {
			sameOrig++
		}
	}
	if sameOther > 0 || sameOrig > 0 {
		t.Errorf("fate stream shared draws with another driver (%d) or the think/accept stream (%d)", sameOther, sameOrig)
	}
	r := newFateRand(1, 0)
	for range n {
		if drawNoAnswer(r, 0.05) {
			noAnswer++
		}
	}
	if rate := float64(noAnswer) / n; math.Abs(rate-0.05) > 0.003 {
		t.Errorf("no-answer rate %v, want 0.05", rate)
	}
	r0, r1 := newFateRand(1, 0), newFateRand(1, 0)
	for range 1000 {
		if drawNoAnswer(r0, 0) || !drawNoAnswer(r1, 1) {
			t.Fatal("p=0 must never and p=1 must always ignore")
		}
	}
	// Over drivers: the share dropping within one simulated hour is p, within 22 minutes 1−(1−p)^(22/60).
	within1h, within22m := 0, 0
	for i := range n {
		d, ok := drawOffline(newFateRand(1, i), 0.02)
		if ok && d <= time.Hour {
			within1h++
		}
		if ok && d <= 22*time.Minute {
			within22m++
		}
	}
	if rate := float64(within1h) / n; math.Abs(rate-0.02) > 0.0015 {
		t.Errorf("dropped within 1 h: %v, want 0.02", rate)
	}
	if rate, want := float64(within22m)/n, 1-math.Pow(0.98, 22.0/60); math.Abs(rate-want) > 0.001 {
		t.Errorf("dropped within 22 min: %v, want %v", rate, want)
	}
	d1, ok1 := drawOffline(newFateRand(9, 5), 0.5)
	d2, ok2 := drawOffline(newFateRand(9, 5), 0.5)
	if d1 != d2 || ok1 != ok2 {
		t.Error("offline draw not deterministic")
	}
}

func TestValidateNewProbabilities(t *testing.T) {
	for _, c := range []struct {
		noAnswer, offline float64
		ok                bool
	}{{0, 0, true}, {1, 0.999, true}, {0.05, 0.02, true}, {-0.1, 0, false}, {1.1, 0, false}, {math.NaN(), 0, false},
		{0, 1, false}, {0, -0.01, false}, {0, math.NaN(), false}} {
		o := DefaultOptions()
		o.NoAnswerProb, o.OfflineProbPerHour = c.noAnswer, c.offline
		if err := o.validate(); (err == nil) != c.ok {
			t.Errorf("no-answer %v offline %v: err %v, want ok %v", c.noAnswer, c.offline, err, c.ok)
		}
	}
}

// TestIgnoredOfferTimesOut: an ignored offer counts as timed out when it vanishes from the driver's
// ping answers, or when its ride is offered to another driver later (not earlier).
func TestIgnoredOfferTimesOut(t *testing.T) {
	o := DefaultOptions()
	o.NoAnswerProb = 1
	s := newTestSim(o)
	a, b := testDriver("a", 0, o), testDriver("b", 1, o)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	offer := func(id, ride string, exp time.Time) *Offer {
		return &Offer{OfferID: id, RideID: ride, ExpiresAt: exp.Format(time.RFC3339Nano)}
	}
	s.pingResults([]*driver{a}, nil, []PingResult{{DriverID: "a", Status: "available", Offer: offer("o1", "r1", base)}}, nil, time.Now())
	s.pingResults([]*driver{a}, nil, []PingResult{{DriverID: "a", Status: "available", Offer: offer("o1", "r1", base)}}, nil, time.Now())
	if s.offersIgnored != 1 || s.offerTimeouts != 0 || a.ignoring == nil {
		t.Fatalf("after seeing o1 twice: ignored %d timeouts %d", s.offersIgnored, s.offerTimeouts)
	}
	s.pingResults([]*driver{a}, nil, []PingResult{{DriverID: "a", Status: "available"}}, nil, time.Now()) // o1 vanished
	if s.offerTimeouts != 1 || a.ignoring != nil {
		t.Fatalf("vanished offer not counted: timeouts %d", s.offerTimeouts)
	}
	// b ignores o2 on r2; a is offered r2 by an offer expiring earlier (older): no timeout of o2 yet.
	s.pingResults([]*driver{b}, nil, []PingResult{{DriverID: "b", Offer: offer("o2", "r2", base.Add(time.Minute))}}, nil, time.Now())
	s.pingResults([]*driver{a}, nil, []PingResult{{DriverID: "a", Offer: offer("o0", "r2", base.Add(30*time.Second))}}, nil, time.Now())
	if s.offerTimeouts != 1 {
		t.Fatalf("an older offer to another driver confirmed o2: timeouts %d", s.offerTimeouts)
	}
	// c is offered r2 later than both: o2 (b) and o0 (a) timed out.
	c := testDriver("c", 2, o)
	s.pingResults([]*driver{c}, nil, []PingResult{{DriverID: "c", Offer: offer("o3", "r2", base.Add(2*time.Minute))}}, nil, time.Now())
	if s.offerTimeouts != 3 || s.offersIgnored != 4 {
		t.Fatalf("later offer to another driver: timeouts %d ignored %d, want 3, 4", s.offerTimeouts, s.offersIgnored)
	}
	if r := s.rides["r2"]; len(r.offeredTo) != 3 || !r.offered {
		t.Fatalf("r2 offered to %v", r.offeredTo)
	}
	sum := s.summary(0, 0, 0)
	if sum.OffersIgnored != 4 || sum.OfferTimeouts != 3 || sum.OffersTotal != 4 || sum.RidesReoffered != 0 {
		t.Fatalf("summary ignored %d timeouts %d offers %d", sum.OffersIgnored, sum.OfferTimeouts, sum.OffersTotal)
	}
}

// TestDropOffline: a driver on his way to a pickup abandons the ride and stops pinging; one carrying a
// passenger drops when the ride ends; a pending decision of a dropped driver is an ignored offer.
func TestDropOffline(t *testing.T) {
	o := DefaultOptions()
	s := newTestSim(o)
	now := s.now()
	toPickup, carrying, idle := testDriver("p", 0, o), testDriver("c", 1, o), testDriver("i", 2, o)
	s.drivers = []*driver{toPickup, carrying, idle}
	s.ride("r1").requested = true
	toPickup.state, toPickup.rideID = stToPickup, "r1"
	r1 := s.ride("r1")
	r1.accepted, r1.accepts, r1.acceptedBy = true, 1, "p"
	s.drive(toPickup, now, LatLng{40.75, -73.98}, func() { t.Error("an abandoned leg arrived") })
	carrying.state, carrying.rideID = stToDropoff, "r2"

	for _, d := range s.drivers {
		s.dropOffline(d)
	}
	if !toPickup.offline || !idle.offline || carrying.offline || !carrying.dropDue || s.driversOffline != 2 {
		t.Fatalf("offline p %v i %v c %v (due %v), count %d", toPickup.offline, idle.offline, carrying.offline, carrying.dropDue, s.driversOffline)
	}
	if !r1.abandoned || r1.abandonments != 1 || r1.abandonedBy != "p" || r1.matched() {
		t.Fatalf("r1 %+v", r1)
	}
	s.rideEnded(carrying)
	if !carrying.offline || s.driversOffline != 3 {
		t.Fatal("the carrying driver did not drop after his ride")
	}
	for len(s.events) > 0 { // the abandoned leg's arrival must be a no-op
		heap.Pop(&s.events).(event).fn()
	}
	// Offline drivers are not pinged.
	s.pingDue(time.Hour)
	for _, d := range s.drivers {
		if d.inFlight {
			t.Errorf("offline driver %s pinged", d.id)
		}
	}
	// A decision due after the drop leaves the offer unanswered.
	s.decide(idle, Offer{OfferID: "o9", RideID: "r9"}, true)
	if s.offersIgnored != 1 || idle.state != stIdle {
		t.Fatalf("pending decision of a dropped driver: ignored %d state %v", s.offersIgnored, idle.state)
	}
}

func TestRideReopenedAndMatched(t *testing.T) {
	at := time.Now()
	for _, c := range []struct {
		name               string
		r                  ride
		reopened, matched  bool
		rematchedAfterDrop bool
	}{
		{"plain accept", ride{accepted: true, accepts: 1, acceptedBy: "a"}, false, true, false},
		{"final ACCEPTED same driver", ride{accepted: true, accepts: 1, acceptedBy: "a", final: &RideView{Status: "ACCEPTED", DriverID: "a", AcceptedAt: &at}}, false, true, false},
		{"accepted twice", ride{accepted: true, accepts: 2, acceptedBy: "b"}, true, true, false},
		{"offered after accept", ride{accepted: true, accepts: 1, acceptedBy: "a", offeredAfterAccept: true}, true, true, false},
		{"final REQUESTED after accept", ride{accepted: true, accepts: 1, acceptedBy: "a", final: &RideView{Status: "REQUESTED", AcceptedAt: &at}}, true, false, false},
		{"final UNMATCHED after accept", ride{accepted: true, accepts: 1, acceptedBy: "a", final: &RideView{Status: "UNMATCHED", AcceptedAt: &at}}, true, false, false},
		{"final other driver", ride{accepted: true, accepts: 1, acceptedBy: "a", final: &RideView{Status: "COMPLETED", DriverID: "z", AcceptedAt: &at}}, true, true, false},
		{"never accepted, REQUESTED", ride{final: &RideView{Status: "REQUESTED"}}, false, false, false},
		{"abandoned, not yet re-opened", ride{accepted: true, accepts: 1, acceptedBy: "a", abandoned: true, abandonments: 1, abandonedBy: "a",
			final: &RideView{Status: "ACCEPTED", DriverID: "a", AcceptedAt: &at}}, false, false, false},
		{"abandoned, re-matched", ride{accepted: true, accepts: 2, acceptedBy: "b", abandonments: 1, abandonedBy: "a", rematchedAfterAbandon: true}, true, true, true},
		{"abandoned, final other driver", ride{accepted: true, accepts: 1, acceptedBy: "a", abandoned: true, abandonments: 1, abandonedBy: "a",
			final: &RideView{Status: "IN_PROGRESS", DriverID: "b", AcceptedAt: &at}}, true, false, true},
	} {
		if got := c.r.reopened(); got != c.reopened {
			t.Errorf("%s: reopened %v", c.name, got)
		}
		if got := c.r.matched(); got != c.matched {
			t.Errorf("%s: matched %v", c.name, got)
		}
		if got := c.r.rematchedAfterOffline(); got != c.rematchedAfterDrop {
			t.Errorf("%s: rematched after offline %v", c.name, got)
		}
	}
}

func TestSummaryTimeoutFigures(t *testing.T) {
	s := newTestSim(DefaultOptions())
	at := time.Now()
	two := map[string]bool{"a": true, "b": true}
	s.rides["ok"] = &ride{requested: true, requestedAt: 10 * time.Second, offered: true, offeredTo: map[string]bool{"a": true},
		accepted: true, accepts: 1, acceptedBy: "a", acceptedAt: 14 * time.Second, pickupDistM: 100,
		final: &RideView{Status: "COMPLETED", DriverID: "a", AcceptedAt: &at}}
	// Declined or timed out by a, accepted by b: re-offered, time to match runs to b's accept.
	s.rides["reoffered"] = &ride{requested: true, requestedAt: 0, offered: true, offeredTo: two,
		accepted: true, accepts: 1, acceptedBy: "b", acceptedAt: 30 * time.Second, pickupDistM: 300,
		final: &RideView{Status: "ACCEPTED", DriverID: "b", AcceptedAt: &at}}
	// Accepted by a, who dropped offline; re-opened and accepted by b 100 s after the request.
	s.rides["rematched"] = &ride{requested: true, requestedAt: 0, offered: true, offeredTo: two,
		accepted: true, accepts: 2, acceptedBy: "b", acceptedAt: 100 * time.Second, pickupDistM: 500,
		offeredAfterAccept: true, abandonments: 1, abandonedBy: "a", rematchedAfterAbandon: true,
		final: &RideView{Status: "IN_PROGRESS", DriverID: "b", AcceptedAt: &at}}
	// Accepted by c, who dropped offline; re-opened, still REQUESTED at the end.
	s.rides["reopened"] = &ride{requested: true, offered: true, offeredTo: map[string]bool{"c": true},
		accepted: true, accepts: 1, acceptedBy: "c", acceptedAt: 5 * time.Second, abandoned: true, abandonments: 1, abandonedBy: "c",
		final: &RideView{Status: "REQUESTED", AcceptedAt: &at}}
	s.rides["unmatched"] = &ride{requested: true, offered: true, offeredTo: map[string]bool{"d": true}, final: &RideView{Status: "UNMATCHED"}}
	s.rides["waiting"] = &ride{requested: true, final: &RideView{Status: "REQUESTED"}}
	s.rides["notours"] = &ride{offered: true, offeredTo: two, accepted: true, accepts: 2}
	s.offersIgnored, s.offerTimeouts, s.driversOffline, s.fetched = 7, 5, 3, true
	s.statusCounts = map[string]int{"COMPLETED": 1, "ACCEPTED": 1, "IN_PROGRESS": 1, "REQUESTED": 2, "UNMATCHED": 1}
	sum := s.summary(6, 0, time.Second)
	want := map[string][2]int{
		"requested": {sum.RidesRequested, 6}, "offered": {sum.RidesOffered, 5}, "accepted": {sum.RidesAccepted, 4},
		"matched": {sum.RidesMatched, 3}, "unmatched": {sum.RidesUnmatched, 1}, "never matched": {sum.RidesNeverMatched, 2},
		"offers ignored": {sum.OffersIgnored, 7}, "offer timeouts": {sum.OfferTimeouts, 5},
		"re-offered": {sum.RidesReoffered, 2}, "re-opened": {sum.RidesReopened, 2}, "rematches": {sum.Rematches, 3},
		"offline": {sum.DriversWentOffline, 3}, "abandoned": {sum.OfflineRidesAbandoned, 2},
		"abandoned re-opened": {sum.OfflineRidesReopened, 2}, "abandoned re-matched": {sum.OfflineRidesRematched, 1},
		"ttm count": {sum.TimeToMatchCount, 3},
	}
	for k, v := range want {
		if v[0] != v[1] {
			t.Errorf("%s = %d, want %d", k, v[0], v[1])
		}
	}
	if sum.MatchRate != 0.5 || sum.TimeToMatchP50S != 30 || sum.TimeToMatchP99S != 100 || sum.PickupDistanceMeanM != 300 {
		t.Errorf("match rate %v ttm p50 %v p99 %v dist %v", sum.MatchRate, sum.TimeToMatchP50S, sum.TimeToMatchP99S, sum.PickupDistanceMeanM)
	}
	if !sum.FinalStatusKnown {
		t.Error("final status known")
	}
	var buf bytes.Buffer
	sum.WriteTable(&buf)
	for _, row := range []string{"offers ignored / timed out", "7 / 5", "rematches", "3 rides", "drivers went offline", "1 UNMATCHED, 2 still REQUESTED"} {
		if !strings.Contains(buf.String(), row) {
			t.Errorf("table lacks %q:\n%s", row, buf.String())
		}
	}
}

// TestSummaryHasEveryInvariant: each invariant of package invariants has its Summary field and its
// invariant_<name> key, and nothing else is called invariant_*.
func TestSummaryHasEveryInvariant(t *testing.T) {
	s := &Summary{}
	fields := s.invariantFields()
	for i, inv := range invariants.All {
		f := fields[inv.Name]
		if f == nil {
			t.Fatalf("Summary has no field for %s", inv.Name)
		}
		*f = i + 1
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	n := 0
	for k := range m {
		if strings.HasPrefix(k, "invariant_") {
			n++
		}
	}
	for i, inv := range invariants.All {
		if m[inv.Name.Key()] != float64(i+1) {
			t.Errorf("%s = %v, want %d (field and key disagree)", inv.Name.Key(), m[inv.Name.Key()], i+1)
		}
	}
	if n != len(invariants.All) || len(fields) != len(invariants.All) {
		t.Errorf("%d invariant_* keys and %d fields, want %d of each", n, len(fields), len(invariants.All))
	}
}

// TestVerifyInto checks the invariants against a real (empty, then broken) PostgreSQL schema and
// Redis prefix, records them in the summary, and fails when they cannot be checked.
func TestVerifyInto(t *testing.T) {
	d := testkit.Deps(t, nil)
	ctx := context.Background()
	o := DefaultOptions()
	noBroker := *d.Config
	noBroker.NATSURL = ""
	o.VerifyConfig, o.VerifyGrace = &noBroker, time.Second

	sum := (&sim{opts: o, rides: map[string]*ride{}, conflictReasons: map[string]int{}, httpErrors: map[string]int{}}).summary(0, 0, 0)
	if err := verifyInto(ctx, o, sum, io.Discard); err != nil {
		t.Fatalf("verify of a clean platform: %v", err)
	}
	if !sum.VerifyRan || sum.VerifyViolations != 0 || sum.VerifyError != "" || invariantsError(sum) != nil {
		t.Fatalf("clean platform: ran %v, violations %d, error %q", sum.VerifyRan, sum.VerifyViolations, sum.VerifyError)
	}
	var buf bytes.Buffer
	sum.WriteTable(&buf)
	// No broker here: the broker's invariants are named not checked, never counted as holding.
	if len(sum.VerifyNotChecked) == 0 {
		t.Errorf("without a broker no invariant was reported not checked; want the broker's")
	}
	if want := fmt.Sprintf("all %d checked hold", len(invariants.All)-len(sum.VerifyNotChecked)); !strings.Contains(buf.String(), want) ||
		!strings.Contains(buf.String(), "not checked: "+strings.Join(sum.VerifyNotChecked, ", ")) {
		t.Errorf("table of a clean check without a broker, want %q and the invariants not checked:\n%s", want, buf.String())
	}

	// The configuration names the deployment's broker (NATS_URL): its invariants are judged too.
	withBroker := *d.Config
	id := testkit.ID()
	withBroker.NATSURL, withBroker.NATSStream, withBroker.SubjectPrefix = testkit.NATS(t), "T_"+strings.ToUpper(id), "t"+id+".events"
	b, err := broker.Connect(ctx, withBroker.NATSURL, withBroker.NATSStream, withBroker.SubjectPrefix) // the platform made its streams
	if err != nil {
		t.Fatalf("broker: %v", err)
	}
	t.Cleanup(func() {
		_ = b.JetStream().DeleteStream(context.Background(), b.Stream())
		_ = b.JetStream().DeleteStream(context.Background(), b.DLQStream())
		b.Close()
	})
	ob := o
	ob.VerifyConfig = &withBroker
	sumB := (&sim{opts: ob, rides: map[string]*ride{}, conflictReasons: map[string]int{}, httpErrors: map[string]int{}}).summary(0, 0, 0)
	if err := verifyInto(ctx, ob, sumB, io.Discard); err != nil {
		t.Fatalf("verify of a clean platform with its broker: %v", err)
	}
	if len(sumB.VerifyNotChecked) != 0 || sumB.VerifyViolations != 0 {
		t.Errorf("with the broker named: not checked %v (%s), violations %d; want every invariant checked, none violated",
			sumB.VerifyNotChecked, sumB.VerifyNotCheckedWhy, sumB.VerifyViolations)
	}

	// An event the relay never published, an hour old.
	if _, err := d.DB.Pool.Exec(ctx, `INSERT INTO outbox (event_id, type, source, subject, ordering_key, data, created_at)
		VALUES (gen_random_uuid(), 'io.flagdown.ride.retry.v1', '/test', 'x', 'x', '{}', now() - interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	if err := verifyInto(ctx, o, sum, io.Discard); err != nil {
		t.Fatalf("verify: %v", err)
	}
	if sum.InvariantOutboxBacklog != 1 || sum.VerifyViolations != 1 || len(sum.VerifyExamples["outbox_backlog"]) != 1 {
		t.Fatalf("outbox backlog %d, violations %d, examples %v", sum.InvariantOutboxBacklog, sum.VerifyViolations, sum.VerifyExamples)
	}
	if err := invariantsError(sum); err == nil || !strings.Contains(err.Error(), "invariant_outbox_backlog 1") {
		t.Errorf("invariantsError = %v", err)
	}
	buf.Reset()
	sum.WriteTable(&buf)
	if !strings.Contains(buf.String(), "1 VIOLATIONS") || !strings.Contains(buf.String(), "invariant outbox_backlog") {
		t.Errorf("table of a violated check:\n%s", buf.String())
	}

	// Nothing listens where PostgreSQL is said to be.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	bad := *d.Config
	bad.DatabaseURL = "postgres://postgres@" + addr + "/postgres?sslmode=disable&connect_timeout=2"
	o.VerifyConfig = &bad
	sum = (&sim{opts: o, rides: map[string]*ride{}, conflictReasons: map[string]int{}, httpErrors: map[string]int{}}).summary(0, 0, 0)
	err = verifyInto(ctx, o, sum, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--verify=false") || sum.VerifyRan || sum.VerifyError == "" {
		t.Fatalf("unreachable PostgreSQL: err %v, ran %v, verify_error %q", err, sum.VerifyRan, sum.VerifyError)
	}
	buf.Reset()
	sum.WriteTable(&buf)
	if !strings.Contains(buf.String(), "NOT CHECKED") {
		t.Errorf("table of a check that did not run:\n%s", buf.String())
	}
}

// TestWaitBeforeVerify waits until the grace plus VerifySettle after the last request, and no
// longer once that has passed.
func TestWaitBeforeVerify(t *testing.T) {
	o := DefaultOptions()
	o.VerifyGrace = 100 * time.Millisecond
	start := time.Now()
	if err := waitBeforeVerify(context.Background(), o, start, io.Discard); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < o.VerifyGrace+VerifySettle {
		t.Errorf("waited %s, want at least %s", waited, o.VerifyGrace+VerifySettle)
	}
	begin := time.Now()
	if err := waitBeforeVerify(context.Background(), o, start.Add(-time.Minute), io.Discard); err != nil || time.Since(begin) > time.Second {
		t.Errorf("long after the last request: err %v, waited %s", err, time.Since(begin))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := waitBeforeVerify(ctx, o, time.Now(), io.Discard); err == nil {
		t.Error("a cancelled wait returned nil")
	}
}

func TestSurgeSummary(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	o := DefaultOptions()
	o.Speedup = 8
	s := newTestSim(o)
	// Minute 0: quoted 76 s (the platform's quote is in the riders' seconds); the driver got there
	// 100 s after the request: error 24 s.
	s.rides["a"] = &ride{requested: true, requestedAt: 10 * time.Second, accepts: 1, arrivedAt: 110 * time.Second,
		quote: &FareQuote{SurgeMode: "shadow", SurgeMultiplier: 1, SurgeComputed: f(1.5), EstWaitS: f(76), WaitMatchS: f(15), WaitDriveS: f(60)}}
	// Minute 0 too: estimate 40 s, actual 30 s: error 10 s.
	s.rides["b"] = &ride{requested: true, requestedAt: 20 * time.Second, accepts: 1, arrivedAt: 50 * time.Second,
		quote: &FareQuote{SurgeMode: "shadow", SurgeMultiplier: 1, SurgeComputed: f(1.25), EstWaitS: f(40), WaitMatchS: f(0), WaitDriveS: f(40)}}
	// Minute 2: re-opened (two accepts): its wait is not compared; no driver near: no wait quoted.
	s.rides["c"] = &ride{requested: true, requestedAt: 130 * time.Second, accepts: 2, arrivedAt: 200 * time.Second,
		quote: &FareQuote{SurgeMode: "shadow", SurgeMultiplier: 1, SurgeComputed: f(2), EstWaitS: f(10), WaitMatchS: f(0), WaitDriveS: f(10)}}
	s.rides["d"] = &ride{requested: true, requestedAt: 150 * time.Second, quote: &FareQuote{SurgeMode: "shadow", SurgeMultiplier: 1, SurgeComputed: f(1)}}
	s.rides["unquoted"] = &ride{requested: true, requestedAt: 30 * time.Second, accepts: 1, arrivedAt: 90 * time.Second}
	sum := s.summary(5, 0, time.Second)
	if sum.SurgeQuotes != 4 || sum.SurgeMode != "shadow" || sum.SurgeChargedMax != 1 || sum.SurgeComputedMax != 2 || sum.SurgeComputedP50 != 1.25 {
		t.Errorf("surge: quotes %d mode %q charged max %v computed p50 %v max %v", sum.SurgeQuotes, sum.SurgeMode, sum.SurgeChargedMax, sum.SurgeComputedP50, sum.SurgeComputedMax)
	}
	if len(sum.SurgeByMinute) != 2 || sum.SurgeByMinute[0].Minute != 0 || sum.SurgeByMinute[0].Quotes != 2 || sum.SurgeByMinute[0].ComputedMax != 1.5 ||
		sum.SurgeByMinute[1].Minute != 2 || sum.SurgeByMinute[1].ComputedP50 != 1 || sum.SurgeByMinute[1].ComputedMax != 2 {
		t.Errorf("by minute: %+v", sum.SurgeByMinute)
	}
	if sum.WaitEstimateCount != 2 || sum.WaitEstimateMAES != 17 || sum.WaitEstimateMeanS != 58 || sum.WaitActualMeanS != 65 {
		t.Errorf("wait estimate: n %d MAE %v mean %v actual %v, want 2, 17, 58, 65", sum.WaitEstimateCount, sum.WaitEstimateMAES, sum.WaitEstimateMeanS, sum.WaitActualMeanS)
	}
	var buf bytes.Buffer
	sum.WriteTable(&buf)
	if !strings.Contains(buf.String(), "wait estimate MAE") || !strings.Contains(buf.String(), "0:1.25/1.50") {
		t.Errorf("table lacks the surge rows:\n%s", buf.String())
	}
}
