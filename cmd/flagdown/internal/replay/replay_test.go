package replay

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
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
	w := SelectWindow(tf.Trips, 20*time.Minute)
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
	if got := len(SelectWindow(tf.Trips, 10*time.Minute)); got != 1080 {
		t.Errorf("10 min window %d, want 1080", got)
	}
	if len(w) != 1080+2289 {
		t.Errorf("20 min window %d, want %d", len(w), 1080+2289)
	}
	if SelectWindow(nil, time.Minute) != nil || SelectWindow(tf.Trips, 0) != nil {
		t.Error("empty cases")
	}
	if got := len(SelectWindow(tf.Trips, 24*time.Hour)); got != len(tf.Trips) {
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
		"pings_total", "pings_per_s", "gps_rejected", "wall_seconds", "drivers", "speedup", "window_minutes",
		"ping_interval_s", "accept_prob", "driver_speed_mps", "drain_s", "seed", "concurrency", "batch_size",
	} {
		if _, ok := m[k]; !ok {
			t.Errorf("summary JSON lacks %q", k)
		}
	}
	if m["match_rate"] != 0.0 || m["time_to_match_p50_s"] != 0.0 {
		t.Errorf("empty summary: match_rate %v p50 %v", m["match_rate"], m["time_to_match_p50_s"])
	}
	var buf bytes.Buffer
	s.WriteTable(&buf)
	if !strings.Contains(buf.String(), "match rate") {
		t.Errorf("table:\n%s", buf.String())
	}
}

func TestSummaryFromRides(t *testing.T) {
	s := &sim{opts: DefaultOptions(), rides: map[string]*ride{}, conflictReasons: map[string]int{}, httpErrors: map[string]int{}}
	s.rides["a"] = &ride{requested: true, requestedAt: 10 * time.Second, offered: true, accepted: true, acceptedAt: 16 * time.Second, pickupDistM: 300, completed: true}
	s.rides["b"] = &ride{requested: true, requestedAt: 20 * time.Second, offered: true, accepted: true, acceptedAt: 30 * time.Second, pickupDistM: 500}
	s.rides["c"] = &ride{requested: true, offered: true}
	s.rides["d"] = &ride{requested: true}
	s.rides["other"] = &ride{offered: true, accepted: true} // offered to our driver, not created by us
	sum := s.summary(4, 0, 2*time.Second)
	if sum.RidesRequested != 4 || sum.RidesOffered != 3 || sum.RidesMatched != 2 || sum.RidesAccepted != 2 ||
		sum.RidesCompleted != 1 || sum.RidesUnmatched != 2 || sum.MatchRate != 0.5 {
		t.Fatalf("%+v", sum)
	}
	if sum.TimeToMatchP50S != 6 || sum.TimeToMatchP99S != 10 || sum.PickupDistanceMeanM != 400 || sum.PickupDistanceP95M != 500 {
		t.Fatalf("ttm %v/%v dist %v/%v", sum.TimeToMatchP50S, sum.TimeToMatchP99S, sum.PickupDistanceMeanM, sum.PickupDistanceP95M)
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

func TestDrawDriverStartsDeterministic(t *testing.T) {
	tf := loadReal(t)
	a := DrawDriverStarts(tf.Trips, 500, 42)
	b := DrawDriverStarts(tf.Trips, 500, 42)
	c := DrawDriverStarts(tf.Trips, 500, 43)
	if len(a) != 500 {
		t.Fatal(len(a))
	}
	pickups := map[LatLng]bool{}
	for _, tr := range tf.Trips {
		pickups[tr.Pickup] = true
	}
	same := 0
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("draw %d differs for the same seed", i)
		}
		if !pickups[a[i]] {
			t.Fatalf("draw %d %+v is not a real pickup", i, a[i])
		}
		if a[i] == c[i] {
			same++
		}
	}
	if same > 50 {
		t.Errorf("seeds 42 and 43 agree on %d of 500 draws", same)
	}
	if DrawDriverStarts(nil, 3, 1) != nil {
		t.Error("empty trips")
	}
}

func TestSpreadMinuteStaysInItsMinute(t *testing.T) {
	tf := loadReal(t)
	w := SelectWindow(tf.Trips, 10*time.Minute)
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
