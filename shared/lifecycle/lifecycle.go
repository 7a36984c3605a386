// Package lifecycle holds the timeout transitions that both the expiry-notification function
// (driven by Redis expiry events) and the reconcile function (the backstop that finds what a lost
// event left behind) perform: a driver going offline, an offer timing out, a ride due for another
// match attempt. Every operation re-reads state before acting, so a late or repeated trigger has no
// second effect, and records the triggering event in processed_events when there is one.
package lifecycle

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/shared/app"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/pgstore"
)

// OfferClockSlack absorbs clock skew between the host that set an offer lock and PostgreSQL when
// deciding an offer's window has closed.
const OfferClockSlack = time.Second

// EventRef names the event that triggered an operation, for idempotency on (source, id).
type EventRef struct {
	// Consumer is the consuming function's name in processed_events.
	Consumer string
	Source   string
	ID       string
}

// Service performs the transitions for one process.
type Service struct {
	d *app.Deps
	// Source is the CloudEvent source of the events it emits (the calling function).
	Source string
}

// New returns a Service emitting events with source.
func New(d *app.Deps, source string) *Service { return &Service{d: d, Source: source} }

// tx runs fn in a transaction after recording ev (when non-nil); it reports false without running
// fn when ev was already processed.
func (s *Service) tx(ctx context.Context, ev *EventRef, fn func(pgx.Tx) error) (bool, error) {
	first := true
	err := s.d.DB.Tx(ctx, func(tx pgx.Tx) error {
		if ev != nil {
			var err error
			if first, err = pgstore.MarkProcessed(ctx, tx, ev.Consumer, ev.Source, ev.ID); err != nil || !first {
				return err
			}
		}
		return fn(tx)
	})
	return first, err
}

// Outcome says what an operation did.
type Outcome string

// Outcomes.
const (
	OutcomeDone      Outcome = "done"
	OutcomeDuplicate Outcome = "duplicate"
	OutcomeStale     Outcome = "stale" // state moved on (fresh ping, answered offer): nothing to do
)

// DriverOffline handles a driver whose heartbeat expired: unless he pinged again meanwhile, he
// leaves the available set and becomes offline (driver.status.changed); an ACCEPTED ride of his is
// re-opened for matching without him (ride.reopened, by system, reason driver_offline); an
// IN_PROGRESS ride only raises ride.driver.offline. reason is recorded in the events.
func (s *Service) DriverOffline(ctx context.Context, driverID, reason string, ev *EventRef) (Outcome, error) {
	var out Outcome = OutcomeDone
	first, err := s.tx(ctx, ev, func(tx pgx.Tx) error {
		prev, alive, err := s.d.Redis.MarkOffline(ctx, driverID)
		if err != nil {
			return err
		}
		if alive {
			out = OutcomeStale
			return nil
		}
		now := time.Now().UTC()
		if prev != dispatch.DriverOffline && prev != "" { // "": Redis knew nothing of him
			if _, err := pgstore.InsertOutbox(ctx, tx, pgstore.OutboxEvent{
				Type: events.DriverStatusChanged, Source: s.Source, Subject: driverID,
				Data: events.DriverStatusChangedData{DriverID: driverID, From: string(prev), To: string(dispatch.DriverOffline), Reason: reason, At: now},
			}); err != nil {
				return err
			}
		}
		ride, err := pgstore.ActiveRideOfDriver(ctx, tx, driverID)
		if err != nil || ride == nil {
			if err == nil && prev == dispatch.DriverOffline {
				out = OutcomeStale
			}
			return err
		}
		switch ride.Status {
		case dispatch.RideAccepted:
			at, err := pgstore.SetRideStatus(ctx, tx, ride.ID, pgstore.StatusChange{From: dispatch.RideAccepted, To: dispatch.RideRequested})
			if err != nil {
				return err
			}
			if err := pgstore.TouchRide(ctx, tx, ride.ID, "driver "+driverID+" went offline; matching again"); err != nil {
				return err
			}
			if _, err := pgstore.InsertOutbox(ctx, tx, pgstore.OutboxEvent{
				Type: events.RideReopened, Source: s.Source, Subject: ride.ID,
				Data: events.RideTransitionData{RideID: ride.ID, RiderID: ride.RiderID, DriverID: driverID,
					From: string(dispatch.RideAccepted), To: string(dispatch.RideRequested), By: string(dispatch.ActorSystem),
					Reason: "driver_offline", At: at.UTC()},
			}); err != nil {
				return err
			}
			// The ride is no longer his: without this his Redis state keeps the ride, and when he
			// comes back his pings keep him "navigating" to it, out of the available set for good.
			return s.d.Redis.LeaveRide(ctx, driverID, ride.ID)
		case dispatch.RideInProgress:
			if prev == dispatch.DriverOffline {
				out = OutcomeStale // alerted already
				return nil
			}
			_, err := pgstore.InsertOutbox(ctx, tx, pgstore.OutboxEvent{
				Type: events.RideDriverOffline, Source: s.Source, Subject: ride.ID,
				Data: events.RideDriverOfflineData{RideID: ride.ID, DriverID: driverID, Status: string(ride.Status), At: now},
			})
			return err
		}
		return nil
	})
	if !first {
		return OutcomeDuplicate, err
	}
	return out, err
}

