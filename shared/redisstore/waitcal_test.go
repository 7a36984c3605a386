package redisstore_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/flagdown/flagdown/shared/dispatch"
)

// TestWaitCalibration: the errors of a cell's quotes fold into its calibration and the city's;
// ReadSurge applies the city's while the cell has fewer than dispatch.WaitCalibrationMinSamples
// pickups, then the cell's; another cell falls back to the city's.
func TestWaitCalibration(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	a := dispatch.Point{Lat: 40.7549, Lng: -73.9840}
	b := dispatch.Point{Lat: 40.6413, Lng: -73.7781} // JFK: another cell
	now := time.Now()
	read := func(p dispatch.Point) float64 {
		t.Helper()
		rd, err := s.ReadSurge(ctx, false, "", dispatch.Area{}, time.Minute, 10, p, 1000)
		if err != nil {
			t.Fatal(err)
		}
		return rd.WaitCalibrationS
	}
	if got := read(a); got != 0 {
		t.Fatalf("no data: calibration %.1f, want 0", got)
	}
	if err := s.RecordWaitError(ctx, b, now, -20); err != nil { // the city: -20
		t.Fatal(err)
	}
	// The cell's first quote was 30 s short; the next ones held that correction and were right.
	for k := range dispatch.WaitCalibrationMinSamples - 1 {
		if err := s.RecordWaitError(ctx, a, now, float64(30*(1-min(k, 1)))); err != nil {
			t.Fatal(err)
		}
	}
	const city = -5.0 // -20, then +30 × 1/2, then errors of 0
	if got := read(a); math.Abs(got-city) > 0.01 {
		t.Errorf("cell below its minimum: calibration %.2f, want the city's %.2f", got, city)
	}
	if err := s.RecordWaitError(ctx, a, now, 0); err != nil {
		t.Fatal(err)
	}
	if got := read(a); math.Abs(got-30) > 0.01 {
		t.Errorf("cell at its minimum: calibration %.2f, want its own 30", got)
	}
	if got := read(b); math.Abs(got-city) > 0.01 {
		t.Errorf("other cell (one pickup): calibration %.2f, want the city's %.2f", got, city)
	}
}
