package matching

import (
	"context"
	"math"
	"time"

	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/metrics"
)

// Adaptive matching (FLAGDOWN_MATCH_MODE=auto): each area (the geohash cell of the pickup at
// dispatch.SurgeCellPrecision) is in greedy or batch mode, decided at most once per batch window
// from what the platform knows around the pickup (ReadArea: the available drivers near it and the
// rides requested from the cell and its eight neighbours recently; the rides waiting in the batch
// and the recent time to match are logged with each decision). A ride of an area in batch mode
// joins the next window; otherwise it is offered at once. Decide is the rule, a pure function of
// those inputs.

// Reasons of a Decision (the reason label of metrics.MatchModeDecisions).
const (
	// ReasonLone: the ride has at most one candidate near it and no other ride was requested from
	// its area; holding it cannot improve anything.
	ReasonLone = "lone"
	// ReasonAmple: candidates per recent request at or above AutoParams.AmpleRatio.
	ReasonAmple = "ample"
	// ReasonScarce: candidates per recent request at or below AutoParams.ScarceRatio.
	ReasonScarce = "scarce"
	// ReasonHold: the ratio is between the two thresholds; the area keeps its mode (hysteresis).
	ReasonHold = "hold"
	// ReasonDwell: the rule asks for the other mode but the area entered its mode less than
	// AutoParams.MinDwell ago.
	ReasonDwell = "dwell"
)

// AutoParams are the thresholds of adaptive matching. Two thresholds (ScarceRatio < AmpleRatio)
// and a minimum dwell keep an area from flapping between modes.
type AutoParams struct {
	// RadiusM is the radius around the pickup within which available drivers count as its
	// candidates, metres; CountBound the most counted (GEOSEARCH COUNT).
	RadiusM    float64
	CountBound int
	// RequestWindow is how far back the rides requested from the area count as its open requests.
	RequestWindow time.Duration
	// ScarceRatio: an area enters batch mode when its candidates per open request fall to or
	// below it (and it has at least two open requests); AmpleRatio: it goes back to greedy when
	// they reach it or more. Dimensionless, ScarceRatio < AmpleRatio.
	ScarceRatio, AmpleRatio float64
	// MinDwell is the least time an area stays in a mode before the rule may switch it.
	MinDwell time.Duration
	// WaitWeightMPerS is how many metres of score a ride's window assignment is discounted per
	// second the ride has waited since its request (WaitWeighted), up to WaitCapS seconds.
	WaitWeightMPerS, WaitCapS float64
}

// DefaultAutoParams are the thresholds of FLAGDOWN_MATCH_MODE=auto: drivers within 2 km (at most
// 40), open requests over the last 60 s, batch at ≤ 1.5 candidates per request, greedy again at ≥ 3,
// 20 s minimum dwell, 10 m of score per second waited up to 180 s (1.8 km).
func DefaultAutoParams() AutoParams {
	return AutoParams{RadiusM: 2000, CountBound: 40, RequestWindow: time.Minute, ScarceRatio: 1.5, AmpleRatio: 3,
		MinDwell: 20 * time.Second, WaitWeightMPerS: 10, WaitCapS: 180}
}

// AreaLoad is what an adaptive decision knows of the area of one pickup.
type AreaLoad struct {
	// Candidates is the number of available drivers within AutoParams.RadiusM of the pickup.
	Candidates int
	// Requests is the number of rides requested from the area within AutoParams.RequestWindow (the
	// ride deciding included: at least 1 counts).
	Requests int
}

// AreaMode is an area's mode and when it entered it.
type AreaMode struct {
	// Mode is config.MatchGreedy or config.MatchBatch; "" for an area without state (greedy).
	Mode string
	// Since is when the area entered Mode.
	Since time.Time
}

// Decision is what Decide chose for one ride and its area.
type Decision struct {
	// Batch is true when the ride joins the next window, false when it is offered at once.
	Batch bool
	// Area is the area's mode after the decision (Since changes only when Mode does).
	Area AreaMode
	// Reason is one of the Reason* words.
	Reason string
}

// Mode is the decision's mode word: config.MatchBatch or config.MatchGreedy.
func (d Decision) Mode() string {
	if d.Batch {
		return config.MatchBatch
	}
	return config.MatchGreedy
}