// OfferTimedOut handles a driver's offer lock that expired: his PENDING offers whose window closed
// become EXPIRED, each still-REQUESTED ride is matched again without him (ride.offer.expired), and
// the miss counts against him in scoring. It is stale when no such offer exists (he answered).
func (s *Service) OfferTimedOut(ctx context.Context, driverID string, ev *EventRef) (Outcome, error) {
	var expired []dispatch.Offer
	first, err := s.tx(ctx, ev, func(tx pgx.Tx) error {
		var err error
		if expired, err = pgstore.ExpireDueOffersOfDriver(ctx, tx, driverID, OfferClockSlack); err != nil {
			return err
		}
		for _, o := range expired {
			ride, err := pgstore.GetRide(ctx, tx, o.RideID, true)
			if err != nil {
				return err
			}
			if ride.Status != dispatch.RideRequested {
				continue
			}
			if err := pgstore.TouchRide(ctx, tx, ride.ID, ""); err != nil {
				return err
			}
			if _, err := pgstore.InsertOutbox(ctx, tx, pgstore.OutboxEvent{
				Type: events.RideOfferExpired, Source: s.Source, Subject: ride.ID,
				Data: events.RideOfferExpiredData{RideID: ride.ID, OfferID: o.ID, DriverID: driverID, ExpiresAt: o.ExpiresAt.UTC()},
			}); err != nil {
				return err
			}
		}
		return nil
	})
	if !first {
		return OutcomeDuplicate, err
	}
	if err != nil {
		return "", err
	}
	if len(expired) == 0 {
		return OutcomeStale, nil
	}
	if err := s.d.Redis.RecordMiss(context.WithoutCancel(ctx), driverID, s.d.Config.MissMemory); err != nil {
		s.d.Log.Error("record missed offer", "driver_id", driverID, "err", err)
	}
	return OutcomeDone, nil
}

// RetryDue asks for another match of rideID (ride.retry) if it is still REQUESTED without a live
// offer; reason is retry_timer or reconcile.
func (s *Service) RetryDue(ctx context.Context, rideID, reason string, ev *EventRef) (Outcome, error) {
	out := OutcomeStale
	first, err := s.tx(ctx, ev, func(tx pgx.Tx) error {
		ride, err := pgstore.GetRide(ctx, tx, rideID, true)
		if err != nil {
			return err
		}
		if ride.Status != dispatch.RideRequested {
			return nil
		}
		if pending, err := pgstore.PendingOffer(ctx, tx, rideID); err != nil || (pending != nil && pending.ExpiresAt.After(time.Now())) {
			return err
		}
		if err := pgstore.TouchRide(ctx, tx, rideID, ""); err != nil {
			return err
		}
		out = OutcomeDone
		_, err = pgstore.InsertOutbox(ctx, tx, pgstore.OutboxEvent{
			Type: events.RideRetry, Source: s.Source, Subject: rideID,
			Data: events.RideRetryData{RideID: rideID, Attempt: ride.MatchAttempts, Reason: reason},
		})
		return err
	})
	if !first {
		return OutcomeDuplicate, err
	}
	return out, err
}
