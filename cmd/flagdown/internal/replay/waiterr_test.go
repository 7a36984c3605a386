package replay

import (
	"math"
	"testing"
	"time"
)

// TestWaitErrors: the error per simulated minute and over all, and the per-cell constant-mean
// baseline, which predicts each ride from the pickups known at its request (its cell's, else the
// city's) and nothing before the first pickup.
func TestWaitErrors(t *testing.T) {
	t.Parallel()
	s := func(cell string, req, arr, quoted float64) WaitSample {
		return WaitSample{Cell: cell, RequestedAt: time.Duration(req * float64(time.Second)),
			ArrivedAt: time.Duration(arr * float64(time.Second)), QuotedS: quoted}
	}
	rep := WaitErrors([]WaitSample{
		s("A", 70, 130, 80),  // minute 1: actual 60, error +20; baseline: A's first (60) → 0
		s("A", 0, 60, 50),    // minute 0: actual 60, error −10; nothing picked up yet: no baseline
		s("B", 10, 100, 90),  // minute 0: actual 90, error 0; nothing picked up at 10 s: no baseline
		s("B", 100, 130, 60), // minute 1: actual 30, error +30; B's ride arrived at 100 (≤ 100): 90 → |90−30| = 60
		s("C", 65, 125, 60),  // minute 1: actual 60, error 0; C has none: the city's (60) → 0
	})
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if rep.Count != 5 || !near(rep.MAES, 12) || !near(rep.MeanSignedS, 8) {
		t.Errorf("overall: n %d MAE %v signed %v, want 5, 12, 8", rep.Count, rep.MAES, rep.MeanSignedS)
	}
	if rep.BaselineCount != 3 || !near(rep.BaselineMAES, 20) || !near(rep.EstimateMAEOnBaselineS, 50.0/3) || !near(rep.MAERatio, 50.0/60) {
		t.Errorf("baseline: n %d MAE %v estimate's %v ratio %v, want 3, 20, 16.67, 0.833",
			rep.BaselineCount, rep.BaselineMAES, rep.EstimateMAEOnBaselineS, rep.MAERatio)
	}
	if len(rep.ByMinute) != 2 {
		t.Fatalf("by minute: %+v, want minutes 0 and 1", rep.ByMinute)
	}
	m0, m1 := rep.ByMinute[0], rep.ByMinute[1]
	if m0.Minute != 0 || m0.Count != 2 || !near(m0.MAES, 5) || !near(m0.MeanSignedS, -5) || m0.BaselineCount != 0 {
		t.Errorf("minute 0: %+v, want n 2, MAE 5, signed −5, no baseline", m0)
	}
	if m1.Minute != 1 || m1.Count != 3 || !near(m1.MAES, 50.0/3) || !near(m1.MeanSignedS, 50.0/3) || m1.BaselineCount != 3 || !near(m1.BaselineMAES, 20) {
		t.Errorf("minute 1: %+v, want n 3, MAE 16.67, signed +16.67, baseline n 3 MAE 20", m1)
	}
	if empty := WaitErrors(nil); empty.Count != 0 || empty.ByMinute == nil || empty.MAERatio != 0 {
		t.Errorf("no samples: %+v", empty)
	}
}

