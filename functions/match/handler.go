// Package function is the match function: it finds the best available driver for a REQUESTED ride
// and offers him the ride under a lock.
//
// Triggered by ride.requested, ride.offer.declined and ride.reopened CloudEvents (subject = ride id).
// Steps, as in the design notes: nearest available drivers by expanding radius (GEOSEARCH ASC COUNT,
// so cost does not grow with fleet size); heartbeat and state filter in one round trip; drivers
// already offered this ride excluded; ranking by dispatch.Score; the first candidate whose offer lock
// (SET NX, offer window as TTL) we win gets the offer, recorded in PostgreSQL with a ride.offered
// outbox row in the same transaction. If nobody can be offered, the attempt and its reason are
// recorded and the ride stays REQUESTED. Each event is handled once per (source, id).
package function

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/shared/app"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/pgstore"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// Source is the CloudEvent source of events this function emits.
const Source = "/flagdown/match"

// Consumer is this function's name in processed_events.
const Consumer = "match"

// Triggers are the event types that start a match.
var Triggers = events.TypesFor("match")

// Outcomes of one match.
const (
	OutcomeOffered   = "offered"
	OutcomeNoDriver  = "no_driver"
	OutcomeDuplicate = "duplicate"
	OutcomeNotNeeded = "not_needed"
	// OutcomeUnmatched: nobody could be offered within the retry budget; the ride is UNMATCHED.
	OutcomeUnmatched = "unmatched"
)

// Function matches rides to drivers.
type Function struct {
	d     *app.Deps
	score dispatch.ScoreParams
	h     http.Handler
}

// New returns the function over d.
func New(d *app.Deps) *Function {
	c := d.Config
	f := &Function{d: d, score: dispatch.ScoreParams{
		IdleBonusMPerMin: c.ScoreIdleBonusMPerMin, IdleCapMin: c.ScoreIdleCapMin,
		RatingBonusM: c.ScoreRatingBonusM, DefaultRating: c.DefaultRating,
		MissPenaltyM: c.ScoreMissPenaltyM, MissMemory: c.MissMemory,
	}}
	f.h = app.EventHandler(d, Triggers, f.Handle)
	return f
}

var lazy = app.NewLazy(func(d *app.Deps) http.Handler { return New(d) })

// Handle is the OpenFaaS golang-middleware entry point.
func Handle(w http.ResponseWriter, r *http.Request) { lazy.ServeHTTP(w, r) }

// ServeHTTP handles a CloudEvent delivered by a trigger.
func (f *Function) ServeHTTP(w http.ResponseWriter, r *http.Request) { f.h.ServeHTTP(w, r) }

// OfferLock is the offer as stored in the driver's offer lock and shown in his ping responses.
type OfferLock struct {
	OfferID   string         `json:"offer_id"`
	RideID    string         `json:"ride_id"`
	Pickup    dispatch.Point `json:"pickup"`
	Dropoff   dispatch.Point `json:"dropoff"`
	DistanceM float64        `json:"distance_m"`
	ExpiresAt time.Time      `json:"expires_at"`
}

// Handle matches the ride named by the event's subject. It returns OutcomeOffered,
// OutcomeNoDriver, OutcomeDuplicate (event already handled) or OutcomeNotNeeded (the ride is no
// longer REQUESTED or already has a live offer).
func (f *Function) Handle(ctx context.Context, e event.Event) (string, error) {
	rideID := e.Subject()
	outcome := ""
	var lockedDriver, lockValue string
	var retryWait time.Duration
	var retryAttempt int
	err := f.d.DB.Tx(ctx, func(tx pgx.Tx) error {
		lockedDriver, lockValue, retryWait = "", "", 0
		first, err := pgstore.MarkProcessed(ctx, tx, Consumer, e.Source(), e.ID())
		if err != nil {
			return err
		}
		if !first {
			outcome = OutcomeDuplicate
			return nil
		}
		ride, err := pgstore.GetRide(ctx, tx, rideID, true)
		if err != nil {
			return err
		}
		if ride.Status != dispatch.RideRequested {
			outcome = OutcomeNotNeeded
			return nil
		}
		excluded, pending, err := pgstore.PrepareMatch(ctx, tx, ride.ID)
		if err != nil || pending {
			outcome = OutcomeNotNeeded
			return err
		}
		offer, value, note, err := f.offer(ctx, ride, excluded)
		if err != nil {
			return err
		}
		if offer == nil {
			if err := pgstore.NoteMatchAttempt(ctx, tx, ride.ID, false, note); err != nil {
				return err
			}
			attempts := ride.MatchAttempts + 1
			if attempts >= f.d.Config.RetryMaxAttempts || time.Since(ride.CreatedAt) >= f.d.Config.RetryBudget {
				outcome = OutcomeUnmatched
				return f.unmatched(ctx, tx, ride, attempts, note)
			}
			outcome = OutcomeNoDriver
			retryWait = RetryWait(f.d.Config.RetryBase, f.d.Config.RetryMaxWait, attempts)
			retryAttempt = attempts
			return nil
		}
		lockedDriver, lockValue = offer.DriverID, value
		if err := pgstore.InsertOffer(ctx, tx, offer); err != nil {
			return err
		}
		if err := pgstore.NoteMatchAttempt(ctx, tx, ride.ID, true, ""); err != nil {
			return err
		}
		_, err = pgstore.InsertOutbox(ctx, tx, pgstore.OutboxEvent{
			Type: events.RideOffered, Source: Source, Subject: ride.ID,
			Data: events.RideOfferedData{
				RideID: ride.ID, OfferID: offer.ID, DriverID: offer.DriverID, DistanceM: offer.DistanceM,
				Pickup: events.Point{Lat: ride.Pickup.Lat, Lng: ride.Pickup.Lng}, ExpiresAt: offer.ExpiresAt.UTC(),
			},
		})
		outcome = OutcomeOffered
		return err
	})
	if err == nil && retryWait > 0 {
		// Armed after the commit: if this fails, reconcile finds the ride idle and retries it.
		if terr := f.d.Redis.SetRetryTimer(context.WithoutCancel(ctx), rideID, strconv.Itoa(retryAttempt), retryWait); terr != nil {
			f.d.Log.Error("arm retry timer", "ride_id", rideID, "err", terr)
		}
	}
	if err != nil && lockedDriver != "" {
		// The offer was not recorded: free the driver we locked.
		if _, rerr := f.d.Redis.ReleaseOffer(context.WithoutCancel(ctx), lockedDriver, lockValue, true); rerr != nil {
			f.d.Log.Error("release offer lock after failed match", "driver_id", lockedDriver, "err", rerr)
		}
	}
	return outcome, err
}

