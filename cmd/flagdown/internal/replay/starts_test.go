package replay

import (
	"strings"
	"testing"
	"time"
)

// realWindow returns the real trips, the replayed window of the given minutes from the first pickup,
// and its bounds.
func realWindow(t *testing.T, minutes int) (all, window []Trip, start, end time.Time) {
	t.Helper()
	all = loadReal(t).Trips
	d := time.Duration(minutes) * time.Minute
	window = SelectWindowAt(all, 0, d)
	start = all[0].PickupTime
	return all, window, start, start.Add(d)
}

func TestDriverStartsNeverAtReplayedPickup(t *testing.T) {
	all, window, start, end := realWindow(t, 20)
	pool, err := BuildStartPool(all, start, end, StartsDropoffsBefore)
	if err != nil {
		t.Fatal(err)
	}
	// The window opens at the file's first pickup, so no trip ended before it: the fallback is used,
	// and it holds the dropoff of every trip picked up after the window.
	if pool.TripsBefore != 0 || pool.TripsFallback+pool.ExcludedAtPickup != len(all)-len(window) || pool.TripsFallback == 0 {
		t.Fatalf("pool before %d fallback %d excluded %d; want 0, %d in all", pool.TripsBefore, pool.TripsFallback,
			pool.ExcludedAtPickup, len(all)-len(window))
	}
	replayed := map[LatLng]bool{}
	for _, tr := range window {
		replayed[tr.Pickup] = true
	}
	outside := map[LatLng]bool{}
	for _, tr := range all[len(window):] {
		outside[tr.Dropoff] = true
	}
	starts := DrawDriverStarts(pool.Points, 5000, 1)
	if len(starts) != 5000 {
		t.Fatalf("%d starts", len(starts))
	}
	distinct := map[LatLng]bool{}
	for i, p := range starts {
		if replayed[p] {
			t.Fatalf("start %d %+v is a replayed pickup", i, p)
		}
		if !outside[p] {
			t.Fatalf("start %d %+v is not the dropoff of a trip outside the window", i, p)
		}
		distinct[p] = true
	}
	if len(distinct) < 3000 {
		t.Errorf("5000 draws hit only %d distinct positions of %d", len(distinct), len(pool.Points))
	}
}

