// Package function is the ride function: a ride's status for the rider, and the actions that move
// it through its lifecycle.
//
//	GET  /function/ride/{id}                      the ride, its driver and his live position, the fare
//	POST /function/ride/{id}/decline  {driver_id} the offered driver declines; matching runs again without him;
//	                                              the answer is only {ride_id, status: DECLINED}
//	POST /function/ride/{id}/start    {driver_id} ACCEPTED → IN_PROGRESS
//	POST /function/ride/{id}/complete {driver_id} IN_PROGRESS → COMPLETED; the driver is available at the dropoff
//	POST /function/ride/{id}/cancel   {by, rider_id | driver_id, reason}
//
// Callers need a token (auth.Require; roles driver, rider, ops) and act only as its subject: ids in
// the body may be left out and, when sent, must be the token's sub (else 403). GET answers the
// ride's rider, the driver the ride names (driver_id: from accept on, kept after COMPLETED or a
// rider's cancel, cleared when the ride is re-opened), and ops; anyone else gets 404 not_found, as
// for a ride that does not exist. decline, start and complete are a driver's; cancel is the rider's
// (by "rider") or the driver's (by "driver"; by defaults to the caller's role); ops only read. An
// action that fails for a caller who is not a party of the ride (its rider, its driver, a driver it
// was offered to) answers 404 too, so nobody learns another ride's status.
//
// Every action is a state change of lifecycle.Service.Act (transition check with
// dispatch.Transition, conditional UPDATE, outbox row, then Redis); an action the current status
// forbids answers 409 illegal_transition naming the current status. The driver's live position is
// shown only while the ride is ACCEPTED or IN_PROGRESS, and only if it is the position of the
// ride's driver.
//
// Everything but the live position and the wait estimate comes from PostgreSQL, so a ride answers
// while Redis does not: those two are read within FLAGDOWN_REDIS_TIMEOUT and left out when Redis
// does not answer in time (counted in flagdown_redis_degraded_total{check="ride_view"}), and the
// Redis effects of an action are left to reconcile (docs/resilience.md).
package function

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/host"
	"github.com/flagdown/flagdown/shared/httpx"
	"github.com/flagdown/flagdown/shared/lifecycle"
	"github.com/flagdown/flagdown/shared/pgstore"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// Source is the CloudEvent source of events this function emits.
const Source = "/flagdown/ride"

// Function serves ride reads and actions.
type Function struct {
	d  *host.Deps
	lc *lifecycle.Service
	h  http.Handler
	// noLive follows the views shown without their Redis part.
	noLive *redisstore.Degradation
}

// New returns the function over d; it requires a driver, rider or ops token.
func New(d *host.Deps) *Function {
	f := &Function{d: d, lc: d.Lifecycle(Source), noLive: redisstore.NewDegradation("ride_view", d.Log)}
	f.h = auth.Require(d.Auth, d.Log, http.HandlerFunc(f.serve), auth.RoleDriver, auth.RoleRider, auth.RoleOps)
	return f
}

var lazy = host.NewLazy(func(d *host.Deps) http.Handler { return New(d) })

// Handle is the OpenFaaS golang-middleware entry point. The gateway passes the path after
// /function/ride, i.e. /{id} or /{id}/{action}.
func Handle(w http.ResponseWriter, r *http.Request) { lazy.ServeHTTP(w, r) }

// ActionRequest is the body of a POST action (every field optional: the token says who acts).
// decline, start and complete take driver_id; cancel takes by ("rider" or "driver", default the
// caller's role, which it must match), the matching rider_id or driver_id and an optional reason.
// An id sent must be the token's sub.
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
	// SurgeMultiplier is the surge multiplier in FareEstimateCents (1.0 without surge).
	SurgeMultiplier float64 `json:"surge_multiplier"`
	// QuotedWaitS is the pickup wait the rider was quoted at the request, seconds; left out when
	// none was (no driver near).
	QuotedWaitS *float64 `json:"quoted_wait_s,omitempty"`
	// EstWaitS is, while the ride is REQUESTED, the pickup wait predicted now (pricing.Service.Wait:
	// the recent match delay less the time already waited, plus the nearest available driver's
	// drive, in the rider view: from his cell's centre, in steps of dispatch.RiderWaitStepS), seconds;
	// left out otherwise or when no driver is near.
	EstWaitS *float64 `json:"est_wait_s,omitempty"`
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

