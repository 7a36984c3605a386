package replay

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Trip is one real taxi trip from the replay CSV.
type Trip struct {
	// Row is the 1-based data row number in the file (the header is row 0); it makes rider ids unique.
	Row int
	// PickupTime is the trip's real pickup time, with the file's UTC offset preserved.
	PickupTime time.Time
	// Pickup is the pickup position (WGS84 degrees, lat/lng).
	Pickup LatLng
	// Dropoff is the dropoff position (WGS84 degrees, lat/lng).
	Dropoff LatLng
}

// TripFile is the parsed content of a trips CSV.
type TripFile struct {
	// Trips are the rows that parsed, sorted by PickupTime (stable, so file order breaks ties).
	Trips []Trip
	// Skipped is how many data rows failed to parse and were left out.
	Skipped int
	// SkipReasons holds the first few parse errors, for display.
	SkipReasons []string
}

// maxSkipReasons bounds TripFile.SkipReasons.
const maxSkipReasons = 5

// LoadTripsFile opens path and parses it with LoadTrips.
func LoadTripsFile(path string) (*TripFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tf, err := LoadTrips(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return tf, nil
}

// LoadTrips parses a CSV with the header pickup_time,pickup_lat,pickup_lng,dropoff_lat,dropoff_lng
// (extra trailing columns are ignored; pickup_time is RFC 3339 with offset; coordinates WGS84 degrees).
// Rows that fail to parse (wrong column count, bad time, non-numeric or non-finite or out-of-range
// coordinates) are skipped and counted. The result is sorted by pickup time.
func LoadTrips(r io.Reader) (*TripFile, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("reading header: %w", err)
	}
	want := []string{"pickup_time", "pickup_lat", "pickup_lng", "dropoff_lat", "dropoff_lng"}
	if len(header) < len(want) {
		return nil, fmt.Errorf("header has %d columns, want at least %v", len(header), want)
	}
	for i, w := range want {
		if strings.TrimSpace(strings.TrimPrefix(header[i], "\ufeff")) != w {
			return nil, fmt.Errorf("header column %d is %q, want %q", i+1, header[i], w)
		}
	}
	tf := &TripFile{}
	row := 0
	skip := func(err error) {
		tf.Skipped++
		if len(tf.SkipReasons) < maxSkipReasons {
			tf.SkipReasons = append(tf.SkipReasons, fmt.Sprintf("row %d: %v", row, err))
		}
	}
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		row++
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				skip(err)
				continue
			}
			return nil, err
		}
		t, err := parseTrip(rec)
		if err != nil {
			skip(err)
			continue
		}
		t.Row = row
		tf.Trips = append(tf.Trips, t)
	}
	sort.SliceStable(tf.Trips, func(i, j int) bool { return tf.Trips[i].PickupTime.Before(tf.Trips[j].PickupTime) })
	return tf, nil
}

func parseTrip(rec []string) (Trip, error) {
	if len(rec) < 5 {
		return Trip{}, fmt.Errorf("%d columns, want 5", len(rec))
	}
	ts, err := time.Parse(time.RFC3339, strings.TrimSpace(rec[0]))
	if err != nil {
		return Trip{}, fmt.Errorf("pickup_time: %w", err)
	}
	var v [4]float64
	names := [4]string{"pickup_lat", "pickup_lng", "dropoff_lat", "dropoff_lng"}
	for i := range v {
		f, err := strconv.ParseFloat(strings.TrimSpace(rec[i+1]), 64)
		if err != nil {
			return Trip{}, fmt.Errorf("%s: %w", names[i], err)
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return Trip{}, fmt.Errorf("%s: not finite", names[i])
		}
		limit := 90.0
		if i%2 == 1 {
			limit = 180
		}
		if f < -limit || f > limit {
			return Trip{}, fmt.Errorf("%s: %v out of range", names[i], f)
		}
		v[i] = f
	}
	return Trip{PickupTime: ts, Pickup: LatLng{v[0], v[1]}, Dropoff: LatLng{v[2], v[3]}}, nil
}

// SelectWindow returns the trips (sorted by pickup time) whose pickup lies in
// [first pickup, first pickup + window), where window is simulated (= real) time. It returns a
// sub-slice of trips, keeping their order.
func SelectWindow(trips []Trip, window time.Duration) []Trip {
	if len(trips) == 0 || window <= 0 {
		return nil
	}
	end := trips[0].PickupTime.Add(window)
	n := sort.Search(len(trips), func(i int) bool { return !trips[i].PickupTime.Before(end) })
	return trips[:n]
}

// DrawDriverStarts draws n driver start positions (WGS84 degrees, lat/lng) uniformly with replacement
// from the pickups of trips, deterministically from seed: the same trips, n and seed give the same
// positions.
func DrawDriverStarts(trips []Trip, n int, seed uint64) []LatLng {
	if len(trips) == 0 || n <= 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(seed, 0x5eed_d21e_0001))
	out := make([]LatLng, n)
	for i := range out {
		out[i] = trips[rng.IntN(len(trips))].Pickup
	}
	return out
}
