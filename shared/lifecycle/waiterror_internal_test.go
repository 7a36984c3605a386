package lifecycle

import (
	"testing"
	"time"

	"github.com/flagdown/flagdown/shared/dispatch"
)

// TestWaitErrorOfAQuoteClampedAtZero: a quote whose negative calibration brought it to 0 s still
// teaches the calibration (its part as applied makes the parts add up to the total), so a
// calibration that undershoots is corrected by the very rides it misquotes; before, those rides
// were left out and the calibration stayed too low.
func TestWaitErrorOfAQuoteClampedAtZero(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 2, 20, 0, 0, 0, time.UTC)
	created := at.Add(-50 * time.Second)
	q := dispatch.RiderWait(dispatch.Calibrate(dispatch.WaitEstimate{MatchS: 15, DriveS: 20}, -60))
	if q.TotalS != 0 {
		t.Fatalf("quote %+v, want a total clamped at 0 (the test's premise)", q)
	}
	ride := &dispatch.Ride{Pickup: dispatch.Point{Lat: 40.75, Lng: -73.98}, CreatedAt: created, MatchStartedAt: created,
		QuotedWaitS: &q.TotalS, QuotedWaitCalS: &q.CalibrationS}
	w, ok := waitError(ride, dispatch.RideInProgress, at, 1)
	if !ok {
		t.Fatal("no residual for a quote clamped at 0")
	}
	if want := 50.0 - 30; w.ResidualS != want { // the parts as quoted: match 15 + drive 15 (20 rounded)
		t.Errorf("residual %.1f s, want %.1f (50 s waited less the 30 s the parts said before the calibration)", w.ResidualS, want)
	}
}
