package lifecycle

import (
	"time"

	"context"
	"errors"
	"math"

	"github.com/jackc/pgx/v5"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/metrics"
	"github.com/flagdown/flagdown/shared/pgstore"
)

// errAlreadyAccepted ends the transaction of a repeated accept by the driver who won.
var errAlreadyAccepted = errors.New("already accepted by this driver")

// Accept gives rideID to driverID if he holds its PENDING offer and its window is open by
// PostgreSQL's clock: offer ACCEPTED, ride REQUESTED → ACCEPTED, his assignment set, ride.accepted
// written; then Redis gets his assignment and his offer lock is released. A repeated accept by the
// driver who already won succeeds again and re-applies his assignment (a retry after a lost answer
// or a failed Redis write). Errors: not_found (also for a driver the ride was never offered to:
// he learns nothing of it), conflict (ride_taken with details.current_status, offer_expired,
// not_your_offer, driver_busy), unavailable.
func (s *Service) Accept(ctx context.Context, rideID, driverID string) error {
	_, err := s.change(ctx, nil, func(tx pgx.Tx, fx *dispatch.Effects) error {
		ride, err := lockRide(ctx, tx, rideID)
		if err != nil {
			return err
		}
		offer, now, err := pgstore.LatestOfferForUpdate(ctx, tx, rideID, driverID)
		if err != nil {
			return err
		}
		if offer == nil && ride.DriverID != driverID {
			// A driver the ride was never offered to learns nothing of it, not even that it exists.
			return dispatch.NotFound("ride", rideID)
		}
		if ride.Status == dispatch.RideAccepted && ride.DriverID == driverID {
			rows, err := pgstore.AssignmentsOf(ctx, tx, []string{driverID})
			if a, ok := rows[driverID]; ok && err == nil && a.RideID == rideID {
				fx.Assignments = append(fx.Assignments, a.Assignment)
			}
			if err != nil {
				return err
			}
			return errAlreadyAccepted
		}
		if ride.Status != dispatch.RideRequested {
			return dispatch.Conflict(dispatch.ReasonRideTaken, "the ride is "+string(ride.Status)).
				With("current_status", string(ride.Status))
		}
		if _, err := dispatch.Transition(ride.Status, dispatch.ActionAccept, dispatch.ActorDriver); err != nil {
			return err
		}
		if err := dispatch.CheckOfferAnswer(offer, driverID, now); err != nil {
			return err
		}
		if _, err := pgstore.SetOfferStatus(ctx, tx, offer.ID, dispatch.OfferAccepted); err != nil {
			return err
		}
		at, version, err := pgstore.SetRideStatus(ctx, tx, rideID, pgstore.StatusChange{
			From: dispatch.RideRequested, To: dispatch.RideAccepted, DriverID: driverID,
		})
		if err != nil {
			return err
		}
		a, err := assign(ctx, tx, driverID, ride, dispatch.RideAccepted, version)
		if err != nil {
			return err
		}
		fx.Assignments = append(fx.Assignments, a)
		fx.ReleaseOffers = append(fx.ReleaseOffers, dispatch.OfferRelease{DriverID: driverID, OfferID: offer.ID})
		fx.ClearRetryTimers = append(fx.ClearRetryTimers, rideID)
		fx.MatchDelaysS = append(fx.MatchDelaysS, math.Max(0, at.Sub(ride.MatchStartedAt).Seconds()))
		_, err = pgstore.InsertOutbox(ctx, tx, pgstore.OutboxEvent{
			Type: events.RideAccepted, Source: s.Source, Subject: rideID,
			Data: events.RideAcceptedData{RideID: rideID, OfferID: offer.ID, DriverID: driverID, RiderID: ride.RiderID, AcceptedAt: at.UTC(), Version: version},
		})
		return err
	})
	if errors.Is(err, errAlreadyAccepted) {
		return nil
	}
	if err == nil {
		metrics.OfferResponses.WithLabelValues("accepted").Inc()
	}
	return err
}

