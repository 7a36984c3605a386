// Package function is the match function: it finds the best available driver for a REQUESTED ride
// and offers him the ride under a lock.
//
// Triggered by ride.requested, ride.offer.declined, ride.reopened, ride.offer.expired and ride.retry
// CloudEvents (subject = ride id; see events.Triggers).
// Steps, as in the design notes: nearest available drivers by expanding radius (GEOSEARCH ASC
// COUNT: the reply is bounded, though Redis still visits every driver inside the radius); heartbeat
// and state filter in one round trip; drivers already offered this ride excluded; ranking by
// dispatch.Score; the first candidate whose offer lock (SET NX, offer window as TTL, eligibility
// re-checked in the same script) we win gets the offer, recorded in PostgreSQL with a ride.offered
// outbox row in the same transaction. If nobody can be offered, the attempt and its reason are
// recorded, a retry timer armed, and after the retry budget the ride becomes UNMATCHED. The state
// changes are lifecycle.Service.Match's; this function owns the candidate search. Each event is
// handled once per (source, id).
//
// With FLAGDOWN_MATCH_MODE=batch a ride event only puts the ride into the city's batch, and the
// match.batch.due event of the closed window assigns the batch's rides together (batch.go).
package function

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/shared/app"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/host"
	"github.com/flagdown/flagdown/shared/lifecycle"
	"github.com/flagdown/flagdown/shared/metrics"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// Source is the CloudEvent source of events this function emits.
const Source = "/flagdown/match"

// Consumer is this function's name in processed_events.
const Consumer = "match"

// Triggers are the event types that start a match.
var Triggers = events.TypesFor("match")

// Outcomes of one match (see lifecycle.Service.Match).
const (
	OutcomeOffered   = lifecycle.MatchOffered
	OutcomeNoDriver  = lifecycle.MatchNoDriver
	OutcomeDuplicate = lifecycle.MatchDuplicate
	OutcomeNotNeeded = lifecycle.MatchNotNeeded
	// OutcomeUnmatched: nobody could be offered within the retry budget; the ride is UNMATCHED.
	OutcomeUnmatched = lifecycle.MatchUnmatched
	// OutcomeJoined (batch mode): the ride joined the batch; its window's run will match it.
	OutcomeJoined = "joined"
)

// Function matches rides to drivers.
type Function struct {
	d     *app.Deps
	lc    *lifecycle.Service
	score dispatch.ScoreParams
	h     http.Handler
}

// New returns the function over d.
func New(d *app.Deps) *Function {
	c := d.Config
	f := &Function{d: d, lc: d.Lifecycle(Source), score: dispatch.ScoreParams{
		IdleBonusMPerMin: c.ScoreIdleBonusMPerMin, IdleCapMin: c.ScoreIdleCapMin,
		RatingBonusM: c.ScoreRatingBonusM, DefaultRating: c.DefaultRating,
		MissPenaltyM: c.ScoreMissPenaltyM, MissMemory: c.MissMemory,
	}}
	f.h = host.EventHandler(d.Deps, Consumer, Triggers, f.Handle)
	return f
}

var lazy = app.NewLazy(func(d *app.Deps) http.Handler { return New(d) })

// Handle is the OpenFaaS golang-middleware entry point.
func Handle(w http.ResponseWriter, r *http.Request) { lazy.ServeHTTP(w, r) }

// ServeHTTP handles a CloudEvent delivered by a trigger.
func (f *Function) ServeHTTP(w http.ResponseWriter, r *http.Request) { f.h.ServeHTTP(w, r) }

// Handle matches the ride named by the event's subject through lifecycle.Service.Match, with
// this function's candidate search (pick). It returns OutcomeOffered, OutcomeNoDriver,
// OutcomeUnmatched, OutcomeDuplicate (event already handled) or OutcomeNotNeeded (the ride is no
// longer REQUESTED or already has a live offer). In batch mode a ride event instead puts the ride
// into the batch (OutcomeJoined); a match.batch.due event runs its window in either mode (RunBatch),
// so rides still waiting when the mode is switched back to greedy are matched.
func (f *Function) Handle(ctx context.Context, e event.Event) (outcome string, err error) {
	if e.Type() == events.MatchBatchDue {
		return f.RunBatch(ctx, e) // observes its rides' outcomes (observeBatch)
	}
	defer observeMatch(time.Now(), &outcome, &err)
	if err := dispatch.ValidateRideID("subject", e.Subject()); err != nil {
		return "", err
	}
	if f.d.Config.MatchMode == config.MatchBatch {
		if err := f.lc.JoinBatch(ctx, e.Subject()); err != nil {
			return "", err
		}
		return OutcomeJoined, nil
	}
	ref := &lifecycle.EventRef{Consumer: Consumer, Source: e.Source(), ID: e.ID()}
	var live *dispatch.LiveOffer
	var driverID string
	pick := func(ctx context.Context, ride *dispatch.Ride, excluded map[string]bool, win lifecycle.Window) (*dispatch.Offer, string, error) {
		o, note, err := f.pick(ctx, ride, excluded, win)
		if o != nil {
			live, driverID = &dispatch.LiveOffer{OfferID: o.ID, RideID: ride.ID, Pickup: ride.Pickup, Dropoff: ride.Dropoff,
				DistanceM: o.DistanceM, ExpiresAt: win.ExpiresAt.UTC()}, o.DriverID
		}
		return o, note, err
	}
	outcome, err = f.lc.Match(ctx, e.Subject(), ref, pick)
	if err == nil && outcome == OutcomeOffered && live != nil {
		f.pushOffer(ctx, *live, driverID)
	}
	return outcome, err
}

