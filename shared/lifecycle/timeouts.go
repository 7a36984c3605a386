package lifecycle

import (
	"context"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/metrics"
	"github.com/flagdown/flagdown/shared/pgstore"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// DriverOffline handles a driver whose heartbeat expired. It takes Redis's liveness decision first
// (redisstore.Store.DriverPresence) and acts only when it is "lapsed": a driver alive again (he
// pinged meanwhile) or "unknown" (Redis lost his state, or his deadline fell inside a Redis outage:
// the decision is deferred, see lapse.lua) is stale and nothing changes. Otherwise, in one transaction: driver.status.changed
// (when Redis showed him anything but offline); an ACCEPTED ride of his is re-opened for matching
// without him (ride.reopened, by system, reason driver_offline; a fresh retry budget) and his
// assignment cleared; an IN_PROGRESS ride only raises ride.driver.offline. After the commit Redis
// gets his assignment and marks him offline (unless a ping came in between). Redis is written only
// after the commit, so a retried delivery after a failed commit sees the same state and emits the
// same events; the announcements of one expiry (named by his last ping time) have deterministic ids,
// so concurrent or repeated handlers (the expiry event, reconcile) write each once. reason is
// recorded in the events.
func (s *Service) DriverOffline(ctx context.Context, driverID, reason string, ev *EventRef) (Outcome, error) {
	p, err := s.d.Redis.DriverPresence(ctx, driverID)
	if err != nil {
		return "", err
	}
	if p.State != redisstore.PresenceLapsed {
		return OutcomeStale, nil
	}
	episode := strconv.FormatInt(p.LastPingMs, 10)
	out := OutcomeDone
	first, err := s.change(ctx, ev, func(tx pgx.Tx, fx *dispatch.Effects) error {
		out = OutcomeStale
		fx.Offline = append(fx.Offline, driverID)
		now := time.Now().UTC()
		if p.Status != dispatch.DriverOffline && p.Status != "" { // "": Redis knew nothing of him
			wrote, err := pgstore.InsertOutboxOnce(ctx, tx, pgstore.OnceID("driver.offline", driverID, episode), pgstore.OutboxEvent{
				Type: events.DriverStatusChanged, Source: s.Source, Subject: driverID,
				Data: events.DriverStatusChangedData{DriverID: driverID, From: string(p.Status), To: string(dispatch.DriverOffline), Reason: reason, At: now},
			})
			if err != nil {
				return err
			}
			if wrote {
				out = OutcomeDone
			}
		}
		ride, err := pgstore.ActiveRideOfDriver(ctx, tx, driverID) // locks the ride row
		if err != nil || ride == nil {
			return err
		}
		switch ride.Status {
		case dispatch.RideAccepted:
			out = OutcomeDone
			return s.reopen(ctx, tx, fx, ride, ReasonDriverOffline, "driver "+driverID+" went offline; matching again")
		case dispatch.RideInProgress:
			wrote, err := pgstore.InsertOutboxOnce(ctx, tx, pgstore.OnceID("ride.driver.offline", ride.ID, driverID, episode), pgstore.OutboxEvent{
				Type: events.RideDriverOffline, Source: s.Source, Subject: ride.ID,
				Data: events.RideDriverOfflineData{RideID: ride.ID, DriverID: driverID, Status: string(ride.Status), At: now},
			})
			if wrote {
				out = OutcomeDone
			}
			return err
		}
		return nil
	})
	if !first {
		return OutcomeDuplicate, err
	}
	return out, err
}

// OfferTimedOut handles a driver's offer lock that expired: each of his PENDING offers whose window
// closed becomes EXPIRED (its ride locked first, then the offer), each still-REQUESTED ride is
// matched again without him (ride.offer.expired), and the miss counts against him in scoring. It is
// stale when no such offer exists (he answered, or it was handled already).
func (s *Service) OfferTimedOut(ctx context.Context, driverID string, ev *EventRef) (Outcome, error) {
	due, err := pgstore.DueOffersOfDriver(ctx, s.d.DB.Pool, driverID, OfferClockSlack)
	if err != nil {
		return "", err
	}
	expired := 0
	first, err := s.change(ctx, ev, func(tx pgx.Tx, fx *dispatch.Effects) error {
		expired = 0
		for _, o := range due { // ordered by ride id: two handlers lock rides in the same order
			ride, err := lockRide(ctx, tx, o.RideID)
			if err != nil {
				return err
			}
			ok, err := pgstore.ExpireOffer(ctx, tx, o.ID, OfferClockSlack)
			if err != nil {
				return err
			}
			if !ok {
				continue // answered or expired meanwhile
			}
			expired++
			fx.ReleaseOffers = append(fx.ReleaseOffers, dispatch.OfferRelease{DriverID: driverID, OfferID: o.ID, Requeue: true})
			if _, err := dispatch.Transition(ride.Status, dispatch.ActionExpire, dispatch.ActorSystem); err != nil {
				continue // the ride moved on (cancelled): nothing to match
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
		if expired > 0 {
			fx.Misses = append(fx.Misses, driverID)
		}
		return nil
	})
	if !first {
		return OutcomeDuplicate, err
	}
	if err != nil {
		return "", err
	}
	if expired == 0 {
		return OutcomeStale, nil
	}
	metrics.OfferResponses.WithLabelValues("timed_out").Add(float64(expired))
	return OutcomeDone, nil
}

// OfferTimerFired handles the timer of offer offerID (P offertimer:{offer}): its driver's PENDING
// offers whose window closed time out (OfferTimedOut). It is stale when the offer is unknown or
// its id is not an offer id.
func (s *Service) OfferTimerFired(ctx context.Context, offerID string, ev *EventRef) (Outcome, error) {
	if _, err := uuid.Parse(offerID); err != nil {
		return OutcomeStale, nil
	}
	driverID, err := pgstore.OfferDriver(ctx, s.d.DB.Pool, offerID)
	if err != nil || driverID == "" {
		return OutcomeStale, err
	}
	return s.OfferTimedOut(ctx, driverID, ev)
}

// RetryDue asks for another match of rideID (ride.retry) if it is still REQUESTED without a live
// offer; reason is retry_timer or reconcile. The retry counts as unanswered until match records
// its next attempt (pgstore.NoteRetryIssued), which spaces out reconcile's next retry of the ride.
func (s *Service) RetryDue(ctx context.Context, rideID, reason string, ev *EventRef) (Outcome, error) {
	out := OutcomeStale
	first, err := s.change(ctx, ev, func(tx pgx.Tx, fx *dispatch.Effects) error {
		out = OutcomeStale
		ride, err := lockRide(ctx, tx, rideID)
		if err != nil {
			return err
		}
		if ride.Status != dispatch.RideRequested {
			return nil
		}
		if live, err := pgstore.HasLiveOffer(ctx, tx, rideID); err != nil || live {
			return err
		}
		if err := pgstore.NoteRetryIssued(ctx, tx, rideID); err != nil {
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

// Reasons a ride is re-opened by the system (events.RideTransitionData.Reason of ride.reopened).
const (
	// ReasonDriverOffline: the driver of the ACCEPTED ride went offline (DriverOffline).
	ReasonDriverOffline = "driver_offline"
	// ReasonPickupOverdue: the ACCEPTED ride was not started within the pickup deadline
	// (PickupOverdue).
	ReasonPickupOverdue = "pickup_overdue"
)

// reopen takes the ACCEPTED ride (locked) from its driver: REQUESTED again with a fresh retry
// budget, his assignment cleared, ride.reopened (by system, reason) written and note kept as the
// ride's match note.
func (s *Service) reopen(ctx context.Context, tx pgx.Tx, fx *dispatch.Effects, ride *dispatch.Ride, reason, note string) error {
	to, err := dispatch.Transition(ride.Status, dispatch.ActionReopen, dispatch.ActorSystem)
	if err != nil {
		return err
	}
	at, version, err := pgstore.SetRideStatus(ctx, tx, ride.ID, pgstore.StatusChange{From: ride.Status, To: to})
	if err != nil {
		return err
	}
	if err := pgstore.TouchRide(ctx, tx, ride.ID, note); err != nil {
		return err
	}
	a, err := free(ctx, tx, ride.DriverID, ride, version, nil)
	if err != nil {
		return err
	}
	fx.Assignments = append(fx.Assignments, a)
	_, err = pgstore.InsertOutbox(ctx, tx, pgstore.OutboxEvent{
		Type: events.RideReopened, Source: s.Source, Subject: ride.ID,
		Data: events.RideTransitionData{RideID: ride.ID, RiderID: ride.RiderID, DriverID: ride.DriverID,
			From: string(ride.Status), To: string(to), By: string(dispatch.ActorSystem),
			Reason: reason, At: at.UTC(), Version: version},
	})
	return err
}

// PickupOverdue re-opens rideID when it is still ACCEPTED and was accepted longer than the pickup
// deadline ago (Rules.PickupDeadline, by PostgreSQL's clock, checked again under the ride's lock):
// the driver never started it, so it is matched again without him (ride.reopened, by system,
// reason pickup_overdue; a fresh retry budget; his assignment cleared). It is stale when the ride
// moved on, or when the deadline is off (0).
func (s *Service) PickupOverdue(ctx context.Context, rideID string) (Outcome, error) {
	deadline := s.d.Rules.PickupDeadline
	if deadline <= 0 {
		return OutcomeStale, nil
	}
	out := OutcomeStale
	_, err := s.change(ctx, nil, func(tx pgx.Tx, fx *dispatch.Effects) error {
		out = OutcomeStale
		ride, err := lockRide(ctx, tx, rideID)
		if err != nil || ride.Status != dispatch.RideAccepted {
			return err
		}
		due, err := pgstore.OverdueRides(ctx, tx, dispatch.RideAccepted, deadline, []string{rideID}, 1)
		if err != nil || len(due) == 0 {
			return err
		}
		out = OutcomeDone
		return s.reopen(ctx, tx, fx, ride, ReasonPickupOverdue,
			"not started within the pickup deadline ("+deadline.String()+") by driver "+ride.DriverID+"; matching again")
	})
	if err == nil && out == OutcomeDone {
		metrics.RideTimeouts.WithLabelValues(ReasonPickupOverdue).Inc()
	}
	return out, err
}

// TripOverdueEventID is the id of rideID's ride.overdue outbox row: one alert per ride, whoever
// raises it and however often.
func TripOverdueEventID(rideID string) string { return pgstore.OnceID("ride.overdue", rideID) }

// TripOverdue raises ride.overdue once for rideID when it is still IN_PROGRESS and started longer
// than the trip ceiling ago (Rules.TripCeiling, by PostgreSQL's clock, under the ride's lock). It
// is an alert for operators: the ride's state does not change. It is stale when the alert was
// raised already, the ride moved on, or the ceiling is off (0).
func (s *Service) TripOverdue(ctx context.Context, rideID string) (Outcome, error) {
	ceiling := s.d.Rules.TripCeiling
	if ceiling <= 0 {
		return OutcomeStale, nil
	}
	out := OutcomeStale
	_, err := s.change(ctx, nil, func(tx pgx.Tx, _ *dispatch.Effects) error {
		out = OutcomeStale
		ride, err := lockRide(ctx, tx, rideID)
		if err != nil || ride.Status != dispatch.RideInProgress || ride.StartedAt == nil {
			return err
		}
		due, err := pgstore.OverdueRides(ctx, tx, dispatch.RideInProgress, ceiling, []string{rideID}, 1)
		if err != nil || len(due) == 0 {
			return err
		}
		wrote, err := pgstore.InsertOutboxOnce(ctx, tx, TripOverdueEventID(rideID), pgstore.OutboxEvent{
			Type: events.RideOverdue, Source: s.Source, Subject: rideID,
			Data: events.RideOverdueData{RideID: rideID, RiderID: ride.RiderID, DriverID: ride.DriverID,
				Status: string(ride.Status), StartedAt: ride.StartedAt.UTC(), CeilingS: ceiling.Seconds(), At: time.Now().UTC()},
		})
		if wrote {
			out = OutcomeDone
		}
		return err
	})
	if err == nil && out == OutcomeDone {
		metrics.RideTimeouts.WithLabelValues("trip_overdue").Inc()
	}
	return out, err
}
