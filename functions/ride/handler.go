// Package function is the ride function: a ride's status for the rider, and the actions that move
// it through its lifecycle.
//
//	GET  /function/ride/{id}                      the ride, its driver and his live position, the fare
//	POST /function/ride/{id}/decline  {driver_id} the offered driver declines; matching runs again without him
//	POST /function/ride/{id}/start    {driver_id} ACCEPTED → IN_PROGRESS
//	POST /function/ride/{id}/complete {driver_id} IN_PROGRESS → COMPLETED; the driver is available at the dropoff
//	POST /function/ride/{id}/cancel   {by, rider_id | driver_id, reason}
//
// Transitions follow dispatch.Transition; an action the current status forbids answers 409
// illegal_transition naming the current status. Each change writes its outbox event in the same
// transaction as the status update.
package function

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/shared/app"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/httpx"
	"github.com/flagdown/flagdown/shared/pgstore"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// Source is the CloudEvent source of events this function emits.
const Source = "/flagdown/ride"

// Function serves ride reads and actions.
type Function struct{ d *app.Deps }

// New returns the function over d.
func New(d *app.Deps) *Function { return &Function{d: d} }

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
	// Reason is a free-text cancel reason, at most 500 bytes.
	Reason string `json:"reason,omitempty"`
}

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
		if v.DriverPosition, err = f.d.Redis.RidePosition(ctx, ride.ID); err != nil {
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
	if err := f.Act(r.Context(), id, action, actor, actorID, req.Reason); err != nil {
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
		if len(req.Reason) > 500 {
			return "", "", dispatch.Invalid("reason", "must be at most 500 bytes")
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

// effect is what must happen in Redis after a ride change committed.
type effect struct {
	releaseOffer *dispatch.Offer // free this offer's lock and requeue the driver
	freeDriver   string          // make this driver available again
	freeAt       *dispatch.Point // ... at this position (nil keeps his own)
	onRide       string          // mark this driver busy
}

// Act performs action on ride id as actor (actorID is his rider or driver id). Errors: not_found,
// permission_denied (not this ride's rider or driver), conflict (illegal_transition with
// details.current_status, not_your_offer), unavailable.
func (f *Function) Act(ctx context.Context, id string, action dispatch.Action, actor dispatch.Actor, actorID, reason string) error {
	var fx effect
	err := f.d.DB.Tx(ctx, func(tx pgx.Tx) error {
		fx = effect{}
		ride, err := pgstore.GetRide(ctx, tx, id, true)
		if err != nil {
			return err
		}
		to, err := dispatch.Transition(ride.Status, action, actor)
		if err != nil {
			return err
		}
		if action == dispatch.ActionDecline {
			return f.decline(ctx, tx, ride, actorID, &fx)
		}
		if actor == dispatch.ActorRider && ride.RiderID != actorID {
			return &dispatch.Error{Code: dispatch.CodePermissionDenied, Field: "rider_id", Message: "rider_id: is not this ride's rider"}
		}
		if actor == dispatch.ActorDriver && ride.DriverID != actorID {
			return &dispatch.Error{Code: dispatch.CodePermissionDenied, Field: "driver_id", Message: "driver_id: is not this ride's driver"}
		}
		change := pgstore.StatusChange{From: ride.Status, To: to, DriverID: ride.DriverID, CancelledBy: actor, CancelReason: reason}
		evType := map[dispatch.RideStatus]string{
			dispatch.RideInProgress: events.RideStarted, dispatch.RideCompleted: events.RideCompleted,
			dispatch.RideCancelled: events.RideCancelled, dispatch.RideRequested: events.RideReopened,
		}[to]
		switch to {
		case dispatch.RideInProgress:
			fx.onRide = ride.DriverID
		case dispatch.RideCompleted:
			fx.freeDriver, fx.freeAt = ride.DriverID, &ride.Dropoff
		case dispatch.RideRequested: // the driver gave an accepted ride back
			change.DriverID = ""
			fx.freeDriver = ride.DriverID
		case dispatch.RideCancelled:
			fx.freeDriver = ride.DriverID
			pending, err := pgstore.PendingOffer(ctx, tx, ride.ID)
			if err != nil {
				return err
			}
			if pending != nil {
				if _, err := pgstore.SetOfferStatus(ctx, tx, pending.ID, dispatch.OfferCancelled); err != nil {
					return err
				}
				fx.releaseOffer = pending
			}
		}
		at, err := pgstore.SetRideStatus(ctx, tx, ride.ID, change)
		if err != nil {
			return err
		}
		_, err = pgstore.InsertOutbox(ctx, tx, pgstore.OutboxEvent{
			Type: evType, Source: Source, Subject: ride.ID,
			Data: events.RideTransitionData{
				RideID: ride.ID, RiderID: ride.RiderID, DriverID: ride.DriverID, From: string(ride.Status), To: string(to),
				By: string(actor), Reason: reason, At: at.UTC(),
			},
		})
		return err
	})
	if err != nil {
		return err
	}
	return f.apply(context.WithoutCancel(ctx), id, fx)
}

// decline records the offered driver's decline and asks for a new match without him.
func (f *Function) decline(ctx context.Context, tx pgx.Tx, ride *dispatch.Ride, driverID string, fx *effect) error {
	pending, err := pgstore.PendingOffer(ctx, tx, ride.ID)
	if err != nil {
		return err
	}
	if pending != nil && pending.DriverID == driverID && !pending.ExpiresAt.After(time.Now()) {
		return dispatch.Conflict(dispatch.ReasonOfferExpired, "the offer window has closed")
	}
	if pending == nil || pending.DriverID != driverID {
		if mine, err := pgstore.LatestOffer(ctx, tx, ride.ID, driverID); err != nil {
			return err
		} else if mine != nil && mine.Status == dispatch.OfferExpired {
			return dispatch.Conflict(dispatch.ReasonOfferExpired, "the offer window has closed")
		}
		return dispatch.Conflict(dispatch.ReasonNotYourOffer, "the driver holds no pending offer for this ride")
	}
	if _, err := pgstore.SetOfferStatus(ctx, tx, pending.ID, dispatch.OfferDeclined); err != nil {
		return err
	}
	fx.releaseOffer = pending
	_, err = pgstore.InsertOutbox(ctx, tx, pgstore.OutboxEvent{
		Type: events.RideOfferDeclined, Source: Source, Subject: ride.ID,
		Data: events.RideOfferDeclinedData{RideID: ride.ID, OfferID: pending.ID, DriverID: driverID},
	})
	return err
}

// apply makes Redis follow a committed change. Failures are logged: PostgreSQL already holds the
// truth, and the driver's next ping or the reconcile function repairs Redis.
func (f *Function) apply(ctx context.Context, rideID string, fx effect) error {
	if o := fx.releaseOffer; o != nil {
		value, err := f.d.Redis.OfferLock(ctx, o.DriverID)
		if err == nil && value != "" {
			var lock struct {
				OfferID string `json:"offer_id"`
			}
			if json.Unmarshal([]byte(value), &lock) == nil && lock.OfferID == o.ID {
				_, err = f.d.Redis.ReleaseOffer(ctx, o.DriverID, value, true)
			}
		}
		if err != nil {
			f.d.Log.Error("release offer lock", "ride_id", rideID, "driver_id", o.DriverID, "err", err)
		}
	}
	if fx.onRide != "" {
		if err := f.d.Redis.SetOnRide(ctx, fx.onRide); err != nil {
			f.d.Log.Error("mark driver on ride", "ride_id", rideID, "driver_id", fx.onRide, "err", err)
		}
	}
	if fx.freeDriver != "" {
		if err := f.d.Redis.FreeDriver(ctx, fx.freeDriver, rideID, fx.freeAt); err != nil {
			f.d.Log.Error("free driver", "ride_id", rideID, "driver_id", fx.freeDriver, "err", err)
		}
	}
	return nil
}