// offer searches candidates by expanding radius and locks the best one it can. It returns the offer
// to record and the lock value, or a nil offer and a note saying why nobody was offered.
func (f *Function) offer(ctx context.Context, ride *dispatch.Ride, excluded map[string]bool) (*dispatch.Offer, string, string, error) {
	c := f.d.Config
	tried := map[string]bool{}
	seen := 0
	radii := Radii(c.SearchRadiiM, ride.MatchAttempts)
	for i, radius := range radii {
		last := i == len(radii)-1
		hits, err := f.d.Redis.Nearby(ctx, ride.Pickup, radius, c.SearchCount+len(excluded))
		if err != nil {
			return nil, "", "", err
		}
		cands, err := f.eligible(ctx, hits, excluded, tried)
		if err != nil {
			return nil, "", "", err
		}
		seen += len(cands)
		if len(cands) < c.MinCandidates && !last && len(hits) < c.SearchCount+len(excluded) {
			continue // too few here: widen before choosing
		}
		dispatch.Rank(f.score, cands)
		for _, cand := range cands {
			tried[cand.DriverID] = true
			offer := &dispatch.Offer{
				ID: uuid.NewString(), RideID: ride.ID, DriverID: cand.DriverID,
				DistanceM: cand.DistanceM, Score: cand.Score, ExpiresAt: time.Now().Add(c.OfferWindow),
			}
			value, _ := json.Marshal(OfferLock{
				OfferID: offer.ID, RideID: ride.ID, Pickup: ride.Pickup, Dropoff: ride.Dropoff,
				DistanceM: cand.DistanceM, ExpiresAt: offer.ExpiresAt.UTC(),
			})
			ok, err := f.d.Redis.LockOffer(ctx, cand.DriverID, string(value), c.OfferWindow)
			if err != nil {
				return nil, "", "", err
			}
			if ok {
				return offer, string(value), "", nil
			}
		}
	}
	maxR := radii[len(radii)-1]
	if seen == 0 {
		return nil, "", fmt.Sprintf("no available driver within %.0f m", maxR), nil
	}
	return nil, "", fmt.Sprintf("all %d available drivers within %.0f m were taken by other offers", seen, maxR), nil
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
	now := time.Now()
	out := make([]dispatch.Candidate, 0, len(ids))
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
	return out, nil
}

// unmatched ends a ride nobody could be offered within the retry budget.
func (f *Function) unmatched(ctx context.Context, tx pgx.Tx, ride *dispatch.Ride, attempts int, note string) error {
	at, err := pgstore.SetRideStatus(ctx, tx, ride.ID, pgstore.StatusChange{From: dispatch.RideRequested, To: dispatch.RideUnmatched})
	if err != nil {
		return err
	}
	_, err = pgstore.InsertOutbox(ctx, tx, pgstore.OutboxEvent{
		Type: events.RideUnmatched, Source: Source, Subject: ride.ID,
		Data: events.RideUnmatchedData{RideID: ride.ID, RiderID: ride.RiderID, Attempts: attempts, Reason: note, At: at.UTC()},
	})
	return err
}

// RetryWait is the wait before match attempt attempts+1: base × 2^(attempts−1), capped at max.
func RetryWait(base, max time.Duration, attempts int) time.Duration {
	w := base
	for i := 1; i < attempts && w < max; i++ {
		w *= 2
	}
	if w > max {
		w = max
	}
	return w
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
