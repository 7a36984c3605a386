// Package matching is the one home of matching: which available drivers a REQUESTED ride may be
// offered (the candidate search), how they rank (dispatch.Score), how far the search widens, and
// who gets which ride, one ride at a time as its event arrives (greedy) or the rides of a batch
// window together (batch). The state changes stay lifecycle.Service's: matching hands it a
// lifecycle.Pick that searches and takes an offer lock, and lifecycle records the offer, the failed
// attempt and its retry timer, or the ride's end as UNMATCHED.
//
// The candidate search of one ride (search.go) tries the configured radii smallest first
// (FLAGDOWN_SEARCH_RADII_M, widened on retries: Radii). Each radius is one ring search in Redis
// (redisstore.NearbyMany: GEOSEARCH ASC COUNT in rings of growing radius from
// redisstore.RingStartM, stopping at the first ring that holds enough drivers, so a search costs
// about the same in a crowded and in a sparse city) and one pipelined read of the drivers'
// heartbeats and state (redisstore.DriverInfos); a candidate is alive, available and without a
// ride, and not left out (drivers already offered the ride, drivers tried or taken already). The
// search goes on to the next radius while it found fewer than FLAGDOWN_MIN_CANDIDATES and the ring
// search was not cut by its count (widen). The candidates found are ranked by dispatch.Score.
//
// Greedy (greedy.go) ranks each radius's candidates and takes the first offer lock it wins (the
// lock script re-checks eligibility atomically; PostgreSQL then confirms the driver holds no active
// ride); when every candidate was taken by another offer it widens past them.
//
// Batch (batch.go): a ride event only puts the ride into the city's batch (Lifecycle JoinBatch);
// the closed window's run (RunWindow) searches every ride's candidates without locking anyone, and
// a Planner (plan.go) assigns drivers to rides over that pure Input, round after round (rides left
// over search again past the drivers given to others); then each assigned ride is offered its
// driver under the offer lock as greedy offers, with fallback to its other candidates.
//
// The package depends on a *redisstore.Store, the lifecycle calls of Lifecycle, a logger and its
// Params; never on shared/app or a function.
package matching

