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
