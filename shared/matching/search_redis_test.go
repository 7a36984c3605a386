package matching

import (
	"context"
	"io"
	"log/slog"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// origin is the pickup the worlds of these tests are laid around (Midtown Manhattan).
var origin = dispatch.Point{Lat: 40.7549, Lng: -73.9840}

// offsetM returns p moved dy metres north and dx metres east.
func offsetM(p dispatch.Point, dy, dx float64) dispatch.Point {
	const mPerDeg = dispatch.EarthRadiusM * math.Pi / 180
	return dispatch.Point{Lat: p.Lat + dy/mPerDeg, Lng: p.Lng + dx/(mPerDeg*math.Cos(p.Lat*math.Pi/180))}
}

// world is a Matcher over the real Redis (own key prefix) with the default configuration's rules
// (radii 250 m … 8 km, FLAGDOWN_MIN_CANDIDATES 3). It has no Lifecycle: these tests search and plan,
// they change no ride.
type world struct {
	m      *Matcher
	s      *redisstore.Store
	prefix string
}

func newWorld(t *testing.T) *world {
	t.Helper()
	cfg, err := config.FromEnv(map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	rdb, prefix := testkit.Redis(t)
	s := redisstore.New(rdb, prefix, cfg.HeartbeatTTL, cfg.MaxSpeedMPS)
	return &world{m: New(s, nil, slog.New(slog.NewTextHandler(io.Discard, nil)), ParamsFrom(cfg)), s: s, prefix: prefix}
}

// driver makes id an alive, available driver at dy metres north and dx metres east of origin.
func (w *world) driver(t *testing.T, id string, dy, dx float64) {
	t.Helper()
	res, err := w.s.ApplyPings(context.Background(), []redisstore.Ping{{DriverID: id, Position: offsetM(origin, dy, dx),
		At: time.Now(), Status: dispatch.DriverAvailable}})
	if err != nil || !res[0].Applied {
		t.Fatalf("ping %s: %+v, %v", id, res, err)
	}
}

func ids(cs []dispatch.Candidate) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.DriverID
	}
	return out
}

// TestSearchAll: each ride's search widens until it has FLAGDOWN_MIN_CANDIDATES eligible drivers,
// leaves out dead drivers and those already offered the ride or taken by the window, ranks what it
// found, and says why when it found nobody.
func TestSearchAll(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := context.Background()
	w.driver(t, "d-100", 100, 0)
	w.driver(t, "d-200", 0, -200)
	w.driver(t, "d-700", -700, 0)
	w.driver(t, "d-900", 0, 900)
	w.driver(t, "d-dead", 50, 0)
	if err := w.s.Client().Del(ctx, w.prefix+"hb:d-dead").Err(); err != nil { // his heartbeat expired
		t.Fatal(err)
	}
	rs := []*dispatch.Ride{
		{ID: "r-near", Pickup: origin},
		{ID: "r-declined", Pickup: origin},
		{ID: "r-nowhere", Pickup: offsetM(origin, 60_000, 0)}, // beyond every radius of a first attempt
	}
	offered := map[string]map[string]bool{"r-declined": {"d-100": true}}
	cands, notes, err := w.m.searchAll(ctx, rs, offered, map[string]bool{"d-200": true})
	if err != nil {
		t.Fatal(err)
	}
	// 250 and 500 m hold two eligible drivers (d-dead is none): the search widens to 1,000 m.
	if got, want := ids(cands[0]), []string{"d-100", "d-700", "d-900"}; !slices.Equal(got, want) {
		t.Errorf("r-near candidates %v, want %v (d-200 taken by the window, d-dead without heartbeat)", got, want)
	}
	if got, want := ids(cands[1]), []string{"d-700", "d-900"}; !slices.Equal(got, want) {
		t.Errorf("r-declined candidates %v, want %v (d-100 was offered it already)", got, want)
	}
	if len(cands[2]) != 0 || !strings.Contains(notes[2], "no available driver within 8000 m") {
		t.Errorf("r-nowhere: candidates %v, note %q; want none and the largest radius named", ids(cands[2]), notes[2])
	}
	if c := cands[0][0]; notes[0] != "" || c.Score == 0 || c.Score != dispatch.Score(w.m.p.Score, c) {
		t.Errorf("r-near: note %q, best %+v; want no note and the candidates scored (dispatch.Score)", notes[0], c)
	}
}

// TestPlanRoundsWidenPastTheWindowsDrivers: four rides within 100 m of the origin, three drivers
// near them (every ride's first search stops with these three) and one 1,500 m north. The first
// round serves three rides; the fourth lost the near drivers to them, searches again past them,
// and gets the far driver in the same window.
func TestPlanRoundsWidenPastTheWindowsDrivers(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.driver(t, "d-near-1", 0, 150)
	w.driver(t, "d-near-2", 0, -200)
	w.driver(t, "d-near-3", 150, 150)
	w.driver(t, "d-far", 1500, 0)
	var rs []*dispatch.Ride
	for k, dx := range []float64{0, 50, -50, 100} {
		rs = append(rs, &dispatch.Ride{ID: "r-" + string(rune('a'+k)), Pickup: offsetM(origin, 0, dx)})
	}
	ctx := context.Background()
	asg, err := planRounds(w.m.planner, w.m.p.Score, rs, func(todo []int, taken map[string]bool) ([][]dispatch.Candidate, []string, error) {
		sub := make([]*dispatch.Ride, len(todo))
		for k, i := range todo {
			sub[k] = rs[i]
		}
		return w.m.searchAll(ctx, sub, nil, taken)
	})
	if err != nil {
		t.Fatal(err)
	}
	if asg.assigned != 4 || asg.rounds != 2 {
		t.Fatalf("%d rides assigned in %d rounds (drivers %v), want 4 in 2", asg.assigned, asg.rounds, asg.driver)
	}
	got := slices.Clone(asg.driver)
	slices.Sort(got)
	if want := []string{"d-far", "d-near-1", "d-near-2", "d-near-3"}; !slices.Equal(got, want) {
		t.Fatalf("drivers %v, want each of %v once", asg.driver, want)
	}
	for i, d := range asg.driver {
		if !slices.Contains(ids(asg.cands[i]), d) {
			t.Errorf("ride %s assigned %s, who is not among its candidates %v", rs[i].ID, d, ids(asg.cands[i]))
		}
	}
}
