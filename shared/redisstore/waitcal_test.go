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
	// The distance-based part of every quote in the cell was 30 s short (residuals of 30).
	for range dispatch.WaitCalibrationMinSamples - 1 {
		if err := s.RecordWaitError(ctx, a, now, 30); err != nil {
			t.Fatal(err)
		}
	}
	city := (-20.0 + 30*float64(dispatch.WaitCalibrationMinSamples-1)) / float64(dispatch.WaitCalibrationMinSamples) // the plain mean
	if got := read(a); math.Abs(got-city) > 0.01 {
		t.Errorf("cell below its minimum: calibration %.2f, want the city's %.2f", got, city)
	}
	if err := s.RecordWaitError(ctx, a, now, 30); err != nil {
		t.Fatal(err)
	}
	city = (-20.0 + 30*float64(dispatch.WaitCalibrationMinSamples)) / float64(dispatch.WaitCalibrationMinSamples+1)
	if got := read(a); math.Abs(got-30) > 0.01 {
		t.Errorf("cell at its minimum: calibration %.2f, want its own 30", got)
	}
	if got := read(b); math.Abs(got-city) > 0.01 {
		t.Errorf("other cell (one pickup): calibration %.2f, want the city's %.2f", got, city)
	}
}

// TestDrivePaceIsLearned: the pickups folded by RecordDriveSample (drive_pace.lua) come back from
// ReadSurge as the same pace dispatch.FoldDrivePace computes in Go; a bad sample is not folded.
func TestDrivePaceIsLearned(t *testing.T) {
	t.Parallel()
	s, ctx := newStore(t), context.Background()
	p := dispatch.Point{Lat: 40.7549, Lng: -73.9840}
	read := func() dispatch.DrivePace {
		t.Helper()
		rd, err := s.ReadSurge(ctx, false, "", dispatch.Area{}, time.Minute, 10, p, 1000)
		if err != nil {
			t.Fatal(err)
		}
		return rd.DrivePace
	}
	if got := read(); got != (dispatch.DrivePace{}) {
		t.Fatalf("no pickups: %+v, want zero", got)
	}
	var want dispatch.DrivePace
	for i := range 60 {
		d := dispatch.DriveSample{DriveS: float64(10 + i), DistM: float64(80 + 8*i)}
		if err := s.RecordDriveSample(ctx, d); err != nil {
			t.Fatal(err)
		}
		want = dispatch.FoldDrivePace(want, d.DriveS, d.DistM)
	}
	if err := s.RecordDriveSample(ctx, dispatch.DriveSample{DriveS: -5, DistM: 100}); err != nil {
		t.Fatal(err)
	}
	got := read()
	if got.N != want.N || math.Abs(got.DriveS-want.DriveS) > 0.01 || math.Abs(got.DistM-want.DistM) > 0.01 {
		t.Fatalf("pace %+v, want %+v (dispatch.FoldDrivePace)", got, want)
	}
	if a, b := got.SecondsPerMetre(1.3, 7), want.SecondsPerMetre(1.3, 7); math.Abs(a-b) > 1e-4 || math.Abs(a-1.3/7) < 0.01 {
		t.Errorf("%.4f s/m, want %.4f (learned, not the configured %.4f)", a, b, 1.3/7)
	}
}
