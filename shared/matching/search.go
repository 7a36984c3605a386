package matching

import (
	"context"
	"fmt"
	"time"

	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// Radii are the search radii in metres for a ride already tried attempts times: the configured
// expanding radii, widened on retries by twice the largest radius (from the second retry) and four
// times it (from the fourth), so a ride that found nobody nearby looks further each time.
func Radii(base []float64, attempts int) []float64 {
	out := append([]float64(nil), base...)
	last := base[len(base)-1]
	if attempts >= 2 {
		out = append(out, 2*last)
	}
	if attempts >= 4 {
		out = append(out, 4*last)
	}
	return out
}

// widen is the widen-the-search rule, the same for greedy and batch: a ride's search goes on to its
// next radius before choosing among what it found when this radius is not its last and it found
// no eligible candidate, or fewer than minCandidates while the ring search returned fewer hits than
// the count it asked for (so drivers further out were not cut off by the count but are simply not
// there yet). found is the eligible candidates at this radius, hits the drivers the ring search
// returned (eligible or not).
func widen(found, hits, count, minCandidates int, last bool) bool {
	return !last && (found == 0 || (found < minCandidates && hits < count))
}

// noDriverNote is the match note of a ride whose search found no eligible driver within maxM
// metres, its largest radius.
func noDriverNote(maxM float64) string {
	return fmt.Sprintf("no available driver within %.0f m", maxM)
}

// probe is one ride's search at one radius: the ring search q, and the drivers it leaves out
// (already offered the ride, tried, or taken by other rides of the window).
type probe struct {
	q    redisstore.NearbyQuery
	skip func(driverID string) bool
}

// step runs one radius of several rides' searches in two pipelined round trips, whatever the number
// of rides: the ring searches (redisstore.NearbyMany), then the heartbeat and state of every driver
// found and not left out (redisstore.DriverInfos, each driver once). It returns per probe the
// number of drivers its ring search returned and its eligible candidates (candidatesOf, unranked).
func (m *Matcher) step(ctx context.Context, ps []probe) (hits []int, cands [][]dispatch.Candidate, err error) {
	qs := make([]redisstore.NearbyQuery, len(ps))
	for k, p := range ps {
		qs[k] = p.q
	}
	found, err := m.store.NearbyMany(ctx, qs)
	if err != nil {
		return nil, nil, err
	}
	var ids []string
	seen := map[string]bool{}
	for k, p := range ps {
		for _, h := range found[k] {
			if !p.skip(h.DriverID) && !seen[h.DriverID] {
				seen[h.DriverID] = true
				ids = append(ids, h.DriverID)
			}
		}
	}
	infoList, err := m.store.DriverInfos(ctx, ids)
	if err != nil {
		return nil, nil, err
	}
	infos := make(map[string]redisstore.DriverInfo, len(ids))
	for k, id := range ids {
		infos[id] = infoList[k]
	}
	now := time.Now()
	hits, cands = make([]int, len(ps)), make([][]dispatch.Candidate, len(ps))
	for k, p := range ps {
		keep := make([]redisstore.GeoHit, 0, len(found[k]))
		kinfo := make([]redisstore.DriverInfo, 0, len(found[k]))
		for _, h := range found[k] {
			if !p.skip(h.DriverID) {
				keep = append(keep, h)
				kinfo = append(kinfo, infos[h.DriverID])
			}
		}
		hits[k], cands[k] = len(found[k]), candidatesOf(keep, kinfo, now)
	}
	return hits, cands, nil
}

// candidatesOf turns hits and their drivers' infos (same order) into the candidates that are alive,
// available and without a ride (the heartbeat and state filter), with their idle time at now.
func candidatesOf(keep []redisstore.GeoHit, infos []redisstore.DriverInfo, now time.Time) []dispatch.Candidate {
	out := make([]dispatch.Candidate, 0, len(keep))
	for i, info := range infos {
		if !info.Alive || info.Status != dispatch.DriverAvailable || info.RideID != "" {
			continue
		}
		idle := 0.0
		if !info.AvailableSince.IsZero() {
			idle = now.Sub(info.AvailableSince).Seconds()
		}
		out = append(out, dispatch.Candidate{
			DriverID: keep[i].DriverID, DistanceM: keep[i].DistanceM, Position: keep[i].Position,
			Rating: info.Rating, IdleS: idle, Missed: info.Missed, MissedAt: info.MissedAt,
		})
	}
	return out
}

// searchAll runs the candidate search of every ride of a window without locking anyone: for each
// ride its radii (Radii, widened on retries) until widen says stop, the drivers already offered it
// (offered, by ride id) and the drivers taken by other rides of the window (taken: an earlier
// round's assignment) left out. The rides search side by side, one radius at a time (step): each
// radius is two pipelined round trips whatever the number of rides. It returns each ride's
// candidates ranked by dispatch.Score (best first), or none and the note greedy would record.
func (m *Matcher) searchAll(ctx context.Context, rides []*dispatch.Ride, offered map[string]map[string]bool, taken map[string]bool) ([][]dispatch.Candidate, []string, error) {
	cands := make([][]dispatch.Candidate, len(rides))
	notes := make([]string, len(rides))
	radii := make([][]float64, len(rides))
	pending := make([]int, 0, len(rides))
	for i, r := range rides {
		radii[i] = Radii(m.p.RadiiM, r.MatchAttempts)
		pending = append(pending, i)
	}
	for step := 0; len(pending) > 0; step++ {
		ps := make([]probe, len(pending))
		for k, i := range pending {
			excluded := offered[rides[i].ID]
			ps[k] = probe{
				q:    redisstore.NearbyQuery{Center: rides[i].Pickup, RadiusM: radii[i][step], Count: m.p.SearchCount + len(excluded) + len(taken)},
				skip: func(id string) bool { return excluded[id] || taken[id] },
			}
		}
		hits, found, err := m.step(ctx, ps)
		if err != nil {
			return nil, nil, err
		}
		next := pending[:0]
		for k, i := range pending {
			if widen(len(found[k]), hits[k], ps[k].q.Count, m.p.MinCandidates, step == len(radii[i])-1) {
				next = append(next, i) // too few here: widen before choosing
				continue
			}
			if len(found[k]) > 0 {
				dispatch.Rank(m.p.Score, found[k])
				cands[i] = found[k]
			} else {
				notes[i] = noDriverNote(radii[i][len(radii[i])-1])
			}
		}
		pending = next
	}
	return cands, notes, nil
}
