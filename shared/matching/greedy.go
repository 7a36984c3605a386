package matching

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/lifecycle"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// greedyPick is the lifecycle.Pick of greedy mode: it searches ride's candidates radius by radius
// (step; excluded drivers left out) and, once widen lets it choose, takes the offer lock of the
// best-ranked one it can (lockCandidate); when every candidate of a radius was taken by another
// offer it widens past them. It returns the locked offer, or nil and a note saying why nobody was
// offered.
func (m *Matcher) greedyPick(ctx context.Context, ride *dispatch.Ride, excluded map[string]bool, win lifecycle.Window) (*dispatch.Offer, string, error) {
	tried := map[string]bool{}
	skip := func(id string) bool { return excluded[id] || tried[id] }
	count := m.p.SearchCount + len(excluded)
	seen := 0
	radii := Radii(m.p.RadiiM, ride.MatchAttempts)
	for i, radius := range radii {
		hits, found, err := m.step(ctx, []probe{{q: redisstore.NearbyQuery{Center: ride.Pickup, RadiusM: radius, Count: count}, skip: skip}})
		if err != nil {
			return nil, "", err
		}
		cands := found[0]
		seen += len(cands)
		if widen(len(cands), hits[0], count, m.p.MinCandidates, i == len(radii)-1) {
			continue // too few here: widen before choosing
		}
		dispatch.Rank(m.p.Score, cands)
		for _, cand := range cands {
			tried[cand.DriverID] = true
			offer, err := m.lockCandidate(ctx, ride, cand, win)
			if err != nil || offer != nil {
				return offer, "", err
			}
		}
	}
	maxR := radii[len(radii)-1]
	if seen == 0 {
		return nil, noDriverNote(maxR), nil
	}
	return nil, fmt.Sprintf("all %d available drivers within %.0f m were taken by other offers", seen, maxR), nil
}

// lockCandidate takes cand's offer lock for ride for the window win and returns the offer it
// locked, or nil when another offer holds him, he is no longer eligible (checked atomically by the
// lock script), or PostgreSQL has him on a ride (then the lock is released again and the service
// repairs his Redis state). Greedy and batch take every lock here.
func (m *Matcher) lockCandidate(ctx context.Context, ride *dispatch.Ride, cand dispatch.Candidate, win lifecycle.Window) (*dispatch.Offer, error) {
	offer := &dispatch.Offer{
		ID: uuid.NewString(), RideID: ride.ID, DriverID: cand.DriverID,
		DistanceM: cand.DistanceM, Score: cand.Score, ExpiresAt: win.ExpiresAt,
	}
	ok, err := m.store.LockOffer(ctx, cand.DriverID, *liveOffer(ride, offer.ID, cand.DistanceM, win), win.LockTTL())
	if err != nil || !ok {
		return nil, err
	}
	free, err := win.DriverFree(ctx, cand.DriverID)
	if err == nil && free {
		return offer, nil
	}
	// Redis showed an on-ride driver available: never offer him; the service repairs him.
	if _, rerr := m.store.ReleaseOffer(ctx, cand.DriverID, offer.ID, false); rerr != nil && err == nil {
		err = rerr
	}
	return nil, err
}
