package lifecycle

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/logging"
	"github.com/flagdown/flagdown/shared/metrics"
	"github.com/flagdown/flagdown/shared/pgstore"
	"github.com/flagdown/flagdown/shared/tracing"
)

// Match outcomes.
const (
	MatchOffered   = "offered"
	MatchNoDriver  = "no_driver"
	MatchDuplicate = "duplicate"
	MatchNotNeeded = "not_needed"
	// MatchUnmatched: nobody could be offered within the retry budget; the ride is UNMATCHED.
	MatchUnmatched = "unmatched"
)

// ReasonRetryBudget is the reason of a ride.unmatched whose ride had been offered before but whose
// offers expired or were declined until FLAGDOWN_RETRY_BUDGET was spent.
const ReasonRetryBudget = "retry_budget"

// Window is the offer window of one match attempt.
type Window struct {
	// ExpiresAt ends the window by PostgreSQL's clock (offers.expires_at, shown to the driver).
	ExpiresAt time.Time
	// until is the same instant on this process's monotonic clock.
	until time.Time
	// free answers DriverFree from PostgreSQL, in the match's transaction.
	free func(ctx context.Context, driverID string) (bool, error)
}

// DriverFree reports whether PostgreSQL has driverID free of any active ride and of any PENDING
// offer, read in the match's transaction. Call it for the driver whose offer lock was just taken:
// Redis may lag (a lost write, a lost offer lock, a Redis restart) and show an on-ride or offered
// driver available; such a driver is not offered the ride, and an on-ride driver's Redis state is
// repaired from PostgreSQL after the commit. The offer's INSERT re-checks the rule under the
// driver's row lock, whatever the code does (migration 00009: offers_one_pending_per_driver,
// offers_driver_not_on_ride), so an accept or a street hail racing the match is refused there.
func (w Window) DriverFree(ctx context.Context, driverID string) (bool, error) {
	if w.free == nil {
		return true, nil
	}
	return w.free(ctx, driverID)
}

// LockTTL is how long the offer lock must live from now for the window to end at ExpiresAt,
// measured on the monotonic clock (a host clock set seconds off does not change it).
func (w Window) LockTTL() time.Duration { return time.Until(w.until) }

// Pick searches for the best available driver for ride, excluding drivers already offered it, and
// takes his offer lock for win (releasing it again for a driver win.DriverFree says is on a ride); it returns the offer it locked (ID, DriverID, DistanceM, Score set;
// ExpiresAt is win.ExpiresAt) or nil and a note saying why nobody could be offered.
type Pick func(ctx context.Context, ride *dispatch.Ride, excluded map[string]bool, win Window) (*dispatch.Offer, string, error)