// TestWaitErrorsByPart: the quote's match part is judged against request → accept, its drive part
// against accept → arrival, and rides quoted without parts are left out of the parts alone.
func TestWaitErrorsByPart(t *testing.T) {
	t.Parallel()
	sec := func(v float64) time.Duration { return time.Duration(v * float64(time.Second)) }
	f := func(v float64) *float64 { return &v }
	rep := WaitErrors([]WaitSample{
		// match quoted 15, took 30 (−15); drive quoted 60, took 45 (+15); calibration −15
		{Cell: "A", RequestedAt: sec(0), AcceptedAt: sec(30), ArrivedAt: sec(75), QuotedS: 60, Offers: 1,
			QuotedMatchS: f(15), QuotedDriveS: f(60), QuotedCalibrationS: f(-15)},
		// match quoted 30, took 10 (+20); drive quoted 30, took 60 (−30); calibration +30
		{Cell: "B", RequestedAt: sec(10), AcceptedAt: sec(20), ArrivedAt: sec(80), QuotedS: 90, Offers: 2,
			QuotedMatchS: f(30), QuotedDriveS: f(30), QuotedCalibrationS: f(30)},
		// no parts: counted overall, not in the parts
		{Cell: "C", RequestedAt: sec(0), AcceptedAt: sec(5), ArrivedAt: sec(50), QuotedS: 50, Offers: 1},
	})
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	p := rep.Parts
	if rep.Count != 3 || p == nil {
		t.Fatalf("count %d parts %+v, want 3 and parts", rep.Count, p)
	}
	if p.Count != 2 || !near(p.MatchMAES, 17.5) || !near(p.MatchSignedS, 2.5) || !near(p.DriveMAES, 22.5) ||
		!near(p.DriveSignedS, -7.5) || !near(p.CalibrationMeanS, 7.5) {
		t.Errorf("parts %+v, want n 2, match MAE 17.5 signed +2.5, drive MAE 22.5 signed −7.5, calibration mean +7.5", *p)
	}
	// Offered to one driver: A (error −15) and C (error 0); B went to a second driver (error +20).
	if fo := rep.FirstOffer; fo.Count != 2 || !near(fo.MAES, 7.5) || !near(fo.MeanSignedS, -7.5) {
		t.Errorf("first offer %+v, want n 2, MAE 7.5, signed −7.5", fo)
	}
	if none := WaitErrors([]WaitSample{{Cell: "C", ArrivedAt: sec(50), QuotedS: 50}}); none.Parts != nil {
		t.Errorf("no ride with parts: parts %+v, want nil", *none.Parts)
	}
}

// TestCensorWaitSamples: a ride requested near the end of the run is reached within it only when
// its wait is short, so the late minutes hold the short waits and miss the long ones (right
// censoring); judging them biases the error toward over-quoting. Only rides requested at least
// the horizon (the 95th percentile of the observed waits) before the end of the observation are kept.
func TestCensorWaitSamples(t *testing.T) {
	t.Parallel()
	var samples []WaitSample
	// Twenty rides requested every 10 s from 0 s, each waiting 100 s, quoted 100 s: exact.
	for i := range 20 {
		req := time.Duration(i*10) * time.Second
		samples = append(samples, WaitSample{Cell: "A", RequestedAt: req, ArrivedAt: req + 100*time.Second, QuotedS: 100})
	}
	// Two rides requested at 280 s, near the end (the run stopped at 290 s), reached only because
	// their waits were short (10 s); their neighbours with 100 s waits would have been reached at
	// 380 s, after the run.
	for range 2 {
		samples = append(samples, WaitSample{Cell: "A", RequestedAt: 280 * time.Second, ArrivedAt: 290 * time.Second, QuotedS: 100})
	}
	kept, horizon := CensorWaitSamples(samples, 290*time.Second)
	if horizon != 100*time.Second {
		t.Errorf("horizon = %v, want 100s (the 95th percentile of the waits)", horizon)
	}
	// Kept: requested at or before 290 − 100 = 190 s: the 20 rides at 0..190 s.
	if len(kept) != 20 {
		t.Fatalf("kept %d samples, want 20", len(kept))
	}
	for _, w := range kept {
		if w.RequestedAt > 190*time.Second {
			t.Errorf("kept a ride requested at %v, after the end less the horizon (190s)", w.RequestedAt)
		}
	}
	if rep := WaitErrors(kept); rep.MeanSignedS != 0 {
		t.Errorf("signed error of the kept rides = %v, want 0 (the censored ones made it look over-quoted)", rep.MeanSignedS)
	}
	if k, h := CensorWaitSamples(nil, 290*time.Second); len(k) != 0 || h != 0 {
		t.Errorf("no samples: kept %d, horizon %v", len(k), h)
	}
	if k, h := CensorWaitSamples(samples, 0); len(k) != len(samples) || h != 0 {
		t.Errorf("end unknown: kept %d of %d, horizon %v; want all and 0", len(k), len(samples), h)
	}
}
