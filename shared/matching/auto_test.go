package matching

import (
	"testing"
	"time"

	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/dispatch"
)

// TestDecide: the adaptive rule on each of its branches, hysteresis (the band between the two
// thresholds keeps the area's mode) and the minimum dwell included.
func TestDecide(t *testing.T) {
	t.Parallel()
	p := DefaultAutoParams() // batch at ≤ 1.5 candidates per request, greedy at ≥ 3, 20 s dwell
	now := time.Date(2026, 12, 1, 21, 0, 0, 0, time.UTC)
	long := AreaMode{Mode: config.MatchBatch, Since: now.Add(-time.Minute)}
	longG := AreaMode{Mode: config.MatchGreedy, Since: now.Add(-time.Minute)}
	fresh := AreaMode{Mode: config.MatchBatch, Since: now.Add(-5 * time.Second)}
	for _, tc := range []struct {
		name     string
		load     AreaLoad
		prev     AreaMode
		batch    bool
		areaMode string
		reason   string
		sinceNow bool // the area entered its mode now
	}{
		{"no candidate, alone: at once, area kept", AreaLoad{Candidates: 0, Requests: 1}, long, false, config.MatchBatch, ReasonLone, false},
		{"one candidate, alone: at once, area kept", AreaLoad{Candidates: 1, Requests: 1}, long, false, config.MatchBatch, ReasonLone, false},
		{"no request counted (surge off), one candidate: at once", AreaLoad{Candidates: 1, Requests: 0}, longG, false, config.MatchGreedy, ReasonLone, false},
		// Scarce supply: a ride with no candidate near and others competing waits for the window,
		// where the next freed driver goes to the nearest of them (not to whichever asked first).
		{"no candidate, crowded area: scarce", AreaLoad{Candidates: 0, Requests: 9}, longG, true, config.MatchBatch, ReasonScarce, true},
		{"one candidate, crowded batch area: stays batch", AreaLoad{Candidates: 1, Requests: 9}, long, true, config.MatchBatch, ReasonScarce, false},
		{"new area, scarce", AreaLoad{Candidates: 3, Requests: 6}, AreaMode{}, true, config.MatchBatch, ReasonScarce, true},
		{"new area, ample", AreaLoad{Candidates: 12, Requests: 2}, AreaMode{}, false, config.MatchGreedy, ReasonAmple, true},
		{"new area, in the band: greedy", AreaLoad{Candidates: 4, Requests: 2}, AreaMode{}, false, config.MatchGreedy, ReasonHold, true},
		{"batch area in the band stays batch", AreaLoad{Candidates: 4, Requests: 2}, long, true, config.MatchBatch, ReasonHold, false},
		{"greedy area in the band stays greedy", AreaLoad{Candidates: 4, Requests: 2}, longG, false, config.MatchGreedy, ReasonHold, false},
		{"one request: never scarce", AreaLoad{Candidates: 2, Requests: 1}, longG, false, config.MatchGreedy, ReasonHold, false},
		{"no request counted (surge off) is one", AreaLoad{Candidates: 2, Requests: 0}, longG, false, config.MatchGreedy, ReasonHold, false},
		{"batch area, ample: greedy", AreaLoad{Candidates: 9, Requests: 3}, long, false, config.MatchGreedy, ReasonAmple, true},
		{"greedy area, scarce: batch", AreaLoad{Candidates: 3, Requests: 2}, longG, true, config.MatchBatch, ReasonScarce, true},
		{"batch area entered 5 s ago, ample: dwell", AreaLoad{Candidates: 9, Requests: 3}, fresh, true, config.MatchBatch, ReasonDwell, false},
	} {
		d := Decide(p, tc.load, tc.prev, now)
		if d.Batch != tc.batch || d.Area.Mode != tc.areaMode || d.Reason != tc.reason {
			t.Errorf("%s: %+v, want batch %v, area %s, reason %s", tc.name, d, tc.batch, tc.areaMode, tc.reason)
			continue
		}
		if tc.sinceNow != d.Area.Since.Equal(now) {
			t.Errorf("%s: area since %v, want entered now %v", tc.name, d.Area.Since, tc.sinceNow)
		}
		if want := map[bool]string{true: config.MatchBatch, false: config.MatchGreedy}[tc.batch]; d.Mode() != want {
			t.Errorf("%s: Mode() %s, want %s", tc.name, d.Mode(), want)
		}
	}
}

