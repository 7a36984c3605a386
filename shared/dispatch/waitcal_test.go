package dispatch_test

import (
	"math"
	"testing"
	"time"

	"github.com/flagdown/flagdown/shared/dispatch"
)

// TestFoldWaitResidualIsUnbiased: quotes whose distance-based part is always 40 s short, folded
// one by one, converge to a 40 s calibration; the first samples give their plain mean.
func TestFoldWaitResidualIsUnbiased(t *testing.T) {
	t.Parallel()
	if got := dispatch.FoldWaitResidual(0, 0, 30); got != 30 {
		t.Errorf("first sample: %.2f, want 30 (its own value)", got)
	}
	if got := dispatch.FoldWaitResidual(30, 1, 40); got != 35 {
		t.Errorf("second sample: %.2f, want 35 (residuals 30 and 40)", got)
	}
	cal := 0.0
	for n := range 200 {
		base := 60.0
		actual := base + 40 + float64(n%7-3) // ±3 s of noise around a 40 s residual
		cal = dispatch.FoldWaitResidual(cal, n, actual-base)
	}
	if math.Abs(cal-40) > 2.5 {
		t.Errorf("calibration after 200 pickups %.1f s, want 40 ± 2.5", cal)
	}
	if got := dispatch.FoldWaitResidual(5, 3, math.NaN()); got != 5 {
		t.Errorf("NaN residual folded: %.2f, want 5 unchanged", got)
	}
}