// Decide is the adaptive matching rule for a ride in an area of load whose mode was prev, at now:
//
//  1. a ride with at most one candidate and no other request in its area is offered at once
//     (ReasonLone), and the area keeps its mode: holding it cannot improve its assignment. With
//     other requests competing it is judged by the ratio like any other (0 or 1 candidates for
//     several requests is scarce): in a window the next freed driver goes to the nearest of the
//     waiting rides, where offering each at once sends the far drivers to whoever asked first;
//  2. otherwise the area's target mode is greedy when the candidates per request reach AmpleRatio
//     (ReasonAmple), batch when they are at most ScarceRatio with at least two requests
//     (ReasonScarce), and the area's current mode in between (ReasonHold; greedy for an area
//     without state). A long recent time to match is no reason to leave batch: it is long when
//     drivers are scarce, where a window shortens the pickup most, and a window adds at most
//     one window to it (docs/matching.md, Adaptive matching);
//  3. an area switches to its target only after MinDwell in its current mode (ReasonDwell keeps
//     it);
//  4. the ride follows its area's mode.
func Decide(p AutoParams, load AreaLoad, prev AreaMode, now time.Time) Decision {
	cur := prev
	if cur.Mode != config.MatchBatch {
		cur.Mode = config.MatchGreedy
	}
	if lone(load) {
		return Decision{Batch: false, Area: cur, Reason: ReasonLone}
	}
	req := max(1, load.Requests)
	ratio := float64(load.Candidates) / float64(req)
	target, reason := cur.Mode, ReasonHold
	switch {
	case ratio >= p.AmpleRatio:
		target, reason = config.MatchGreedy, ReasonAmple
	case ratio <= p.ScarceRatio && req >= 2:
		target, reason = config.MatchBatch, ReasonScarce
	}
	next := cur
	if prev.Mode == "" {
		next.Since = now // a new area enters its first mode now
	}
	if target != cur.Mode {
		if prev.Mode != "" && now.Sub(prev.Since) < p.MinDwell {
			reason = ReasonDwell
		} else {
			next = AreaMode{Mode: target, Since: now}
		}
	}
	return Decision{Batch: next.Mode == config.MatchBatch, Area: next, Reason: reason}
}

// lone reports whether a ride of load is alone with at most one candidate (ReasonLone).
func lone(load AreaLoad) bool { return load.Candidates <= 1 && load.Requests <= 1 }

// neighbourCells are geohash cell c and its eight neighbours at the same precision (fewer at the
// poles or for an invalid c).
func neighbourCells(c string) []string {
	box, ok := dispatch.GeohashBox(c)
	if !ok {
		return []string{c}
	}
	ctr := box.Center()
	dLat, dLng := box.MaxLat-box.MinLat, box.MaxLng-box.MinLng
	out := make([]string, 0, 9)
	seen := map[string]bool{}
	for _, dy := range []float64{0, -1, 1} {
		for _, dx := range []float64{0, -1, 1} {
			lat, lng := ctr.Lat+dy*dLat, ctr.Lng+dx*dLng
			if lat < -90 || lat > 90 {
				continue
			}
			lng = math.Mod(lng+540, 360) - 180
			h := dispatch.Geohash(dispatch.Point{Lat: lat, Lng: lng}, len(c))
			if !seen[h] {
				seen[h] = true
				out = append(out, h)
			}
		}
	}
	return out
}

// decideAuto is the adaptive choice for ride (see Decide): it reads the area of the ride's pickup
// (redisstore.ReadArea, one round trip), reuses the area's mode while it was decided less than a
// batch window ago (one decision per area and window), and otherwise decides, stores the area's mode
// and logs the decision and its inputs as one line. A lone ride (at most one candidate, no other
// request) is offered at once without touching its area's state. Every decision taken, and every such ride, is counted in
// metrics.MatchModeDecisions. It reports whether the ride joins the next window.
func (m *Matcher) decideAuto(ctx context.Context, ride *dispatch.Ride) (bool, error) {
	a := m.p.Auto
	cell := dispatch.Geohash(ride.Pickup, dispatch.SurgeCellPrecision)
	rd, err := m.store.ReadArea(ctx, ride.Pickup, a.RadiusM, a.CountBound, neighbourCells(cell), a.RequestWindow, cell)
	if err != nil {
		return false, err
	}
	now := m.now()
	prev := AreaMode{Mode: rd.Mode, Since: time.UnixMilli(rd.SinceMs)}
	load := AreaLoad{Candidates: rd.Drivers, Requests: rd.Requests}
	if lone(load) { // a ride's own case: the area's state and its window's decision stay
		metrics.MatchModeDecisions.WithLabelValues(config.MatchGreedy, ReasonLone).Inc()
		m.log.Debug("match mode decision", "cell", cell, "mode", config.MatchGreedy, "reason", ReasonLone,
			"candidates", rd.Drivers, "ride_id", ride.ID)
		return false, nil
	}
	if rd.AtMs > 0 && now.Sub(time.UnixMilli(rd.AtMs)) < m.p.BatchWindow {
		return prev.Mode == config.MatchBatch, nil // decided for this window already
	}
	d := Decide(a, load, prev, now)
	metrics.MatchModeDecisions.WithLabelValues(d.Mode(), d.Reason).Inc()
	if err := m.store.StoreAreaMode(ctx, cell, d.Area.Mode, d.Area.Since.UnixMilli(), now.UnixMilli()); err != nil {
		return false, err
	}
	m.log.Info("match mode decision", "cell", cell, "mode", d.Mode(), "area_mode", d.Area.Mode, "reason", d.Reason,
		"prev_mode", rd.Mode, "candidates", rd.Drivers, "requests", rd.Requests, "waiting", rd.Waiting,
		"nearest_m", math.Round(rd.NearestM), "farthest_m", math.Round(rd.FarthestM), "match_delay_s", math.Round(rd.MatchDelayS*10)/10,
		"ride_id", ride.ID)
	return d.Batch, nil
}