// Declined is the answer to a decline: the ride id and the driver's offer's new status, nothing of
// the ride itself (its rider, pickup, dropoff or fare), since the driver will not drive it.
type Declined struct {
	RideID string               `json:"ride_id"`
	Status dispatch.OfferStatus `json:"status"`
}

// ServeHTTP routes GET /{id} and POST /{id}/{action}, behind auth.Require.
func (f *Function) ServeHTTP(w http.ResponseWriter, r *http.Request) { f.h.ServeHTTP(w, r) }

func (f *Function) serve(w http.ResponseWriter, r *http.Request) {
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
	who, err := auth.Must(r)
	if err != nil {
		return err
	}
	if err := dispatch.ValidateRideID("ride_id", id); err != nil {
		return err
	}
	v, err := f.view(r.Context(), id, func(ride *dispatch.Ride) bool { return mayRead(who, ride) })
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, v)
	return nil
}

// mayRead reports whether who may read ride: ops, its rider, or the driver it names.
func mayRead(who auth.Identity, ride *dispatch.Ride) bool {
	switch who.Role {
	case auth.RoleOps:
		return true
	case auth.RoleRider:
		return ride.RiderID == who.Subject
	case auth.RoleDriver:
		return ride.DriverID != "" && ride.DriverID == who.Subject
	}
	return false
}

// view reads ride id as the API shows it; a ride allow refuses is not found, like a missing one.
func (f *Function) view(ctx context.Context, id string, allow func(*dispatch.Ride) bool) (*View, error) {
	ride, err := pgstore.GetRide(ctx, f.d.DB.Pool, id, false)
	if err != nil {
		return nil, err
	}
	if !allow(ride) {
		return nil, dispatch.NotFound("ride", id)
	}
	v := &View{
		RideID: ride.ID, RiderID: ride.RiderID, Status: ride.Status, DriverID: ride.DriverID,
		Pickup: ride.Pickup, Dropoff: ride.Dropoff, FareEstimateCents: ride.FareEstimateCents,
		EstDistanceM: ride.EstDistanceM, EstDurationS: ride.EstDurationS,
		SurgeMultiplier: dispatch.RoundMultiplier(ride.SurgeMultiplier), QuotedWaitS: ride.QuotedWaitS,
		MatchAttempts: ride.MatchAttempts, MatchNote: ride.MatchNote, CreatedAt: ride.CreatedAt, FirstMatchAt: ride.FirstMatchAt,
		FirstOfferedAt: ride.FirstOfferedAt, AcceptedAt: ride.AcceptedAt, StartedAt: ride.StartedAt,
		CompletedAt: ride.CompletedAt, CancelledAt: ride.CancelledAt,
	}
	if err := f.live(ctx, ride, v); err != nil {
		if dispatch.ErrorCode(err) != dispatch.CodeUnavailable {
			return nil, err
		}
		f.noLive.Degraded(err, "rides shown without live position and wait estimate")
	}
	return v, nil
}

// live adds to v what Redis holds of ride (the driver's live position while the ride is ACCEPTED or
// IN_PROGRESS, the wait estimate while it is REQUESTED), within FLAGDOWN_REDIS_TIMEOUT.
func (f *Function) live(ctx context.Context, ride *dispatch.Ride, v *View) error {
	ctx, cancel := f.d.Redis.Bounded(ctx)
	defer cancel()
	var err error
	switch {
	case ride.Status.Active():
		v.DriverPosition, err = f.d.Redis.RidePosition(ctx, ride.ID, ride.DriverID)
	case ride.Status == dispatch.RideRequested:
		var w *dispatch.WaitEstimate
		if w, err = f.d.Pricing().Wait(ctx, ride.Pickup, ride.MatchStartedAt); w != nil {
			v.EstWaitS = &w.TotalS
		}
	default:
		return nil
	}
	if err == nil {
		f.noLive.Recovered()
	}
	return err
}