func TestDriverStartsExcludeDropoffAtReplayedPickup(t *testing.T) {
	t0 := time.Date(2013, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(min int) time.Time { return t0.Add(time.Duration(min) * time.Minute) }
	shared := LatLng{40.75, -73.99}
	trips := []Trip{
		{Row: 1, PickupTime: at(0), Pickup: shared, Dropoff: LatLng{40.76, -73.98}},
		{Row: 2, PickupTime: at(30), Pickup: LatLng{40.70, -74.00}, Dropoff: shared},                // ends at a replayed pickup
		{Row: 3, PickupTime: at(31), Pickup: LatLng{40.71, -74.00}, Dropoff: LatLng{40.80, -73.95}}, // kept
	}
	pool, err := BuildStartPool(trips, at(0), at(10), StartsDropoffsBefore)
	if err != nil {
		t.Fatal(err)
	}
	if pool.TripsFallback != 1 || pool.ExcludedAtPickup != 1 || len(pool.Points) != 1 || pool.Points[0] != trips[2].Dropoff {
		t.Fatalf("pool %+v; want only row 3's dropoff, row 2's excluded", pool)
	}
	// With only the excluded dropoff outside the window nothing is left: an error, not a replayed pickup.
	if _, err := BuildStartPool(trips[:2], at(0), at(10), StartsDropoffsBefore); err == nil || !strings.Contains(err.Error(), "no start position") {
		t.Fatalf("err %v; want no start position", err)
	}
	if _, err := BuildStartPool(trips[:1], at(0), at(10), StartsDropoffsBefore); err == nil {
		t.Fatal("every trip in the window: no error")
	}
}

func TestDriverStartsPreferTripsEndedBefore(t *testing.T) {
	t0 := time.Date(2013, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(min int) time.Time { return t0.Add(time.Duration(min) * time.Minute) }
	p := LatLng{40.75, -73.99}
	near := LatLng{40.7545, -73.99} // ≈ 500 m north of p: ≈ 111 s at EstimatedTripSpeedMPS
	far := LatLng{40.85, -73.99}    // ≈ 11 km: ≈ 41 min
	trips := []Trip{
		{Row: 1, PickupTime: at(0), Pickup: p, Dropoff: near},                                       // ends ≈ 00:02: before
		{Row: 2, PickupTime: at(5), Pickup: p, Dropoff: far},                                        // still driving at 00:10
		{Row: 3, PickupTime: at(6), Pickup: p, Dropoff: LatLng{40.70, -74.01}, DropoffTime: at(9)},  // file's dropoff time: before
		{Row: 4, PickupTime: at(7), Pickup: p, Dropoff: LatLng{40.71, -74.01}, DropoffTime: at(10)}, // ends at the start: not before
		{Row: 5, PickupTime: at(12), Pickup: LatLng{40.72, -73.95}, Dropoff: LatLng{40.73, -73.96}}, // replayed
		{Row: 6, PickupTime: at(40), Pickup: LatLng{40.60, -73.95}, Dropoff: LatLng{40.61, -73.96}}, // after the window
	}
	pool, err := BuildStartPool(trips, at(10), at(20), StartsDropoffsBefore)
	if err != nil {
		t.Fatal(err)
	}
	if pool.TripsBefore != 2 || pool.TripsFallback != 0 || len(pool.Points) != 2 ||
		pool.Points[0] != near || pool.Points[1] != trips[2].Dropoff {
		t.Fatalf("pool %+v; want the dropoffs of rows 1 and 3 only", pool)
	}

	// The real file from 00:10: the trips that ended before it give the starts.
	all := loadReal(t).Trips
	start := all[0].PickupTime.Add(10 * time.Minute)
	real, err := BuildStartPool(all, start, start.Add(10*time.Minute), StartsDropoffsBefore)
	if err != nil {
		t.Fatal(err)
	}
	if real.TripsBefore < 100 || real.TripsFallback != 0 {
		t.Fatalf("real pool from 00:10: before %d fallback %d", real.TripsBefore, real.TripsFallback)
	}
	ended := map[LatLng]bool{}
	for _, tr := range all {
		if tr.DropoffAt().Before(start) {
			ended[tr.Dropoff] = true
		}
	}
	for _, pt := range real.Points {
		if !ended[pt] {
			t.Fatalf("%+v is not the dropoff of a trip ended before %v", pt, start)
		}
	}
}

func TestDrawDriverStartsDeterministic(t *testing.T) {
	all, _, start, end := realWindow(t, 20)
	pool, err := BuildStartPool(all, start, end, StartsDropoffsBefore)
	if err != nil {
		t.Fatal(err)
	}
	a := DrawDriverStarts(pool.Points, 500, 42)
	b := DrawDriverStarts(pool.Points, 500, 42)
	c := DrawDriverStarts(pool.Points, 500, 43)
	if len(a) != 500 {
		t.Fatal(len(a))
	}
	same := 0
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("draw %d differs for the same seed", i)
		}
		if a[i] == c[i] {
			same++
		}
	}
	if same > 50 {
		t.Errorf("seeds 42 and 43 agree on %d of 500 draws", same)
	}
	if DrawDriverStarts(nil, 3, 1) != nil {
		t.Error("empty pool")
	}
}

func TestReplayPickupsMode(t *testing.T) {
	all, _, start, end := realWindow(t, 20)
	pool, err := BuildStartPool(all, start, end, StartsReplayPickups)
	if err != nil {
		t.Fatal(err)
	}
	if len(pool.Points) != len(all) || pool.TripsBefore != 0 || pool.TripsFallback != 0 {
		t.Fatalf("pool of %d points (before %d fallback %d); want every one of %d pickups", len(pool.Points),
			pool.TripsBefore, pool.TripsFallback, len(all))
	}
	for i, tr := range all {
		if pool.Points[i] != tr.Pickup {
			t.Fatalf("point %d %+v is not pickup %+v", i, pool.Points[i], tr.Pickup)
		}
	}
	if _, err := BuildStartPool(all, start, end, "anywhere"); err == nil {
		t.Error("unknown mode accepted")
	}
}

func TestParseDriverStarts(t *testing.T) {
	for _, m := range DriverStartsModes {
		if got, err := ParseDriverStarts(string(m)); err != nil || got != m {
			t.Errorf("ParseDriverStarts(%q) = %q, %v", m, got, err)
		}
	}
	if _, err := ParseDriverStarts("pickups"); err == nil {
		t.Error("unknown name accepted")
	}
	o := DefaultOptions()
	o.DriverStarts = "pickups"
	if err := o.validate(); err == nil {
		t.Error("validate accepted an unknown driver-starts")
	}
}

