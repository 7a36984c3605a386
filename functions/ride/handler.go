// Package function is the ride function: a ride's status for the rider, and the actions that move
// it through its lifecycle.
//
//	GET  /function/ride/{id}                      the ride, its driver and his live position, the fare
//	POST /function/ride/{id}/decline  {driver_id} the offered driver declines; matching runs again without him
//	POST /function/ride/{id}/start    {driver_id} ACCEPTED → IN_PROGRESS
//	POST /function/ride/{id}/complete {driver_id} IN_PROGRESS → COMPLETED; the driver is available at the dropoff
//	POST /function/ride/{id}/cancel   {by, rider_id | driver_id, reason}
//
// Every action is a state change of lifecycle.Service.Act (transition check with
// dispatch.Transition, conditional UPDATE, outbox row, then Redis); an action the current status
// forbids answers 409 illegal_transition naming the current status. The driver's live position is
// shown only while the ride is ACCEPTED or IN_PROGRESS, and only if it is the position of the
// ride's driver.
package function

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/flagdown/flagdown/shared/app"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/httpx"
	"github.com/flagdown/flagdown/shared/lifecycle"
	"github.com/flagdown/flagdown/shared/pgstore"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// Source is the CloudEvent source of events this function emits.
const Source = "/flagdown/ride"

// Function serves ride reads and actions.
type Function struct {
	d  *app.Deps
	lc *lifecycle.Service
}

// New returns the function over d.
func New(d *app.Deps) *Function { return &Function{d: d, lc: lifecycle.New(d, Source)} }

var lazy = app.NewLazy(func(d *app.Deps) http.Handler { return New(d) })

// Handle is the OpenFaaS golang-middleware entry point. The gateway passes the path after
// /function/ride, i.e. /{id} or /{id}/{action}.
func Handle(w http.ResponseWriter, r *http.Request) { lazy.ServeHTTP(w, r) }

// ActionRequest is the body of a POST action. decline, start and complete need driver_id; cancel
// needs by ("rider" or "driver") and the matching rider_id or driver_id, and takes an optional reason.
type ActionRequest struct {
	DriverID string `json:"driver_id,omitempty"`
	RiderID  string `json:"rider_id,omitempty"`
	By       string `json:"by,omitempty"`
	// Reason is a free-text cancel reason: valid UTF-8 without control characters, at most
	// MaxReasonBytes.
	Reason string `json:"reason,omitempty"`
}

// MaxReasonBytes is the longest cancel reason accepted, in bytes.
const MaxReasonBytes = 500

// View is a ride as the API shows it.
type View struct {
	RideID            string              `json:"ride_id"`
	RiderID           string              `json:"rider_id"`
	Status            dispatch.RideStatus `json:"status"`
	DriverID          string              `json:"driver_id,omitempty"`
	Pickup            dispatch.Point      `json:"pickup"`
	Dropoff           dispatch.Point      `json:"dropoff"`
	FareEstimateCents int64               `json:"fare_estimate_cents"`
	// EstDistanceM is the estimated road distance in metres; EstDurationS the driving time in seconds.
	EstDistanceM float64 `json:"est_distance_m"`
	EstDurationS float64 `json:"est_duration_s"`
	// DriverPosition is the driver's live position while the ride is ACCEPTED or IN_PROGRESS.
	DriverPosition *redisstore.RidePosition `json:"driver_position,omitempty"`
	MatchAttempts  int                      `json:"match_attempts"`
	MatchNote      string                   `json:"match_note,omitempty"`
	CreatedAt      time.Time                `json:"created_at"`
	FirstMatchAt   *time.Time               `json:"first_match_at"`
	FirstOfferedAt *time.Time               `json:"first_offered_at"`
	AcceptedAt     *time.Time               `json:"accepted_at"`
	StartedAt      *time.Time               `json:"started_at"`
	CompletedAt    *time.Time               `json:"completed_at"`
	CancelledAt    *time.Time               `json:"cancelled_at"`
}