// rideEvent is the event type announcing a ride's move to each status by Act.
var rideEvent = map[dispatch.RideStatus]string{
	dispatch.RideInProgress: events.RideStarted,
	dispatch.RideCompleted:  events.RideCompleted,
	dispatch.RideCancelled:  events.RideCancelled,
	dispatch.RideRequested:  events.RideReopened,
}

// Act performs a rider's or driver's action on ride id: decline (the offered driver), start and
// complete (the ride's driver), cancel (the rider; or the driver, which re-opens an ACCEPTED ride
// for matching without him). actorID is the rider or driver id; reason is recorded with a cancel.
// Errors: not_found, permission_denied (not this ride's rider or driver), conflict
// (illegal_transition with details.current_status, offer_expired, not_your_offer), unavailable.
func (s *Service) Act(ctx context.Context, id string, action dispatch.Action, actor dispatch.Actor, actorID, reason string) error {
	_, err := s.change(ctx, nil, func(tx pgx.Tx, fx *dispatch.Effects) error {
		ride, err := lockRide(ctx, tx, id)
		if err != nil {
			return err
		}
		to, err := dispatch.Transition(ride.Status, action, actor)
		if err != nil {
			return err
		}
		if action == dispatch.ActionDecline {
			return s.decline(ctx, tx, ride, actorID, fx)
		}
		if actor == dispatch.ActorRider && ride.RiderID != actorID {
			return &dispatch.Error{Code: dispatch.CodePermissionDenied, Field: "rider_id", Message: "rider_id: is not this ride's rider"}
		}
		if actor == dispatch.ActorDriver && ride.DriverID != actorID {
			return &dispatch.Error{Code: dispatch.CodePermissionDenied, Field: "driver_id", Message: "driver_id: is not this ride's driver"}
		}
		change := pgstore.StatusChange{From: ride.Status, To: to, DriverID: ride.DriverID, CancelledBy: actor, CancelReason: reason}
		if to == dispatch.RideRequested {
			change.DriverID = "" // re-opened: matched again without him (a cancelled ride keeps its driver, for the record)
		}
		var withdrawn *dispatch.Offer
		if to == dispatch.RideCancelled {
			// Lock order: the ride (above), then its pending offer.
			pending, err := pgstore.PendingOffer(ctx, tx, ride.ID)
			if err != nil {
				return err
			}
			if pending != nil {
				if _, err := pgstore.SetOfferStatus(ctx, tx, pending.ID, dispatch.OfferCancelled); err != nil {
					return err
				}
				fx.ReleaseOffers = append(fx.ReleaseOffers, dispatch.OfferRelease{DriverID: pending.DriverID, OfferID: pending.ID, Requeue: true})
				withdrawn = pending
			}
			fx.ClearRetryTimers = append(fx.ClearRetryTimers, ride.ID)
		}
		at, version, err := pgstore.SetRideStatus(ctx, tx, ride.ID, change)
		if err != nil {
			return err
		}
		if w, ok := waitError(ride, to, at, s.d.Rules.SimSpeedup); ok {
			fx.WaitErrors = append(fx.WaitErrors, w)
		}
		if to == dispatch.RideInProgress && ride.AcceptedAt != nil && ride.DriverID != "" {
			// The drive pace of the wait estimate learns from every pickup: accept → start
			// against the driver's distance when offered (lock order: the ride, then its offer).
			offer, _, err := pgstore.LatestOfferForUpdate(ctx, tx, ride.ID, ride.DriverID)
			if err != nil {
				return err
			}
			if d, ok := driveSample(ride, offer, at, s.d.Rules.SimSpeedup); ok {
				fx.DriveSamples = append(fx.DriveSamples, d)
			}
		}
		if ride.DriverID != "" {
			var a dispatch.Assignment
			switch to {
			case dispatch.RideInProgress:
				a, err = assign(ctx, tx, ride.DriverID, ride, to, version)
			case dispatch.RideCompleted:
				a, err = free(ctx, tx, ride.DriverID, ride, version, &ride.Dropoff)
			default: // re-opened or cancelled
				a, err = free(ctx, tx, ride.DriverID, ride, version, nil)
			}
			if err != nil {
				return err
			}
			fx.Assignments = append(fx.Assignments, a)
		}
		data := events.RideTransitionData{
			RideID: ride.ID, RiderID: ride.RiderID, DriverID: ride.DriverID, From: string(ride.Status), To: string(to),
			By: string(actor), Reason: reason, At: at.UTC(), Version: version,
		}
		if withdrawn != nil {
			data.WithdrawnOfferID, data.WithdrawnOfferDriverID = withdrawn.ID, withdrawn.DriverID
		}
		_, err = pgstore.InsertOutbox(ctx, tx, pgstore.OutboxEvent{Type: rideEvent[to], Source: s.Source, Subject: ride.ID, Data: data})
		return err
	})
	if err == nil && action == dispatch.ActionDecline {
		metrics.OfferResponses.WithLabelValues("declined").Inc()
	}
	return err
}

