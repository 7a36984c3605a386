package lifecycle

import (
	"context"

	"github.com/google/uuid"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/pgstore"
)

// MaxIdempotencyKeyLen is the longest Idempotency-Key of a ride request, in bytes. The key is free
// text (dispatch.ValidateText: valid UTF-8 without NUL or other control characters, so a UUID, a
// base64 string or any client token fits); it is stored in PostgreSQL only, never in a Redis key.
const MaxIdempotencyKeyLen = 128

// RideRequest is a rider's request for a ride.
type RideRequest struct {
	// RiderID is the requesting rider (dispatch.ValidateID).
	RiderID string
	// Pickup and Dropoff must lie in Rules.ServiceArea (dispatch.ValidateRidePoint).
	Pickup, Dropoff dispatch.Point
	// IdempotencyKey is optional: a second request of the rider with the same key returns the ride
	// the first created (CreateRide).
	IdempotencyKey string
}

// NewRide validates req by the rules and returns the ride it asks for: REQUESTED, under a fresh id,
// with no fare yet (the caller prices it before CreateRide). Nothing is written. Errors: invalid
// (rider_id, Idempotency-Key, pickup, dropoff).
func (s *Service) NewRide(req RideRequest) (*dispatch.Ride, error) {
	if err := dispatch.ValidateID("rider_id", req.RiderID); err != nil {
		return nil, err
	}
	if err := dispatch.ValidateText("Idempotency-Key", req.IdempotencyKey, MaxIdempotencyKeyLen); err != nil {
		return nil, err
	}
	if err := dispatch.ValidateRidePoint("pickup", req.Pickup, s.d.Rules.ServiceArea); err != nil {
		return nil, err
	}
	if err := dispatch.ValidateRidePoint("dropoff", req.Dropoff, s.d.Rules.ServiceArea); err != nil {
		return nil, err
	}
	return &dispatch.Ride{
		ID: uuid.NewString(), RiderID: req.RiderID, Status: dispatch.RideRequested, Pickup: req.Pickup, Dropoff: req.Dropoff,
	}, nil
}

// CreateRide inserts ride (from NewRide, priced) with its ride.requested outbox row, which the relay
// publishes to trigger matching, or returns the ride an earlier request of the rider with the same
// key created (created = false; key may be empty: no replay). Errors: conflict (rider_has_open_ride
// with details.ride_id and details.current_status of the open ride; idempotency_key_reused with
// details.ride_id when key named a different request), unavailable.
func (s *Service) CreateRide(ctx context.Context, ride *dispatch.Ride, key string) (_ *dispatch.Ride, created bool, _ error) {
	if key != "" {
		if prior, err := s.replayRide(ctx, ride, key); prior != nil || err != nil {
			return prior, false, err
		}
	}
	// One round trip: the ride and its outbox row in one pipelined batch (one implicit transaction);
	// requested_at is stamped there with the ride's created_at.
	_, err := pgstore.CreateRide(ctx, s.d.DB, ride, key, pgstore.OutboxEvent{
		Type: events.RideRequested, Source: s.Source, Subject: ride.ID,
		Data: events.RideRequestedData{
			RideID: ride.ID, RiderID: ride.RiderID,
			Pickup:            events.Point{Lat: ride.Pickup.Lat, Lng: ride.Pickup.Lng},
			Dropoff:           events.Point{Lat: ride.Dropoff.Lat, Lng: ride.Dropoff.Lng},
			FareEstimateCents: ride.FareEstimateCents,
		},
	})
	switch {
	case pgstore.IsUniqueViolation(err, "rides_idempotency"):
		// A concurrent request with the same key won the insert.
		prior, err := s.replayRide(ctx, ride, key)
		return prior, false, err
	case dispatch.AsError(err).Reason == dispatch.ReasonRiderHasOpenRide:
		if key != "" {
			// A concurrent request with the same key may have won on the per-rider index first.
			if prior, err := s.replayRide(ctx, ride, key); prior != nil || err != nil {
				return prior, false, err
			}
		}
		e := dispatch.AsError(err)
		if open, _ := pgstore.OpenRideOf(ctx, s.d.DB.Pool, ride.RiderID); open != nil {
			e = e.With("ride_id", open.ID).With("current_status", string(open.Status))
		}
		return nil, false, e
	case err != nil:
		return nil, false, err
	}
	return ride, true, nil
}

// replayRide returns the ride created earlier with key, checking that the request is the same.
func (s *Service) replayRide(ctx context.Context, ride *dispatch.Ride, key string) (*dispatch.Ride, error) {
	prior, err := pgstore.RideByIdempotencyKey(ctx, s.d.DB.Pool, ride.RiderID, key)
	if err != nil || prior == nil {
		return nil, err
	}
	if prior.Pickup != ride.Pickup || prior.Dropoff != ride.Dropoff {
		return nil, dispatch.Conflict(dispatch.ReasonIdempotencyKeyReused,
			"Idempotency-Key was already used by this rider for a different ride request").With("ride_id", prior.ID)
	}
	return prior, nil
}