func (f *Function) act(w http.ResponseWriter, r *http.Request, id string, action dispatch.Action) error {
	who, err := auth.Must(r)
	if err != nil {
		return err
	}
	var req ActionRequest
	if err := httpx.DecodeJSON(w, r, f.d.Config.MaxBodyBytes, &req); err != nil {
		return err
	}
	actor, actorID, err := validate(action, &req, who)
	if err != nil {
		return err
	}
	if err := dispatch.ValidateRideID("ride_id", id); err != nil {
		return err
	}
	ctx := f.d.Redis.Budget(r.Context()) // the action's effects and the view's live part share one Redis timeout
	if err := f.lc.Act(ctx, id, action, actor, actorID, req.Reason); err != nil {
		if party, perr := f.party(ctx, id, who); perr == nil && !party {
			return dispatch.NotFound("ride", id)
		}
		return err
	}
	if action == dispatch.ActionDecline {
		// He will not drive it: he learns nothing more of the ride than his offer told him.
		httpx.WriteJSON(w, http.StatusOK, Declined{RideID: id, Status: dispatch.OfferDeclined})
		return nil
	}
	// The actor was allowed to act (lifecycle checked him), so he sees the result even when it no
	// longer names him (a driver's cancel re-opens the ride without him).
	v, err := f.view(ctx, id, func(*dispatch.Ride) bool { return true })
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, v)
	return nil
}

// party reports whether who has a part in ride id (its rider, its driver, a driver it was offered
// to): only a party may learn why an action on it failed. A missing ride is no one's.
func (f *Function) party(ctx context.Context, id string, who auth.Identity) (bool, error) {
	ride, err := pgstore.GetRide(ctx, f.d.DB.Pool, id, false)
	if dispatch.ErrorCode(err) == dispatch.CodeNotFound {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	switch who.Role {
	case auth.RoleRider:
		return ride.RiderID == who.Subject, nil
	case auth.RoleDriver:
		if ride.DriverID == who.Subject {
			return true, nil
		}
		return pgstore.WasOffered(ctx, f.d.DB.Pool, id, who.Subject)
	}
	return false, nil
}

// validate checks an action's body against the caller and returns who acts: the caller himself,
// in the role the action needs (a driver for decline, start, complete; the rider or the driver, as
// by says, for cancel). A wrong role or an id other than the caller's is 403.
func validate(action dispatch.Action, req *ActionRequest, who auth.Identity) (dispatch.Actor, string, error) {
	switch action {
	case dispatch.ActionDecline, dispatch.ActionStart, dispatch.ActionComplete:
		if req.RiderID != "" || req.By != "" || req.Reason != "" {
			return "", "", dispatch.Invalid("body", "must hold only driver_id for "+string(action))
		}
		if who.Role != auth.RoleDriver {
			return "", "", dispatch.PermissionDenied("role", "must be driver to "+string(action))
		}
		id, err := auth.Self(who, "driver_id", req.DriverID)
		return dispatch.ActorDriver, id, err
	case dispatch.ActionCancel:
		if err := dispatch.ValidateText("reason", req.Reason, MaxReasonBytes); err != nil {
			return "", "", err
		}
		by := req.By
		if by == "" {
			by = string(who.Role)
		}
		switch by {
		case "rider":
			if req.DriverID != "" {
				return "", "", dispatch.Invalid("driver_id", "must be empty when by is rider")
			}
			if who.Role != auth.RoleRider {
				return "", "", dispatch.PermissionDenied("by", "must be the caller's role (a rider cancels by rider)")
			}
			id, err := auth.Self(who, "rider_id", req.RiderID)
			return dispatch.ActorRider, id, err
		case "driver":
			if req.RiderID != "" {
				return "", "", dispatch.Invalid("rider_id", "must be empty when by is driver")
			}
			if who.Role != auth.RoleDriver {
				return "", "", dispatch.PermissionDenied("by", "must be the caller's role (a driver cancels by driver)")
			}
			id, err := auth.Self(who, "driver_id", req.DriverID)
			return dispatch.ActorDriver, id, err
		}
		if req.By == "" {
			return "", "", dispatch.PermissionDenied("role", "must be rider or driver to cancel")
		}
		return "", "", dispatch.Invalid("by", "must be rider or driver")
	}
	return "", "", dispatch.Invalid("action", "must be one of decline, start, complete, cancel")
}