// decline records the offered driver's decline and asks for a new match without him.
func (s *Service) decline(ctx context.Context, tx pgx.Tx, ride *dispatch.Ride, driverID string, fx *dispatch.Effects) error {
	offer, now, err := pgstore.LatestOfferForUpdate(ctx, tx, ride.ID, driverID)
	if err != nil {
		return err
	}
	if err := dispatch.CheckOfferAnswer(offer, driverID, now); err != nil {
		return err
	}
	if _, err := pgstore.SetOfferStatus(ctx, tx, offer.ID, dispatch.OfferDeclined); err != nil {
		return err
	}
	fx.ReleaseOffers = append(fx.ReleaseOffers, dispatch.OfferRelease{DriverID: driverID, OfferID: offer.ID, Requeue: true})
	_, err = pgstore.InsertOutbox(ctx, tx, pgstore.OutboxEvent{
		Type: events.RideOfferDeclined, Source: s.Source, Subject: ride.ID,
		Data: events.RideOfferDeclinedData{RideID: ride.ID, OfferID: offer.ID, DriverID: driverID},
	})
	return err
}

// waitError is the residual of the wait quoted to ride when it moves to status to at at
// (PostgreSQL's clock): when it starts (the driver picked the rider up) having been quoted a wait
// and matched in one round (never re-opened: the quote was for its first round), the time from its
// request to the start in the riders' seconds (dispatch.RiderSeconds with simSpeedup, the seconds
// the quote is in) less the quoted wait without its calibration part. It feeds the wait
// calibration (dispatch.FoldWaitResidual). The calibration part is recorded as applied
// (dispatch.Calibrate), so a quote the calibration took to 0 s teaches it too. A quote without a
// recorded calibration part (made before it was recorded) gives none.
func waitError(ride *dispatch.Ride, to dispatch.RideStatus, at time.Time, simSpeedup float64) (dispatch.WaitError, bool) {
	if to != dispatch.RideInProgress || ride.QuotedWaitS == nil || ride.QuotedWaitCalS == nil || ride.CreatedAt.IsZero() || !ride.MatchStartedAt.Equal(ride.CreatedAt) {
		return dispatch.WaitError{}, false
	}
	base := *ride.QuotedWaitS - *ride.QuotedWaitCalS
	return dispatch.WaitError{Pickup: ride.Pickup, RequestedAt: ride.CreatedAt, ResidualS: dispatch.RiderSeconds(at.Sub(ride.CreatedAt), simSpeedup) - base}, true
}

// driveSample is the drive of ride's driver to the pickup when the ride starts at at (PostgreSQL's
// clock): accept → start in the riders' seconds (dispatch.RiderSeconds with simSpeedup) against
// the straight-line distance of the accepted offer. It feeds the drive pace of the wait estimate
// (dispatch.FoldDrivePace); false without an accept or an accepted offer of the ride's driver.
func driveSample(ride *dispatch.Ride, offer *dispatch.Offer, at time.Time, simSpeedup float64) (dispatch.DriveSample, bool) {
	if ride.AcceptedAt == nil || offer == nil || offer.Status != dispatch.OfferAccepted || offer.DriverID != ride.DriverID || at.Before(*ride.AcceptedAt) {
		return dispatch.DriveSample{}, false
	}
	return dispatch.DriveSample{DriveS: dispatch.RiderSeconds(at.Sub(*ride.AcceptedAt), simSpeedup), DistM: offer.DistanceM}, true
}
