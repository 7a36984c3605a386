// Package lifecycle is the one owner of state changes: every change of a ride, an offer or a
// driver's assignment goes through its Service, whichever function asks for it (accept, ride,
// match, expiry-notification, reconcile). Each operation, in one PostgreSQL transaction:
//
//  1. locks what it changes, always in the same order (ride row, then offer rows, then the driver's
//     driver_assignments row), so no two operations deadlock;
//  2. checks the change with the domain rules (dispatch.Transition, dispatch.CheckOfferAnswer);
//  3. makes it with conditional UPDATEs that bump the ride's version and the driver's assignment
//     epoch;
//  4. writes the outbox rows that announce it;
//
// and only after the commit applies the Redis effects the change asks for (dispatch.Effects), each
// compare-and-set on its version, so Redis follows PostgreSQL and never goes backwards. An effect
// that fails is logged and left to reconcile (RepairAssignments), never lost silently. Operations
// triggered by an event record it in processed_events in the same transaction: a duplicate has no
// second effect.
//
// It also owns ride creation (CreateRide): a rider's request is validated against the dispatch
// rules, decided into a REQUESTED ride and inserted with its ride.requested outbox row.
//
// A Service takes narrow dependencies (Deps: the PostgreSQL pool, the Redis store, a logger and the
// dispatch.Rules of the configuration), never the composition root: shared/host builds them once
// per process (host.Deps.Lifecycle).
package lifecycle

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/pgstore"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// OfferClockSlack absorbs the gap between an offer lock's TTL in Redis and PostgreSQL's clock when
// deciding that an offer's window has closed.
const OfferClockSlack = time.Second

// EventRef names the event that triggered an operation, for idempotency on (source, id).
type EventRef struct {
	// Consumer is the consuming function's name in processed_events.
	Consumer string
	Source   string
	ID       string
	// RetryAttempt is set when the event is a ride.retry: the ride's match attempts when it was
	// issued (events.RideRetryData.Attempt). Match answers MatchNotNeeded once the ride has had more
	// attempts than that: a later attempt already left what follows it (a retry timer, an offer or
	// UNMATCHED), so the stale retry neither searches again nor spends the retry budget.
	RetryAttempt *int
}

// Outcome says what an operation did.
type Outcome string

// Outcomes.
const (
	OutcomeDone      Outcome = "done"
	OutcomeDuplicate Outcome = "duplicate"
	OutcomeStale     Outcome = "stale" // state moved on (fresh ping, answered offer): nothing to do
)

// Deps are what a Service needs: the stores it changes, where it logs, and the rules it decides by.
type Deps struct {
	// DB is the PostgreSQL pool, the truth every change commits to (rides, offers, assignments,
	// outbox, processed_events).
	DB *pgstore.DB
	// Redis is the store the committed effects are applied to.
	Redis *redisstore.Store
	// Log receives the failures that are left to reconcile.
	Log *slog.Logger
	// Rules are the dispatch rules of the configuration (config.Config.Rules).
	Rules dispatch.Rules
}

// Service performs state changes for one process. It is safe for concurrent use.
type Service struct {
	d Deps
	// Source is the CloudEvent source of the events it emits (the calling function).
	Source string
	// effects follows the effects left to reconcile because Redis did not answer.
	effects *redisstore.Degradation
}

// New returns a Service over d emitting events with source.
func New(d Deps, source string) *Service {
	return &Service{d: d, Source: source, effects: redisstore.NewDegradation("effects", d.Log)}
}

// change runs fn in a transaction after recording ev (when non-nil) and, once committed, applies
// the effects fn collected. It reports false without running fn when ev was already processed.
func (s *Service) change(ctx context.Context, ev *EventRef, fn func(tx pgx.Tx, fx *dispatch.Effects) error) (bool, error) {
	first := true
	var fx dispatch.Effects
	err := s.d.DB.Tx(ctx, func(tx pgx.Tx) error {
		fx = dispatch.Effects{}
		if ev != nil {
			var err error
			if first, err = pgstore.MarkProcessed(ctx, tx, ev.Consumer, ev.Source, ev.ID); err != nil || !first {
				return err
			}
		}
		return fn(tx, &fx)
	})
	if err != nil {
		return first, err
	}
	s.apply(context.WithoutCancel(ctx), fx)
	return first, nil
}

// apply makes Redis follow a committed change, within the store's Redis timeout
// (redisstore.Store.Bounded), so a Redis that does not answer delays the answer of a committed
// change by at most that long. A failure is logged, not returned: PostgreSQL already holds the
// truth, and reconcile re-derives what Redis missed (the versions make a late repair safe); one
// because Redis did not answer is counted (flagdown_redis_degraded_total{check="effects"}) and
// logged once per outage.
func (s *Service) apply(ctx context.Context, fx dispatch.Effects) {
	if fx.Empty() {
		return
	}
	ctx, cancel := s.d.Redis.Bounded(ctx)
	defer cancel()
	_, err := s.d.Redis.Apply(ctx, fx)
	switch {
	case err == nil:
		s.effects.Recovered()
	case dispatch.ErrorCode(err) == dispatch.CodeUnavailable:
		s.effects.Degraded(err, "effects left to reconcile (RepairAssignments, rides_retried)")
	default:
		s.d.Log.Error("redis effects not applied; reconcile will repair them", "source", s.Source, "err", err)
	}
}

// lockRide returns ride id locked for update (the first lock of every operation on a ride).
func lockRide(ctx context.Context, tx pgx.Tx, id string) (*dispatch.Ride, error) {
	return pgstore.GetRide(ctx, tx, id, true)
}

// free records that driverID left ride (whose version is now rideVersion) and returns the
// assignment effect; at is where he now is (nil keeps his position).
func free(ctx context.Context, tx pgx.Tx, driverID string, ride *dispatch.Ride, rideVersion int64, at *dispatch.Point) (dispatch.Assignment, error) {
	epoch, err := pgstore.SetAssignment(ctx, tx, driverID, "", "")
	return dispatch.Assignment{DriverID: driverID, Epoch: epoch, RideVersion: rideVersion, PrevRideID: ride.ID, At: at}, err
}

// assign records that driverID holds ride in status and returns the assignment effect.
func assign(ctx context.Context, tx pgx.Tx, driverID string, ride *dispatch.Ride, status dispatch.RideStatus, rideVersion int64) (dispatch.Assignment, error) {
	epoch, err := pgstore.SetAssignment(ctx, tx, driverID, ride.ID, status)
	return dispatch.Assignment{DriverID: driverID, Epoch: epoch, RideID: ride.ID, RideStatus: status, RideVersion: rideVersion}, err
}