// Match runs one match attempt of rideID, triggered by ev: with the ride locked it expires offers
// whose window closed; a ride tried before whose retry budget (FLAGDOWN_RETRY_BUDGET, from
// match_started_at) is spent becomes UNMATCHED at once (ride.unmatched, reason retry_budget: its
// offers kept expiring or being declined), else it calls pick. An offer found is recorded PENDING with ride.offered; when
// nobody could be offered the attempt and its note are recorded and a retry timer armed with
// backoff, or, past FLAGDOWN_RETRY_MAX_ATTEMPTS or FLAGDOWN_RETRY_BUDGET (counted from
// match_started_at), the ride becomes UNMATCHED (ride.unmatched). If the transaction fails after
// pick locked a driver, his lock is released, unless the commit's outcome is unknown
// (pgstore.ErrCommitUnknown: the offer may be PENDING, so he is not requeued). Outcomes: MatchOffered, MatchNoDriver,
// MatchUnmatched, MatchDuplicate, MatchNotNeeded (no longer REQUESTED, a live offer exists, or ev is
// a ride.retry issued before the ride's last attempt: EventRef.RetryAttempt).
//
// The attempt is a "match ride" span (ride.id, flagdown.outcome) and the recording of an offer a
// "create offer" span within it (ride.id, driver.id, offer.id), whose trace context the
// ride.offered outbox row records.
func (s *Service) Match(ctx context.Context, rideID string, ev *EventRef, pick Pick) (outcome string, err error) {
	ctx, span := tracing.Start(ctx, "match ride", trace.WithAttributes(tracing.RideIDKey.String(rideID)))
	defer func() {
		if span.IsRecording() {
			span.SetAttributes(tracing.OutcomeKey.String(outcome))
		}
		tracing.End(span, err)
	}()
	c := s.d.Rules
	var locked *dispatch.Offer
	budgetSpent := false
	first, err := s.change(ctx, ev, func(tx pgx.Tx, fx *dispatch.Effects) (err error) {
		locked, outcome, budgetSpent = nil, "", false
		ride, err := lockRide(ctx, tx, rideID)
		if err != nil {
			return err
		}
		if _, err := dispatch.Transition(ride.Status, dispatch.ActionOffer, dispatch.ActorSystem); err != nil {
			outcome = MatchNotNeeded
			return nil
		}
		if ev != nil && ev.RetryAttempt != nil && ride.MatchAttempts > *ev.RetryAttempt {
			outcome = MatchNotNeeded // a stale ride.retry (EventRef.RetryAttempt)
			return nil
		}
		excluded, pending, now, err := pgstore.PrepareMatch(ctx, tx, ride.ID)
		if err != nil || pending {
			outcome = MatchNotNeeded
			return err
		}
		if ride.MatchAttempts > 0 && now.Sub(ride.MatchStartedAt) >= c.RetryBudget {
			// Tried before, and its offers expired or were declined until the budget was spent.
			outcome, budgetSpent = MatchUnmatched, true
			if err := pgstore.TouchRide(ctx, tx, ride.ID, "retry budget ("+c.RetryBudget.String()+") spent: no offer was accepted"); err != nil {
				return err
			}
			return s.unmatch(ctx, tx, ride, ride.MatchAttempts, ReasonRetryBudget)
		}
		win := Window{ExpiresAt: now.Add(c.OfferWindow), until: time.Now().Add(c.OfferWindow),
			free: func(ctx context.Context, driverID string) (bool, error) {
				onRide, pending, err := pgstore.DriverOfferable(ctx, tx, driverID)
				if err != nil {
					return false, err
				}
				if onRide != nil {
					fx.Assignments = append(fx.Assignments, onRide.Assignment)
				}
				return onRide == nil && !pending, nil
			}}
		offer, note, err := pick(ctx, ride, excluded, win)
		if err != nil {
			return err
		}
		if offer == nil {
			if err := pgstore.NoteMatchAttempt(ctx, tx, ride.ID, false, note); err != nil {
				return err
			}
			attempts := ride.MatchAttempts + 1
			if attempts >= c.RetryMaxAttempts || now.Sub(ride.MatchStartedAt) >= c.RetryBudget {
				outcome = MatchUnmatched
				return s.unmatch(ctx, tx, ride, attempts, note)
			}
			outcome = MatchNoDriver
			fx.RetryTimers = append(fx.RetryTimers, dispatch.RetryTimer{
				RideID: ride.ID, Attempt: attempts, Wait: dispatch.RetryWait(c.RetryBase, c.RetryMaxWait, attempts),
			})
			return nil
		}
		locked = offer
		offer.RideID, offer.ExpiresAt = ride.ID, win.ExpiresAt
		ctx, offerSpan := tracing.Start(ctx, "create offer", trace.WithAttributes(tracing.RideIDKey.String(ride.ID),
			tracing.DriverIDKey.String(offer.DriverID), tracing.OfferIDKey.String(offer.ID)))
		defer func() { tracing.End(offerSpan, err) }()
		if err := pgstore.InsertOffer(ctx, tx, offer); err != nil {
			return err
		}
		if err := pgstore.NoteMatchAttempt(ctx, tx, ride.ID, true, ""); err != nil {
			return err
		}
		outcome = MatchOffered
		_, err = pgstore.InsertOutbox(ctx, tx, pgstore.OutboxEvent{
			Type: events.RideOffered, Source: s.Source, Subject: ride.ID,
			Data: events.RideOfferedData{
				RideID: ride.ID, OfferID: offer.ID, DriverID: offer.DriverID, DistanceM: offer.DistanceM,
				Pickup:  events.Point{Lat: ride.Pickup.Lat, Lng: ride.Pickup.Lng},
				Dropoff: &events.Point{Lat: ride.Dropoff.Lat, Lng: ride.Dropoff.Lng}, ExpiresAt: offer.ExpiresAt.UTC(),
			},
		})
		return err
	})
	if !first {
		return MatchDuplicate, err
	}
	if err == nil && budgetSpent {
		metrics.RideTimeouts.WithLabelValues(ReasonRetryBudget).Inc()
	}
	if err == nil && locked != nil {
		s.confirmOffer(ctx, rideID, locked)
	}
	if err != nil && locked != nil && !errors.Is(err, pgstore.ErrCommitUnknown) {
		// The offer was not recorded: free the driver we locked. When the commit's outcome is
		// unknown the offer may be PENDING: his lock stays until its window ends, and the offer's
		// timer (or reconcile) settles it then.
		if _, rerr := s.d.Redis.ReleaseOffer(context.WithoutCancel(ctx), locked.DriverID, locked.ID, true); rerr != nil {
			s.d.Log.Error("release offer lock after failed match", logging.RideID(rideID), logging.DriverID(locked.DriverID), "err", rerr)
		}
	}
	return outcome, err
}

// confirmOffer shows the driver the offer now recorded (redisstore.Store.ConfirmOffer): until then
// his lock only kept other offers away. When Redis does not answer, his ping answers never show it;
// the push carries it, and the offer's timer ends it if nobody answers.
func (s *Service) confirmOffer(ctx context.Context, rideID string, o *dispatch.Offer) {
	ctx, cancel := s.d.Redis.Bounded(context.WithoutCancel(ctx))
	defer cancel()
	if _, err := s.d.Redis.ConfirmOffer(ctx, o.DriverID, o.ID); err != nil {
		s.d.Log.Warn("offer recorded but not shown in ping answers", logging.RideID(rideID), logging.DriverID(o.DriverID), "err", err)
	}
}

// unmatch ends a ride nobody could be offered within the retry budget.
func (s *Service) unmatch(ctx context.Context, tx pgx.Tx, ride *dispatch.Ride, attempts int, note string) error {
	to, err := dispatch.Transition(ride.Status, dispatch.ActionUnmatch, dispatch.ActorSystem)
	if err != nil {
		return err
	}
	at, version, err := pgstore.SetRideStatus(ctx, tx, ride.ID, pgstore.StatusChange{From: ride.Status, To: to})
	if err != nil {
		return err
	}
	_, err = pgstore.InsertOutbox(ctx, tx, pgstore.OutboxEvent{
		Type: events.RideUnmatched, Source: s.Source, Subject: ride.ID,
		Data: events.RideUnmatchedData{RideID: ride.ID, RiderID: ride.RiderID, Attempts: attempts, Reason: note, At: at.UTC(), Version: version},
	})
	return err
}