// TestCalibrate: the calibration is added to the total, which stays ≥ 0.
func TestCalibrate(t *testing.T) {
	t.Parallel()
	w := dispatch.Calibrate(dispatch.WaitEstimate{MatchS: 20, DriveS: 100, TotalS: 120}, -35.26)
	if w.TotalS != 85 || w.CalibrationS != -35.3 {
		t.Errorf("%+v, want total 85 s, calibration -35.3 s", w)
	}
	// The total never goes below 0; the calibration part is then what was applied (the parts add
	// up to the total), so the quote's distance-based part is still known when it is judged.
	if w := dispatch.Calibrate(dispatch.WaitEstimate{DriveS: 10}, -50); w.TotalS != 0 || w.CalibrationS != -10 {
		t.Errorf("%+v, want total 0, calibration -10 (as applied)", w)
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
		{cal: -500, wantCal: -120, wantTotal: 0}, // never negative: the part as applied
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

// waitLearner is the platform's wait estimate as it learns from pickups, for a city with one drive
// pace: quote is what a rider is quoted for a driver nearestM metres away (no match delay), pickup
// what the platform folds once that driver, nearestM away when he accepted, took actualS seconds
// from the request to the pickup.
type waitLearner struct {
	cal  float64
	n    int
	pace dispatch.DrivePace
}

func (l *waitLearner) quote(nearestM float64) float64 {
	w, _ := dispatch.EstimateWait(0, nearestM, l.pace.SecondsPerMetre(1.3, 7))
	return dispatch.RiderWait(dispatch.Calibrate(w, l.cal)).TotalS
}

func (l *waitLearner) pickup(nearestM, quotedS, actualS float64) {
	l.cal = dispatch.FoldWaitResidual(l.cal, l.n, actualS-(quotedS-dispatch.RiderWait(dispatch.WaitEstimate{CalibrationS: l.cal}).CalibrationS))
	l.n++
	l.pace = dispatch.FoldDrivePace(l.pace, actualS, nearestM)
}

// TestWaitQuotesLearnTheDrivePace: drivers who drive 8 m/s in a straight line (what flagdown
// replay's do) while the configuration says 7 m/s along roads 1.3 times longer, picking riders up
// 100..1,500 m away: once the platform has seen 200 pickups its quotes are off by at most what the
// rider rounding (15 s steps) explains, on average. A constant correction cannot do it: the error
// of the configured pace grows with the distance (0.061 s per metre).
func TestWaitQuotesLearnTheDrivePace(t *testing.T) {
	t.Parallel()
	const actualPace = 1.0 / 8 // seconds per metre
	var l waitLearner
	dist := func(i int) float64 { return 100 + float64((i*7919)%1401) } // 100..1,500 m, spread
	for i := range 200 {
		d := dist(i)
		l.pickup(d, l.quote(d), d*actualPace)
	}
	var absSum, signedSum float64
	const n = 200
	for i := 200; i < 200+n; i++ {
		d := dist(i)
		e := l.quote(d) - d*actualPace
		absSum, signedSum = absSum+math.Abs(e), signedSum+e
	}
	if mae, signed := absSum/n, signedSum/n; mae > 7.5 || math.Abs(signed) > 3 {
		t.Errorf("after 200 pickups: MAE %.1f s, mean signed %+.1f s; want MAE ≤ 7.5 s (the 15 s rounding), |signed| ≤ 3 s", mae, signed)
	}
}

// TestDrivePace: the configured pace until DrivePaceMinSamples pickups, then the ratio of the mean
// drive to the mean distance (the first samples their plain means); bad samples are ignored.
func TestDrivePace(t *testing.T) {
	t.Parallel()
	var p dispatch.DrivePace
	if got := p.SecondsPerMetre(1.3, 7); math.Abs(got-1.3/7) > 1e-12 {
		t.Errorf("no pickups: %.4f s/m, want the configured 1.3 / 7", got)
	}
	if got := p.SecondsPerMetre(1.3, 0); got != 0 {
		t.Errorf("no pickups, speed 0: %.4f s/m, want 0 (no estimate)", got)
	}
	for i := range dispatch.DrivePaceMinSamples {
		if got := p.SecondsPerMetre(1.3, 7); math.Abs(got-1.3/7) > 1e-12 {
			t.Fatalf("%d pickups: %.4f s/m, want the configured one still", i, got)
		}
		// 5 m at 5 s (1 s/m alone) and 995 m at 95 s: a mean of ratios would say 0.55 s/m.
		d, s := 995.0, 95.0
		if i%2 == 0 {
			d, s = 5, 5
		}
		p = dispatch.FoldDrivePace(p, s, d)
	}
	if got, want := p.SecondsPerMetre(1.3, 7), 100.0/1000; math.Abs(got-want) > 1e-9 {
		t.Errorf("after %d pickups: %.4f s/m, want %.4f (mean drive / mean distance)", p.N, got, want)
	}
	for _, bad := range [][2]float64{{math.NaN(), 10}, {10, math.Inf(1)}, {-1, 10}, {10, -1}} {
		if q := dispatch.FoldDrivePace(p, bad[0], bad[1]); q != p {
			t.Errorf("sample %v folded: %+v", bad, q)
		}
	}
}

// calLearner is the wait calibration as the platform runs it: a ride is quoted with the calibration
// of the moment, and its pickup is folded later, after the pickups of rides quoted since.
type calLearner struct {
	cal float64
	n   int
}

// quote is the calibrated total of a distance-based estimate of baseS, and its calibration part.
func (l *calLearner) quote(baseS float64) (totalS, calS float64) {
	w := dispatch.Calibrate(dispatch.WaitEstimate{DriveS: baseS}, l.cal)
	return w.TotalS, w.CalibrationS
}

// pickup folds a ride quoted quotedS (calibration part quotedCalS) that took actualS.
func (l *calLearner) pickup(quotedS, quotedCalS, actualS float64) {
	l.cal = dispatch.FoldWaitResidual(l.cal, l.n, actualS-(quotedS-quotedCalS))
	l.n++
}

// TestWaitCalibrationIsStableWhenPickupsLag: in a busy city a ride is picked up after the pickups
// of the 60 rides quoted after it were folded (about one minute of make demo's 150 pickups a
// minute, one wait). The distance-based estimate is 40 s short (±3 s of noise); the calibration
// must settle at 40 s and stay there, not swing: a fold that adds the error of a quote to the
// calibration of now (which already moved since the quote) corrects the same error 60 times.
func TestWaitCalibrationIsStableWhenPickupsLag(t *testing.T) {
	t.Parallel()
	const lag = 60
	type pending struct{ quoted, cal, actual float64 }
	var l calLearner
	var queue []pending
	var cals []float64
	for i := range 3000 {
		base := 60.0 + float64(i%11)*10
		q, c := l.quote(base)
		queue = append(queue, pending{q, c, base + 40 + float64(i%7-3)})
		if len(queue) > lag {
			p := queue[0]
			queue = queue[1:]
			l.pickup(p.quoted, p.cal, p.actual)
		}
		if i >= 2500 {
			cals = append(cals, l.cal)
		}
	}
	lo, hi := cals[0], cals[0]
	for _, c := range cals {
		lo, hi = math.Min(lo, c), math.Max(hi, c)
	}
	if lo < 37 || hi > 43 {
		t.Errorf("calibration over the last 500 quotes between %.1f and %.1f s; want within 40 ± 3 s", lo, hi)
	}
}