// TestDecideDoesNotFlap: a load oscillating around one threshold switches the area once, not on
// every window.
func TestDecideDoesNotFlap(t *testing.T) {
	t.Parallel()
	p := DefaultAutoParams()
	now := time.Date(2026, 12, 1, 21, 0, 0, 0, time.UTC)
	area := AreaMode{}
	switches := 0
	for k := range 60 { // a decision every 2 s for 2 minutes
		load := AreaLoad{Candidates: 3, Requests: 2} // ratio 1.5: scarce
		if k%2 == 1 {
			load.Candidates = 4 // ratio 2: in the band
		}
		d := Decide(p, load, area, now.Add(time.Duration(k)*2*time.Second))
		if d.Area.Mode != area.Mode && area.Mode != "" {
			switches++
		}
		area = d.Area
	}
	if switches != 0 || area.Mode != config.MatchBatch {
		t.Errorf("%d switches, area %s; want the area in batch from the first window, no switch", switches, area.Mode)
	}
	// Around the ample threshold with the dwell: at most one switch per 20 s.
	area, switches = AreaMode{Mode: config.MatchBatch, Since: now}, 0
	for k := range 60 {
		load := AreaLoad{Candidates: 6, Requests: 2} // ratio 3: ample
		if k%2 == 1 {
			load.Candidates = 3 // ratio 1.5: scarce
		}
		d := Decide(p, load, area, now.Add(time.Duration(k)*2*time.Second))
		if d.Area.Mode != area.Mode {
			switches++
		}
		area = d.Area
	}
	if switches > 6 {
		t.Errorf("%d switches in 2 minutes, want at most one per 20 s dwell (6)", switches)
	}
}

// TestWaitWeightedServesTheLongestWaiting: one driver and two rides. By score alone the new ride,
// 200 m from him, is served; the ride that has waited 120 s, 900 m from him, is discounted 1,200 m
// and served instead. With no wait the two planners agree.
func TestWaitWeightedServesTheLongestWaiting(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 21, 0, 0, 0, time.UTC)
	score := dispatch.ScoreParams{DefaultRating: 4.8}
	in := Input{
		Rides: []*dispatch.Ride{{ID: "r-new", CreatedAt: now.Add(-5 * time.Second)}, {ID: "r-old", CreatedAt: now.Add(-120 * time.Second)}},
		Candidates: [][]dispatch.Candidate{
			{{DriverID: "d-1", DistanceM: 200}},
			{{DriverID: "d-1", DistanceM: 900}},
		},
		Now: now,
	}
	ww := WaitWeighted{Score: score, WeightMPerS: 10, CapS: 180}
	if got := (LeastTotalScore{Score: score}).Plan(in).Driver; got[0] != "d-1" || got[1] != "" {
		t.Fatalf("LeastTotalScore drivers %v, want d-1 for r-new (the test's premise)", got)
	}
	p := ww.Plan(in)
	if p.Driver[0] != "" || p.Driver[1] != "d-1" || p.Assigned != 1 {
		t.Errorf("WaitWeighted drivers %v (%d assigned), want d-1 for r-old, who waited 115 s longer", p.Driver, p.Assigned)
	}
	if want := dispatch.Score(score, in.Candidates[1][0]); p.CostM != want {
		t.Errorf("CostM %.1f, want the undiscounted score of the pair chosen, %.1f", p.CostM, want)
	}
	in.Rides[1].CreatedAt = in.Rides[0].CreatedAt
	if got := ww.Plan(in).Driver; got[0] != "d-1" || got[1] != "" {
		t.Errorf("equal waits: WaitWeighted drivers %v, want LeastTotalScore's", got)
	}
}
