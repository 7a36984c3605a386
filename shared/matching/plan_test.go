package matching

import (
	"slices"
	"testing"
	"time"

	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// score is a neutral weighting: a candidate's score is his distance in metres.
var score = dispatch.ScoreParams{DefaultRating: 5, MissMemory: time.Minute}

// ranked returns candidates at the given distances (driver id → metres), ranked by score.
func ranked(dist map[string]float64) []dispatch.Candidate {
	var cs []dispatch.Candidate
	for id, d := range dist {
		cs = append(cs, dispatch.Candidate{DriverID: id, DistanceM: d})
	}
	dispatch.Rank(score, cs)
	return cs
}

func rides(ids ...string) []*dispatch.Ride {
	out := make([]*dispatch.Ride, len(ids))
	for i, id := range ids {
		out[i] = &dispatch.Ride{ID: id}
	}
	return out
}

func TestLeastTotalScore(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		cands      []map[string]float64
		want       []string
		wantCostM  float64
		wantServed int
	}{
		{
			// Greedy, A first, gives A d-mid and B d-west: 1,900 m. The optimum: 1,100 m.
			name:  "the least total pickup distance, not each ride's nearest",
			cands: []map[string]float64{{"d-mid": 400, "d-west": 500}, {"d-mid": 600, "d-west": 1500}},
			want:  []string{"d-west", "d-mid"}, wantCostM: 1100, wantServed: 2,
		},
		{
			name:  "one driver for two rides goes to the cheaper pair",
			cands: []map[string]float64{{"d-only": 400}, {"d-only": 600}},
			want:  []string{"d-only", ""}, wantCostM: 400, wantServed: 1,
		},
		{
			// Giving A its nearest (100 m) would leave B without anyone.
			name:  "the most rides served before the least cost",
			cands: []map[string]float64{{"d-1": 100, "d-2": 1000}, {"d-1": 200}},
			want:  []string{"d-2", "d-1"}, wantCostM: 1200, wantServed: 2,
		},
		{
			name:  "a ride without candidates is assigned nobody",
			cands: []map[string]float64{{}, {"d-1": 300}},
			want:  []string{"", "d-1"}, wantCostM: 300, wantServed: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := Input{Rides: rides("r-a", "r-b")}
			for _, c := range tc.cands {
				in.Candidates = append(in.Candidates, ranked(c))
			}
			p := LeastTotalScore{Score: score}.Plan(in)
			if !slices.Equal(p.Driver, tc.want) || p.Assigned != tc.wantServed || p.CostM != tc.wantCostM {
				t.Errorf("plan = %v (%d assigned, %.0f m), want %v (%d, %.0f m)", p.Driver, p.Assigned, p.CostM, tc.want, tc.wantServed, tc.wantCostM)
			}
		})
	}
}

func TestWiden(t *testing.T) {
	t.Parallel()
	const count, minC = 10, 3
	tests := []struct {
		name        string
		found, hits int
		last, want  bool
	}{
		{"nobody found: look further", 0, 0, false, true},
		{"nobody eligible although the search was full: look further", 0, count, false, true},
		{"too few, and the ring search was not cut by its count", 2, 5, false, true},
		{"too few, but the count cut the search: drivers nearby are many", 2, count, false, false},
		{"enough", minC, minC, false, false},
		{"the last radius never widens", 0, 0, true, false},
	}
	for _, tc := range tests {
		if got := widen(tc.found, tc.hits, count, minC, tc.last); got != tc.want {
			t.Errorf("%s: widen(found %d, hits %d, last %v) = %v, want %v", tc.name, tc.found, tc.hits, tc.last, got, tc.want)
		}
	}
}

func TestCandidatesOf(t *testing.T) {
	t.Parallel()
	now := time.Now()
	hits := []redisstore.GeoHit{{DriverID: "d-ok", DistanceM: 120}, {DriverID: "d-dead", DistanceM: 10},
		{DriverID: "d-busy", DistanceM: 20}, {DriverID: "d-on-ride", DistanceM: 30}, {DriverID: "d-new", DistanceM: 400}}
	infos := []redisstore.DriverInfo{
		{Alive: true, Status: dispatch.DriverAvailable, Rating: 4.5, AvailableSince: now.Add(-90 * time.Second), Missed: 1, MissedAt: now},
		{Alive: false, Status: dispatch.DriverAvailable},
		{Alive: true, Status: dispatch.DriverStatus("busy")},
		{Alive: true, Status: dispatch.DriverAvailable, RideID: "r-1"},
		{Alive: true, Status: dispatch.DriverAvailable},
	}
	got := candidatesOf(hits, infos, now)
	if len(got) != 2 || got[0].DriverID != "d-ok" || got[1].DriverID != "d-new" {
		t.Fatalf("candidates %+v, want d-ok and d-new only (alive, available, without a ride)", got)
	}
	if c := got[0]; c.DistanceM != 120 || c.Rating != 4.5 || c.IdleS != 90 || c.Missed != 1 {
		t.Errorf("d-ok = %+v, want 120 m, rating 4.5, idle 90 s, 1 missed", c)
	}
	if got[1].IdleS != 0 {
		t.Errorf("a driver without an available-since time is idle %v s, want 0", got[1].IdleS)
	}
}

func TestMergeCandidates(t *testing.T) {
	t.Parallel()
	older := ranked(map[string]float64{"d-1": 100, "d-2": 200})
	newer := ranked(map[string]float64{"d-2": 250, "d-3": 150})
	got := mergeCandidates(score, older, newer)
	var ids []string
	for _, c := range got {
		ids = append(ids, c.DriverID)
	}
	if !slices.Equal(ids, []string{"d-1", "d-3", "d-2"}) || got[2].DistanceM != 250 {
		t.Errorf("merged %v (d-2 at %v m), want d-1, d-3, d-2 with d-2's newer 250 m", ids, got[2].DistanceM)
	}
}

func TestFallbackOrder(t *testing.T) {
	t.Parallel()
	cands := ranked(map[string]float64{"d-1": 100, "d-2": 200, "d-3": 300, "d-4": 400})
	// Ride 0 was assigned d-3; d-2 went to ride 1, d-4 to ride 0's neighbour ride 2.
	got := fallbackOrder(0, "d-3", cands, map[string]int{"d-3": 0, "d-2": 1, "d-4": 2})
	var ids []string
	for _, c := range got {
		ids = append(ids, c.DriverID)
	}
	if !slices.Equal(ids, []string{"d-3", "d-1"}) {
		t.Errorf("order %v, want the assigned d-3, then d-1 (nobody's); never d-2 or d-4 (other rides')", ids)
	}
}
