// Package function is the accept function: a driver accepts the ride he was offered.
//
// POST /function/accept {"ride_id", "driver_id"}. Only the driver holding the live offer lock for
// this ride can win. In one transaction: the offer is marked ACCEPTED (still PENDING and inside its
// window by PostgreSQL's clock), the ride moves REQUESTED → ACCEPTED with a conditional UPDATE, and
// a ride.accepted outbox row is written; then the driver leaves the available set and his offer lock
// is released with compare-and-delete. The partial unique index rides_one_active_per_driver keeps
// one active ride per driver even if this code were wrong. Answers 200, or 409 with reason
// ride_taken, offer_expired, not_your_offer or driver_busy.
package function

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/jackc/pgx/v5"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/shared/app"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/httpx"
	"github.com/flagdown/flagdown/shared/pgstore"
)

// Source is the CloudEvent source of events this function emits.
const Source = "/flagdown/accept"

// Function serves accepts.
type Function struct{ d *app.Deps }

// New returns the function over d.
func New(d *app.Deps) *Function { return &Function{d: d} }

var lazy = app.NewLazy(func(d *app.Deps) http.Handler { return New(d) })

// Handle is the OpenFaaS golang-middleware entry point.
func Handle(w http.ResponseWriter, r *http.Request) { lazy.ServeHTTP(w, r) }

// Request is the body of an accept.
type Request struct {
	RideID   string `json:"ride_id"`
	DriverID string `json:"driver_id"`
}

// Response is the answer to a successful accept.
type Response struct {
	RideID   string              `json:"ride_id"`
	DriverID string              `json:"driver_id"`
	Status   dispatch.RideStatus `json:"status"`
}

// errAlreadyAccepted ends the transaction of a repeated accept by the winning driver.
var errAlreadyAccepted = errors.New("already accepted by this driver")

// offerLock is the part of the offer lock value accept needs (see match.OfferLock).
type offerLock struct {
	OfferID string `json:"offer_id"`
	RideID  string `json:"ride_id"`
}

// ServeHTTP handles POST /function/accept.
func (f *Function) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	httpx.Serve(w, r, f.d.Log, http.MethodPost, func() (int, any, error) {
		var req Request
		if err := httpx.DecodeJSON(w, r, f.d.Config.MaxBodyBytes, &req); err != nil {
			return 0, nil, err
		}
		if err := dispatch.ValidateID("ride_id", req.RideID); err != nil {
			return 0, nil, err
		}
		if err := dispatch.ValidateID("driver_id", req.DriverID); err != nil {
			return 0, nil, err
		}
		if err := f.Accept(r.Context(), req.RideID, req.DriverID); err != nil {
			return 0, nil, err
		}
		return http.StatusOK, Response{RideID: req.RideID, DriverID: req.DriverID, Status: dispatch.RideAccepted}, nil
	})
}

// Accept gives rideID to driverID if he holds its live offer. A repeated accept by the driver who
// already won answers success again (idempotent). Errors: not_found, conflict (ride_taken,
// offer_expired, not_your_offer, driver_busy), unavailable.
func (f *Function) Accept(ctx context.Context, rideID, driverID string) error {
	value, err := f.d.Redis.OfferLock(ctx, driverID)
	if err != nil {
		return err
	}
	var lock offerLock
	if value != "" {
		_ = json.Unmarshal([]byte(value), &lock)
	}
	err = f.d.DB.Tx(ctx, func(tx pgx.Tx) error {
		ride, err := pgstore.GetRide(ctx, tx, rideID, true)
		if err != nil {
			return err
		}
		if ride.Status == dispatch.RideAccepted && ride.DriverID == driverID {
			return errAlreadyAccepted
		}
		if ride.Status != dispatch.RideRequested {
			return dispatch.Conflict(dispatch.ReasonRideTaken, "the ride is "+string(ride.Status)).
				With("current_status", string(ride.Status))
		}
		if lock.RideID != rideID {
			// No live lock for this ride: tell an expired offer from no offer at all.
			o, err := pgstore.LatestOffer(ctx, tx, rideID, driverID)
			if err != nil {
				return err
			}
			if o != nil && (o.Status == dispatch.OfferPending || o.Status == dispatch.OfferExpired) {
				return dispatch.Conflict(dispatch.ReasonOfferExpired, "the offer window has closed")
			}
			return dispatch.Conflict(dispatch.ReasonNotYourOffer, "the driver holds no offer for this ride")
		}
		if err := pgstore.AcceptOffer(ctx, tx, rideID, driverID, lock.OfferID); err != nil {
			return err
		}
		at, err := pgstore.SetRideStatus(ctx, tx, rideID, pgstore.StatusChange{
			From: dispatch.RideRequested, To: dispatch.RideAccepted, DriverID: driverID,
		})
		if err != nil {
			return err
		}
		_, err = pgstore.InsertOutbox(ctx, tx, pgstore.OutboxEvent{
			Type: events.RideAccepted, Source: Source, Subject: rideID,
			Data: events.RideAcceptedData{RideID: rideID, OfferID: lock.OfferID, DriverID: driverID, RiderID: ride.RiderID, AcceptedAt: at.UTC()},
		})
		return err
	})
	if errors.Is(err, errAlreadyAccepted) {
		return nil
	}
	if err != nil {
		return err
	}
	return f.d.Redis.AssignRide(context.WithoutCancel(ctx), driverID, rideID, value)
}