// pick searches candidates by expanding radius and locks the best one it can (the offer-lock
// script re-checks that he is still available, alive and free in Redis; PostgreSQL then confirms he
// holds no active ride). It returns the locked offer, or nil
// and a note saying why nobody was offered.
func (f *Function) pick(ctx context.Context, ride *dispatch.Ride, excluded map[string]bool, win lifecycle.Window) (*dispatch.Offer, string, error) {
	c := f.d.Config
	tried := map[string]bool{}
	seen := 0
	radii := Radii(c.SearchRadiiM, ride.MatchAttempts)
	for i, radius := range radii {
		last := i == len(radii)-1
		hits, err := f.d.Redis.Nearby(ctx, ride.Pickup, radius, c.SearchCount+len(excluded))
		if err != nil {
			return nil, "", err
		}
		cands, err := f.eligible(ctx, hits, excluded, tried)
		if err != nil {
			return nil, "", err
		}
		seen += len(cands)
		if len(cands) < c.MinCandidates && !last && len(hits) < c.SearchCount+len(excluded) {
			continue // too few here: widen before choosing
		}
		dispatch.Rank(f.score, cands)
		for _, cand := range cands {
			tried[cand.DriverID] = true
			offer, err := f.lockCandidate(ctx, ride, cand, win)
			if err != nil || offer != nil {
				return offer, "", err
			}
		}
	}
	maxR := radii[len(radii)-1]
	if seen == 0 {
		return nil, fmt.Sprintf("no available driver within %.0f m", maxR), nil
	}
	return nil, fmt.Sprintf("all %d available drivers within %.0f m were taken by other offers", seen, maxR), nil
}

// lockCandidate takes cand's offer lock for ride for the window win and returns the offer it
// locked, or nil when another offer holds him, he is no longer eligible (checked atomically by the
// lock script), or PostgreSQL has him on a ride (then the lock is released again and the service
// repairs his Redis state).
func (f *Function) lockCandidate(ctx context.Context, ride *dispatch.Ride, cand dispatch.Candidate, win lifecycle.Window) (*dispatch.Offer, error) {
	offer := &dispatch.Offer{
		ID: uuid.NewString(), RideID: ride.ID, DriverID: cand.DriverID,
		DistanceM: cand.DistanceM, Score: cand.Score, ExpiresAt: win.ExpiresAt,
	}
	ok, err := f.d.Redis.LockOffer(ctx, cand.DriverID, dispatch.LiveOffer{
		OfferID: offer.ID, RideID: ride.ID, Pickup: ride.Pickup, Dropoff: ride.Dropoff,
		DistanceM: cand.DistanceM, ExpiresAt: win.ExpiresAt.UTC(),
	}, win.LockTTL())
	if err != nil || !ok {
		return nil, err
	}
	free, err := win.DriverFree(ctx, cand.DriverID)
	if err == nil && free {
		return offer, nil
	}
	// Redis showed an on-ride driver available: never offer him; the service repairs him.
	if _, rerr := f.d.Redis.ReleaseOffer(ctx, cand.DriverID, offer.ID, false); rerr != nil && err == nil {
		err = rerr
	}
	return nil, err
}

// eligible keeps the hits that are alive, available, without a ride, not excluded and not yet tried.
func (f *Function) eligible(ctx context.Context, hits []redisstore.GeoHit, excluded, tried map[string]bool) ([]dispatch.Candidate, error) {
	ids := make([]string, 0, len(hits))
	keep := make([]redisstore.GeoHit, 0, len(hits))
	for _, h := range hits {
		if !excluded[h.DriverID] && !tried[h.DriverID] {
			ids = append(ids, h.DriverID)
			keep = append(keep, h)
		}
	}
	infos, err := f.d.Redis.DriverInfos(ctx, ids)
	if err != nil {
		return nil, err
	}
	return candidatesOf(keep, infos, time.Now()), nil
}

// candidatesOf turns hits and their drivers' infos (same order) into the candidates that are alive,
// available and without a ride, with their idle time at now.
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

// observeMatch counts one handled ride event in metrics.MatchOutcomes and times it in
// metrics.MatchDuration under its outcome ("error" when it failed).
func observeMatch(start time.Time, outcome *string, err *error) {
	o := *outcome
	if *err != nil {
		o = "error"
	}
	metrics.MatchOutcomes.WithLabelValues(o).Inc()
	metrics.MatchDuration.WithLabelValues(o).Observe(metrics.Since(start))
}

// observeBatch counts the rides of one batch window run by their outcome in metrics.MatchOutcomes
// (the report's counts; "deferred" for rides left to the next window) and times the whole run in
// metrics.MatchDuration under "batch" ("duplicate" for a window run already, "error" when it
// failed). The report's text is never a label: it holds counts.
func observeBatch(start time.Time, rep BatchReport, dup bool, err error) {
	for o, n := range map[string]int{
		OutcomeOffered: rep.Offered, OutcomeNoDriver: rep.NoDriver, "deferred": rep.Deferred,
		OutcomeUnmatched: rep.Unmatched, OutcomeNotNeeded: rep.NotNeeded, OutcomeDuplicate: rep.Duplicate,
	} {
		metrics.MatchOutcomes.WithLabelValues(o).Add(float64(n))
	}
	o := "batch"
	switch {
	case err != nil:
		o = "error"
	case dup:
		o = OutcomeDuplicate
	}
	metrics.MatchDuration.WithLabelValues(o).Observe(metrics.Since(start))
}
