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
	// DropoffTime is the trip's real dropoff time when the file has a dropoff_time column; zero
	// otherwise (the 2013 testdata file has none). DropoffAt estimates it when it is zero.
	DropoffTime time.Time
}

// EstimatedTripSpeedMPS is the straight-line speed, metres per second, at which DropoffAt estimates a
// dropoff time the file does not give: 4.5 m/s (10 mph). Source: published analyses of the 2013 TLC
// trip records put the average yellow-cab trip speed at about 13 mph (I Quant NY) and the median at
// about 10 mph over the metered distance; a taxi's route is roughly 1.3 times the straight line
// between pickup and dropoff, so 13 mph metered is about 10 mph straight-line. A rough figure: it
// only decides which trips count as ended before a replayed window (see BuildStartPool).
const EstimatedTripSpeedMPS = 4.5

// DropoffAt is the trip's dropoff time: DropoffTime when the file gave one, otherwise the pickup time
// plus the straight-line pickup→dropoff distance at EstimatedTripSpeedMPS.
func (t Trip) DropoffAt() time.Time {
	if !t.DropoffTime.IsZero() {
		return t.DropoffTime
	}
	s := Haversine(t.Pickup, t.Dropoff) / EstimatedTripSpeedMPS
	return t.PickupTime.Add(time.Duration(s * float64(time.Second)))
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
// (pickup_time is RFC 3339 with offset; coordinates WGS84 degrees). Extra trailing columns are
// ignored, except one named dropoff_time (RFC 3339 with offset, not before pickup_time), which fills
// Trip.DropoffTime. Rows that fail to parse (wrong column count, bad time, non-numeric or non-finite or
// out-of-range coordinates, a bad or earlier dropoff_time) are skipped and counted. The result is
// sorted by pickup time.
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
	dropoffCol := -1
	for i := len(want); i < len(header); i++ {
		if strings.TrimSpace(header[i]) == "dropoff_time" {
			dropoffCol = i
			break
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
		if err == nil && dropoffCol >= 0 {
			t.DropoffTime, err = parseDropoffTime(rec, dropoffCol, t.PickupTime)
		}
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

// parseDropoffTime reads the dropoff_time column col of rec; it must not be before pickup.
func parseDropoffTime(rec []string, col int, pickup time.Time) (time.Time, error) {
	if col >= len(rec) {
		return time.Time{}, fmt.Errorf("%d columns, want %d (dropoff_time)", len(rec), col+1)
	}
	ts, err := time.Parse(time.RFC3339, strings.TrimSpace(rec[col]))
	if err != nil {
		return time.Time{}, fmt.Errorf("dropoff_time: %w", err)
	}
	if ts.Before(pickup) {
		return time.Time{}, fmt.Errorf("dropoff_time %s is before pickup_time", rec[col])
	}
	return ts, nil
}

// SelectWindowAt returns the trips (sorted by pickup time) whose pickup lies in
// [first pickup + skip, first pickup + skip + window) (simulated = real time; skip ≥ 0), a
// sub-slice of trips keeping their order, and the instant the window opens (zero when trips is
// empty). Skipping leaves trips before the window whose dropoffs can place the drivers
// (StartsDropoffsBefore).
func SelectWindowAt(trips []Trip, skip, window time.Duration) []Trip {
	if len(trips) == 0 || window <= 0 || skip < 0 {
		return nil
	}
	start := WindowStart(trips, skip)
	end := start.Add(window)
	i := sort.Search(len(trips), func(i int) bool { return !trips[i].PickupTime.Before(start) })
	n := sort.Search(len(trips), func(i int) bool { return !trips[i].PickupTime.Before(end) })
	return trips[i:n]
}

// WindowStart is when a window skipping skip after the first pickup of trips (sorted by pickup
// time) opens; zero when trips is empty.
func WindowStart(trips []Trip, skip time.Duration) time.Time {
	if len(trips) == 0 {
		return time.Time{}
	}
	return trips[0].PickupTime.Add(skip)
}

// SpreadMinute returns a copy of trips in which every pickup time with zero seconds is moved by a
// seeded uniform offset in [0, 60 s): the source records pickups to the minute, and replaying all
// of a minute's requests in the same instant would measure the data's rounding, not the platform.
// The result stays inside each trip's own minute and is sorted by the new pickup time.
func SpreadMinute(trips []Trip, seed uint64) []Trip {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	out := append([]Trip(nil), trips...)
	for i := range out {
		if t := out[i].PickupTime; t.Second() == 0 && t.Nanosecond() == 0 {
			out[i].PickupTime = t.Add(time.Duration(rng.Float64() * float64(time.Minute)))
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].PickupTime.Before(out[j].PickupTime) })
	return out
}