func TestDropoffAt(t *testing.T) {
	p := LatLng{40.75, -73.99}
	q := LatLng{40.75 + 4500/EarthRadiusM*180/3.141592653589793, -73.99} // 4,500 m north: 1,000 s
	t0 := time.Date(2013, 1, 1, 0, 0, 0, 0, time.UTC)
	got := Trip{PickupTime: t0, Pickup: p, Dropoff: q}.DropoffAt().Sub(t0)
	if d := got - 1000*time.Second; d < -time.Second || d > time.Second {
		t.Errorf("estimated trip time %v, want 1000 s", got)
	}
	given := t0.Add(7 * time.Minute)
	if got := (Trip{PickupTime: t0, Pickup: p, Dropoff: q, DropoffTime: given}).DropoffAt(); !got.Equal(given) {
		t.Errorf("DropoffAt %v, want the file's %v", got, given)
	}
}

func TestLoadTripsDropoffTimeColumn(t *testing.T) {
	in := strings.Join([]string{
		"pickup_time,pickup_lat,pickup_lng,dropoff_lat,dropoff_lng,passenger_count,dropoff_time",
		"2013-01-01T00:01:00-05:00,40.7,-73.9,40.8,-73.95,1,2013-01-01T00:15:30-05:00",
		"2013-01-01T00:02:00-05:00,40.7,-73.9,40.8,-73.95,1,2013-01-01T00:01:00-05:00", // before its pickup
		"2013-01-01T00:03:00-05:00,40.7,-73.9,40.8,-73.95,1,soon",
		"2013-01-01T00:04:00-05:00,40.7,-73.9,40.8,-73.95,1",
	}, "\n")
	tf, err := LoadTrips(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(tf.Trips) != 1 || tf.Skipped != 3 {
		t.Fatalf("trips %d skipped %d (%q); want 1, 3", len(tf.Trips), tf.Skipped, tf.SkipReasons)
	}
	want := time.Date(2013, 1, 1, 5, 15, 30, 0, time.UTC)
	if !tf.Trips[0].DropoffTime.Equal(want) || !tf.Trips[0].DropoffAt().Equal(want) {
		t.Errorf("dropoff time %v, want %v", tf.Trips[0].DropoffTime, want)
	}
	// The real file has no dropoff_time: every trip's is estimated.
	for _, tr := range loadReal(t).Trips[:10] {
		if !tr.DropoffTime.IsZero() || !tr.DropoffAt().After(tr.PickupTime.Add(-time.Nanosecond)) {
			t.Fatalf("row %d: dropoff time %v, estimate %v", tr.Row, tr.DropoffTime, tr.DropoffAt())
		}
	}
}

// TestDefaultWindowStartsBeforeIt: with the default --skip-minutes the demo's window has trips that
// ended before it, so the default placement uses them and never falls back.
func TestDefaultWindowStartsBeforeIt(t *testing.T) {
	all := loadReal(t).Trips
	o := DefaultOptions()
	skip := time.Duration(o.SkipMinutes * float64(time.Minute))
	window := time.Duration(o.Minutes * float64(time.Minute))
	trips := SelectWindowAt(all, skip, window)
	opens := WindowStart(all, skip)
	if len(trips) < 1000 || trips[0].PickupTime.Before(opens) || !trips[len(trips)-1].PickupTime.Before(opens.Add(window)) {
		t.Fatalf("default window from %v: %d trips", opens, len(trips))
	}
	pool, err := BuildStartPool(all, opens, opens.Add(window), o.DriverStarts)
	if err != nil {
		t.Fatal(err)
	}
	if pool.TripsBefore < 1000 || pool.TripsFallback != 0 {
		t.Fatalf("default pool: before %d fallback %d; want the dropoffs of trips ended before the window", pool.TripsBefore, pool.TripsFallback)
	}
	t.Logf("default window %v + %v: %d trips, %d start dropoffs before it", opens, window, len(trips), pool.TripsBefore)
	for _, mins := range []float64{5, 30} { // make demo REPLAY_ARGS examples still find trips
		if n := len(SelectWindowAt(all, skip, time.Duration(mins*float64(time.Minute)))); n == 0 {
			t.Fatalf("--minutes %g: no trips", mins)
		}
	}
	if SelectWindowAt(all, -time.Minute, window) != nil {
		t.Fatal("negative skip selected trips")
	}
}