// ServeHTTP routes GET /{id} and POST /{id}/{action}.
func (f *Function) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	var err error
	switch {
	case len(parts) == 1 && parts[0] != "" && r.Method == http.MethodGet:
		err = f.get(w, r, parts[0])
	case len(parts) == 2 && r.Method == http.MethodPost:
		err = f.act(w, r, parts[0], dispatch.Action(parts[1]))
	case len(parts) == 1 && parts[0] != "":
		httpx.MethodNotAllowed(w, http.MethodGet)
		return
	case len(parts) == 2:
		httpx.MethodNotAllowed(w, http.MethodPost)
		return
	default:
		err = dispatch.Invalid("path", "must be /{ride_id} or /{ride_id}/{decline|start|complete|cancel}")
	}
	if err != nil {
		httpx.WriteError(w, r, f.d.Log, err)
	}
}

func (f *Function) get(w http.ResponseWriter, r *http.Request, id string) error {
	if err := dispatch.ValidateRideID("ride_id", id); err != nil {
		return err
	}
	v, err := f.view(r.Context(), id)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, v)
	return nil
}

func (f *Function) view(ctx context.Context, id string) (*View, error) {
	ride, err := pgstore.GetRide(ctx, f.d.DB.Pool, id, false)
	if err != nil {
		return nil, err
	}
	v := &View{
		RideID: ride.ID, RiderID: ride.RiderID, Status: ride.Status, DriverID: ride.DriverID,
		Pickup: ride.Pickup, Dropoff: ride.Dropoff, FareEstimateCents: ride.FareEstimateCents,
		EstDistanceM: ride.EstDistanceM, EstDurationS: ride.EstDurationS,
		MatchAttempts: ride.MatchAttempts, MatchNote: ride.MatchNote, CreatedAt: ride.CreatedAt, FirstMatchAt: ride.FirstMatchAt,
		FirstOfferedAt: ride.FirstOfferedAt, AcceptedAt: ride.AcceptedAt, StartedAt: ride.StartedAt,
		CompletedAt: ride.CompletedAt, CancelledAt: ride.CancelledAt,
	}
	if ride.Status.Active() {
		if v.DriverPosition, err = f.d.Redis.RidePosition(ctx, ride.ID, ride.DriverID); err != nil {
			return nil, err
		}
	}
	return v, nil
}

func (f *Function) act(w http.ResponseWriter, r *http.Request, id string, action dispatch.Action) error {
	var req ActionRequest
	if err := httpx.DecodeJSON(w, r, f.d.Config.MaxBodyBytes, &req); err != nil {
		return err
	}
	actor, actorID, err := validate(action, &req)
	if err != nil {
		return err
	}
	if err := dispatch.ValidateRideID("ride_id", id); err != nil {
		return err
	}
	if err := f.lc.Act(r.Context(), id, action, actor, actorID, req.Reason); err != nil {
		return err
	}
	return f.get(w, r, id)
}

// validate checks an action's body and returns who acts.
func validate(action dispatch.Action, req *ActionRequest) (dispatch.Actor, string, error) {
	switch action {
	case dispatch.ActionDecline, dispatch.ActionStart, dispatch.ActionComplete:
		if req.RiderID != "" || req.By != "" || req.Reason != "" {
			return "", "", dispatch.Invalid("body", "must hold only driver_id for "+string(action))
		}
		return dispatch.ActorDriver, req.DriverID, dispatch.ValidateID("driver_id", req.DriverID)
	case dispatch.ActionCancel:
		if err := dispatch.ValidateText("reason", req.Reason, MaxReasonBytes); err != nil {
			return "", "", err
		}
		switch req.By {
		case "rider":
			if req.DriverID != "" {
				return "", "", dispatch.Invalid("driver_id", "must be empty when by is rider")
			}
			return dispatch.ActorRider, req.RiderID, dispatch.ValidateID("rider_id", req.RiderID)
		case "driver":
			if req.RiderID != "" {
				return "", "", dispatch.Invalid("rider_id", "must be empty when by is driver")
			}
			return dispatch.ActorDriver, req.DriverID, dispatch.ValidateID("driver_id", req.DriverID)
		}
		return "", "", dispatch.Invalid("by", "must be rider or driver")
	}
	return "", "", dispatch.Invalid("action", "must be one of decline, start, complete, cancel")
}
