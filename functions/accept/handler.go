// Package function is the accept function: a driver accepts the ride he was offered.
//
// POST /function/accept {"ride_id", "driver_id"} with a driver token (auth.Require): the driver is
// the token's sub; driver_id may be left out and, if sent, must be his (else 403). Only the driver holding the ride's PENDING offer,
// inside its window by PostgreSQL's clock, can win; the state change itself is
// lifecycle.Service.Accept (offer ACCEPTED, ride REQUESTED → ACCEPTED with a conditional UPDATE,
// the driver's assignment epoch bumped, ride.accepted in the outbox, then Redis follows). The
// partial unique index rides_one_active_per_driver keeps one active ride per driver even if this
// code were wrong. Answers 200, or 409 with reason ride_taken, offer_expired, not_your_offer or
// driver_busy.
package function

import (
	"net/http"

	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/host"
	"github.com/flagdown/flagdown/shared/httpx"
	"github.com/flagdown/flagdown/shared/lifecycle"
)

// Source is the CloudEvent source of events this function emits.
const Source = "/flagdown/accept"

// Function serves accepts.
type Function struct {
	d  *host.Deps
	lc *lifecycle.Service
	h  http.Handler
}

// New returns the function over d; it requires a driver token.
func New(d *host.Deps) *Function {
	f := &Function{d: d, lc: d.Lifecycle(Source)}
	f.h = auth.Require(d.Auth, d.Log, http.HandlerFunc(f.serve), auth.RoleDriver)
	return f
}

var lazy = host.NewLazy(func(d *host.Deps) http.Handler { return New(d) })

// Handle is the OpenFaaS golang-middleware entry point.
func Handle(w http.ResponseWriter, r *http.Request) { lazy.ServeHTTP(w, r) }

// Request is the body of an accept. DriverID is optional (the token says who accepts); when sent
// it must be the token's sub.
type Request struct {
	RideID   string `json:"ride_id"`
	DriverID string `json:"driver_id,omitempty"`
}

// Response is the answer to a successful accept.
type Response struct {
	RideID   string              `json:"ride_id"`
	DriverID string              `json:"driver_id"`
	Status   dispatch.RideStatus `json:"status"`
}

// ServeHTTP handles POST /function/accept.
func (f *Function) ServeHTTP(w http.ResponseWriter, r *http.Request) { f.h.ServeHTTP(w, r) }

func (f *Function) serve(w http.ResponseWriter, r *http.Request) {
	httpx.Serve(w, r, f.d.Log, http.MethodPost, func() (int, any, error) {
		id, err := auth.Must(r)
		if err != nil {
			return 0, nil, err
		}
		var req Request
		if err := httpx.DecodeJSON(w, r, f.d.Config.MaxBodyBytes, &req); err != nil {
			return 0, nil, err
		}
		if err := dispatch.ValidateRideID("ride_id", req.RideID); err != nil {
			return 0, nil, err
		}
		if req.DriverID, err = auth.Self(id, "driver_id", req.DriverID); err != nil {
			return 0, nil, err
		}
		if err := f.lc.Accept(r.Context(), req.RideID, req.DriverID); err != nil {
			return 0, nil, err
		}
		return http.StatusOK, Response{RideID: req.RideID, DriverID: req.DriverID, Status: dispatch.RideAccepted}, nil
	})
}