import (
	"context"
	"log/slog"
	"time"

	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/lifecycle"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// OutcomeJoined is the outcome of a ride event in batch mode: the ride joined the batch, and its
// window's run will match it.
const OutcomeJoined = "joined"

// Params are the matching rules, read once from the configuration (ParamsFrom).
type Params struct {
	// Mode is config.MatchGreedy, config.MatchBatch or config.MatchAuto (FLAGDOWN_MATCH_MODE).
	Mode string
	// BatchWindow is how long a batch window lasts (FLAGDOWN_BATCH_WINDOW); in auto mode an area is
	// decided at most once per window.
	BatchWindow time.Duration
	// Auto are the thresholds of auto mode (DefaultAutoParams).
	Auto AutoParams
	// RadiiM are the search radii in metres, smallest first (FLAGDOWN_SEARCH_RADII_M; see Radii).
	RadiiM []float64
	// SearchCount is how many nearest drivers one ring search returns, before the drivers left out
	// are added to it (FLAGDOWN_SEARCH_COUNT).
	SearchCount int
	// MinCandidates is how many eligible drivers a search wants before it stops widening
	// (FLAGDOWN_MIN_CANDIDATES; see widen).
	MinCandidates int
	// Score weighs the candidates (FLAGDOWN_SCORE_*, FLAGDOWN_DEFAULT_RATING, FLAGDOWN_MISS_MEMORY).
	Score dispatch.ScoreParams
}

// ParamsFrom returns the matching rules of c.
func ParamsFrom(c *config.Config) Params {
	return Params{
		Mode: c.MatchMode, BatchWindow: c.BatchWindow, Auto: DefaultAutoParams(), RadiiM: c.SearchRadiiM, SearchCount: c.SearchCount, MinCandidates: c.MinCandidates,
		Score: dispatch.ScoreParams{
			IdleBonusMPerMin: c.ScoreIdleBonusMPerMin, IdleCapMin: c.ScoreIdleCapMin,
			RatingBonusM: c.ScoreRatingBonusM, DefaultRating: c.DefaultRating,
			MissPenaltyM: c.ScoreMissPenaltyM, MissMemory: c.MissMemory,
		},
	}
}

// Lifecycle is what matching asks of lifecycle.Service, the one owner of the rides' state
// changes (see the methods of the same name there).
type Lifecycle interface {
	// Match runs one match attempt of rideID with pick, recording what it found.
	Match(ctx context.Context, rideID string, ev *lifecycle.EventRef, pick lifecycle.Pick) (string, error)
	// JoinBatch puts rideID into the city batch for the next window.
	JoinBatch(ctx context.Context, rideID string) error
	// ClaimBatch claims the rides of batch name's window that closed at deadlineMs (Unix ms).
	ClaimBatch(ctx context.Context, name string, deadlineMs int64, ev *lifecycle.EventRef) (redisstore.BatchClaim, error)
	// RidesToMatch returns the rides among ids still to offer, and the drivers offered each already.
	RidesToMatch(ctx context.Context, ids []string) ([]*dispatch.Ride, map[string]map[string]bool, error)
	// DeferToNextWindow puts back into the batch a ride a window had candidates for but assigned none.
	DeferToNextWindow(ctx context.Context, rideID, note string, ev *lifecycle.EventRef) (string, error)
	// FinishBatch marks batch name's window that closed at deadlineMs (Unix ms) handled.
	FinishBatch(ctx context.Context, name string, deadlineMs int64) error
}

var _ Lifecycle = (*lifecycle.Service)(nil)

// Matcher matches rides to drivers (see the package comment).
type Matcher struct {
	store   *redisstore.Store
	lc      Lifecycle
	log     *slog.Logger
	p       Params
	planner Planner
	now     func() time.Time
}

// New returns a Matcher searching store, changing rides through lc, logging to log, under the
// rules p; batch windows are assigned by LeastTotalScore, in auto mode by WaitWeighted.
func New(store *redisstore.Store, lc Lifecycle, log *slog.Logger, p Params) *Matcher {
	var planner Planner = LeastTotalScore{Score: p.Score}
	if p.Mode == config.MatchAuto {
		planner = WaitWeighted{Score: p.Score, WeightMPerS: p.Auto.WaitWeightMPerS, CapS: p.Auto.WaitCapS}
	}
	return &Matcher{store: store, lc: lc, log: log, p: p, planner: planner, now: time.Now}
}

// Result is what one ride event's match did.
type Result struct {
	// Outcome is a lifecycle.Match* outcome, or OutcomeJoined in batch mode.
	Outcome string
	// Offer is the offer recorded (Outcome lifecycle.MatchOffered), as its driver sees it, and
	// DriverID the driver offered; nil and "" otherwise.
	Offer    *dispatch.LiveOffer
	DriverID string
}

// MatchRide handles one ride event ev for rideID: in greedy mode one match attempt through
// Lifecycle Match with the greedy search (outcomes lifecycle.MatchOffered, MatchNoDriver,
// MatchUnmatched, MatchDuplicate, MatchNotNeeded); in batch mode the ride joins the next window
// (OutcomeJoined); in auto mode its area decides (decideAuto). joinsWindow is where the choice
// between the two is made, per ride.
func (m *Matcher) MatchRide(ctx context.Context, rideID string, ev *lifecycle.EventRef) (Result, error) {
	join, err := m.joinsWindow(ctx, rideID)
	if err != nil {
		return Result{}, err
	}
	if join {
		if err := m.lc.JoinBatch(ctx, rideID); err != nil {
			return Result{}, err
		}
		return Result{Outcome: OutcomeJoined}, nil
	}
	var res Result
	pick := func(ctx context.Context, ride *dispatch.Ride, excluded map[string]bool, win lifecycle.Window) (*dispatch.Offer, string, error) {
		o, note, err := m.greedyPick(ctx, ride, excluded, win)
		res.Offer, res.DriverID = nil, ""
		if o != nil {
			res.Offer, res.DriverID = liveOffer(ride, o.ID, o.DistanceM, win), o.DriverID
		}
		return o, note, err
	}
	out, err := m.lc.Match(ctx, rideID, ev, pick)
	if err != nil || out != lifecycle.MatchOffered {
		return Result{Outcome: out}, err
	}
	res.Outcome = out
	return res, nil
}

// joinsWindow reports whether a ride event puts ride rideID into the next batch window rather than
// offering it at once: always with FLAGDOWN_MATCH_MODE=batch, never with greedy, and with auto as
// the ride's area decides (decideAuto; a ride no longer to match is left to Match, which says so).
func (m *Matcher) joinsWindow(ctx context.Context, rideID string) (bool, error) {
	switch m.p.Mode {
	case config.MatchBatch:
		return true, nil
	case config.MatchAuto:
		rides, _, err := m.lc.RidesToMatch(ctx, []string{rideID})
		if err != nil || len(rides) == 0 {
			return false, err
		}
		return m.decideAuto(ctx, rides[0])
	}
	return false, nil
}

// liveOffer is the offer of ride to a driver distanceM metres from its pickup, as the offer lock
// holds it and the driver is shown it, for the window win.
func liveOffer(ride *dispatch.Ride, offerID string, distanceM float64, win lifecycle.Window) *dispatch.LiveOffer {
	return &dispatch.LiveOffer{OfferID: offerID, RideID: ride.ID, Pickup: ride.Pickup, Dropoff: ride.Dropoff,
		DistanceM: distanceM, ExpiresAt: win.ExpiresAt.UTC()}
}
