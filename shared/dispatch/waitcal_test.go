package dispatch_test

import (
	"math"
	"testing"
	"time"

	"github.com/flagdown/flagdown/shared/dispatch"
)

// TestFoldWaitErrorIsUnbiased: quotes whose distance-based part is always 40 s short, folded one
// by one with the calibration each quote held, converge to a 40 s calibration; the first samples
// give their plain mean.
func TestFoldWaitErrorIsUnbiased(t *testing.T) {
	t.Parallel()
	if got := dispatch.FoldWaitError(0, 0, 30); got != 30 {
		t.Errorf("first sample: %.2f, want 30 (its own value)", got)
	}
	if got := dispatch.FoldWaitError(30, 1, 10); got != 35 {
		t.Errorf("second sample: %.2f, want 35 (a quote holding 30 was 10 short: residuals 30 and 40)", got)
	}
	cal := 0.0
	for n := range 200 {
		base := 60.0
		actual := base + 40 + float64(n%7-3) // ±3 s of noise around a 40 s residual
		quoted := dispatch.Calibrate(dispatch.WaitEstimate{DriveS: base}, cal).TotalS
		cal = dispatch.FoldWaitError(cal, n, actual-quoted)
	}
	if math.Abs(cal-40) > 2.5 {
		t.Errorf("calibration after 200 pickups %.1f s, want 40 ± 2.5", cal)
	}
	if got := dispatch.FoldWaitError(5, 3, math.NaN()); got != 5 {
		t.Errorf("NaN error folded: %.2f, want 5 unchanged", got)
	}
}

// TestCalibrate: the calibration is added to the total, which stays ≥ 0.
func TestCalibrate(t *testing.T) {
	t.Parallel()
	w := dispatch.Calibrate(dispatch.WaitEstimate{MatchS: 20, DriveS: 100, TotalS: 120}, -35.26)
	if w.TotalS != 85 || w.CalibrationS != -35.3 {
		t.Errorf("%+v, want total 85 s, calibration -35.3 s", w)
	}
	if w := dispatch.Calibrate(dispatch.WaitEstimate{DriveS: 10}, -50); w.TotalS != 0 {
		t.Errorf("%+v, want total 0, never negative", w)
	}
}

// TestRiderWaitKeepsCalibration: the rider is quoted the calibrated wait, in whole steps of
// RiderWaitStepS (the calibration is rounded on its own, so the parts still say nothing finer
// about a driver's position than the rounded drive).
func TestRiderWaitKeepsCalibration(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cal, wantCal, wantTotal float64
	}{
		{cal: 40, wantCal: 45, wantTotal: 165},   // 30 + 90 + 45
		{cal: -37, wantCal: -30, wantTotal: 90},  // 30 + 90 - 30
		{cal: -500, wantCal: -495, wantTotal: 0}, // never negative
		{cal: 0, wantCal: 0, wantTotal: 120},
	} {
		w := dispatch.RiderWait(dispatch.Calibrate(dispatch.WaitEstimate{MatchS: 31, DriveS: 94}, c.cal))
		if w.TotalS != c.wantTotal || w.CalibrationS != c.wantCal || w.MatchS != 30 || w.DriveS != 90 {
			t.Errorf("calibration %.0f: %+v, want match 30, drive 90, calibration %.0f, total %.0f", c.cal, w, c.wantCal, c.wantTotal)
		}
	}
}

// TestRiderSeconds: a duration on the platform's clock in the riders' seconds; a speed-up that is
// not a finite number > 0 counts as 1.
func TestRiderSeconds(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		speedup, want float64
	}{{1, 12.5}, {8, 100}, {0, 12.5}, {-3, 12.5}, {math.NaN(), 12.5}, {math.Inf(1), 12.5}} {
		if got := dispatch.RiderSeconds(12500*time.Millisecond, c.speedup); got != c.want {
			t.Errorf("speedup %v: %v s, want %v", c.speedup, got, c.want)
		}
	}
}
