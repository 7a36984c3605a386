// Package function is the hail function: street-hail pairing ("shake"). A rider and a driver who
// stand together each press "hail"; two presses within FLAGDOWN_HAIL_WINDOW and
// FLAGDOWN_HAIL_RADIUS_M metres of each other (with the same short code, when either typed one)
// become a ride ACCEPTED at once with that driver, without an offer.
//
// POST /function/hail with a rider or driver token (auth.Require); the token's role is the side and
// its sub the presser (nobody hails as someone else: a rider_id or driver_id sent must be his, else
// 403). Body: {"lat", "lng", "code"?, "dropoff": {"lat", "lng"}} where lat/lng is where the phone
// is (WGS84 degrees, inside FLAGDOWN_SERVICE_AREA), code an optional short code of 4 to 8 letters or
// digits (case-insensitive), and dropoff the rider's destination: required of a rider (the fare is
// estimated from it), refused from a driver. The rules are in shared/dispatch/hail.go, the state
// change in lifecycle.Service.Hail. Answers:
//
//   - 202 {"hail": "waiting", "expires_in_s", "expires_at"}: no counterpart yet; the entry waits
//     until expires_at (Redis's clock) and then disappears by itself. The waiting side learns of a
//     pairing by push (ride.accepted, to the rider and, for a hail, the driver) or GET
//     /function/ride/{id} once it knows the id, or by pressing again (409 rider_has_open_ride /
//     driver_busy names the ride in details.ride_id).
//   - 201 {"hail": "paired", "ride_id", "status": "ACCEPTED", "rider_id", "driver_id", "pickup",
//     "dropoff", "fare_estimate_cents", "est_distance_m", "est_duration_s", "distance_m"}.
//   - 409 hail_ambiguous (two or more counterparts, none chosen; how many is not said),
//     hail_driver_unavailable (details.driver_state), rider_has_open_ride, driver_busy;
//     hail_last_ping_stale, hail_far_from_last_ping, hail_gps_jump when the press is not where the
//     presser's last fix puts him (a driver's last accepted ping, a rider's previous press; the
//     rules in shared/dispatch/hail.go).
//   - 400 naming the field; 429 past the caller's budget: a rider's press spends one ride request
//     (FLAGDOWN_RATE_RIDES_PER_MIN), a driver's one ping (FLAGDOWN_RATE_PINGS_PER_MIN), either one
//     hail press (FLAGDOWN_RATE_HAILS_PER_MIN); 429 hail_code_tries (field code) after
//     FLAGDOWN_HAIL_CODE_MAX_WRONG wrong short codes within FLAGDOWN_HAIL_CODE_LOCKOUT.
package function

import (
	"errors"
	"net/http"
	"time"

	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/host"
	"github.com/flagdown/flagdown/shared/httpx"
	"github.com/flagdown/flagdown/shared/lifecycle"
	"github.com/flagdown/flagdown/shared/metrics"
	"github.com/flagdown/flagdown/shared/ratelimit"
)

// Source is the CloudEvent source of events this function emits.
const Source = "/flagdown/hail"

// Function serves hail presses.
type Function struct {
	d  *host.Deps
	lc *lifecycle.Service
	h  http.Handler
}

// New returns the function over d; it requires a rider or driver token.
func New(d *host.Deps) *Function {
	f := &Function{d: d, lc: d.Lifecycle(Source)}
	f.h = auth.Require(d.Auth, d.Log, http.HandlerFunc(f.serve), auth.RoleRider, auth.RoleDriver)
	return f
}

var lazy = host.NewLazy(func(d *host.Deps) http.Handler { return New(d) })

// Handle is the OpenFaaS golang-middleware entry point.
func Handle(w http.ResponseWriter, r *http.Request) { lazy.ServeHTTP(w, r) }

// Request is the body of a press.
type Request struct {
	// RiderID (rider token) or DriverID (driver token) is optional; when sent it must be the
	// token's sub. The other one is refused.
	RiderID  string `json:"rider_id,omitempty"`
	DriverID string `json:"driver_id,omitempty"`
	// Lat and Lng are where the phone is, WGS84 degrees.
	Lat *float64 `json:"lat"`
	Lng *float64 `json:"lng"`
	// Code is the optional short code (1 to 8 letters or digits; case does not matter).
	Code string `json:"code,omitempty"`
	// Dropoff is the rider's destination: required of a rider, refused from a driver.
	Dropoff *httpx.PointJSON `json:"dropoff,omitempty"`
}

// Waiting is the 202 answer: the press waits for its counterpart.
type Waiting struct {
	// Hail is "waiting".
	Hail string `json:"hail"`
	// ExpiresInS is how long the entry waits, seconds; ExpiresAt when it expires (Redis's clock).
	ExpiresInS float64   `json:"expires_in_s"`
	ExpiresAt  time.Time `json:"expires_at"`
}

// Paired is the 201 answer: the ride the pairing created.
type Paired struct {
	// Hail is "paired".
	Hail     string              `json:"hail"`
	RideID   string              `json:"ride_id"`
	Status   dispatch.RideStatus `json:"status"`
	RiderID  string              `json:"rider_id"`
	DriverID string              `json:"driver_id"`
	Pickup   dispatch.Point      `json:"pickup"`
	Dropoff  dispatch.Point      `json:"dropoff"`
	// FareEstimateCents, EstDistanceM (metres) and EstDurationS (seconds) are the estimate of
	// pickup → dropoff, as for a requested ride.
	FareEstimateCents int64   `json:"fare_estimate_cents"`
	EstDistanceM      float64 `json:"est_distance_m"`
	EstDurationS      float64 `json:"est_duration_s"`
	// DistanceM is the distance between the two presses, metres.
	DistanceM float64 `json:"distance_m"`
}

// ServeHTTP handles POST /function/hail.
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
		p, err := f.validate(id, &req)
		if err != nil {
			return 0, nil, err
		}
		// A rider's valid press spends one ride request of his budget (FLAGDOWN_RATE_RIDES_PER_MIN),
		// a driver's one ping (FLAGDOWN_RATE_PINGS_PER_MIN: a press reports where he is).
		field := "rider_id"
		if p.Side == dispatch.HailDriver {
			field = "driver_id"
			wait, err := f.d.Redis.SpendPing(r.Context(), p.ID)
			if err != nil {
				return 0, nil, err
			}
			if wait > 0 {
				return 0, nil, ratelimit.Refusal(ratelimit.Pings, f.d.Redis.PingsPerMin, field, wait)
			}
		} else if err := f.d.Limiter().Allow(r.Context(), ratelimit.RideRequests, p.ID, field, 1); err != nil {
			return 0, nil, err
		}
		// And one press of his and his client IP's hail budgets (FLAGDOWN_RATE_HAILS_PER_MIN,
		// FLAGDOWN_RATE_PER_IP_PER_MIN): a press is a search for a counterpart.
		if err := f.d.Limiter().AllowCaller(r.Context(), ratelimit.Hails, p.ID, field, httpx.ClientIP(r, f.d.Config.TrustedProxyHops)); err != nil {
			return 0, nil, err
		}
		res, err := f.lc.Hail(r.Context(), p)
		observe(p.Side, res, err)
		if err != nil {
			return 0, nil, err
		}
		if res.Waiting {
			return http.StatusAccepted, Waiting{Hail: "waiting", ExpiresInS: res.ExpiresIn.Seconds(), ExpiresAt: res.ExpiresAt}, nil
		}
		ride := res.Ride
		return http.StatusCreated, Paired{Hail: "paired", RideID: ride.ID, Status: ride.Status, RiderID: ride.RiderID,
			DriverID: ride.DriverID, Pickup: ride.Pickup, Dropoff: ride.Dropoff, FareEstimateCents: ride.FareEstimateCents,
			EstDistanceM: ride.EstDistanceM, EstDurationS: ride.EstDurationS, DistanceM: res.DistanceM}, nil
	})
}

// validate turns req of caller id into a press, or a 400/403 naming the field.
func (f *Function) validate(id auth.Identity, req *Request) (dispatch.HailPress, error) {
	p := dispatch.HailPress{Side: dispatch.HailRider}
	var err error
	switch id.Role {
	case auth.RoleRider:
		if req.DriverID != "" {
			return p, dispatch.Invalid("driver_id", "must be left out: a rider's token hails as a rider")
		}
		if p.ID, err = auth.Self(id, "rider_id", req.RiderID); err != nil {
			return p, err
		}
	default: // auth.Require admits riders and drivers only
		p.Side = dispatch.HailDriver
		if req.RiderID != "" {
			return p, dispatch.Invalid("rider_id", "must be left out: a driver's token hails as a driver")
		}
		if p.ID, err = auth.Self(id, "driver_id", req.DriverID); err != nil {
			return p, err
		}
	}
	if err := dispatch.ValidateID(string(p.Side)+"_id", p.ID); err != nil {
		return p, err
	}
	area := f.d.ServiceArea()
	if req.Lat == nil {
		return p, dispatch.Invalid("lat", "is required")
	}
	if req.Lng == nil {
		return p, dispatch.Invalid("lng", "is required")
	}
	p.Position = dispatch.Point{Lat: *req.Lat, Lng: *req.Lng}
	if err := dispatch.ValidatePoint("", p.Position); err != nil {
		return p, err
	}
	if p.Position.Lat == 0 || p.Position.Lng == 0 {
		return p, dispatch.Invalid("lat", "lat and lng must not be 0 (a zero latitude or longitude is a GPS fault)")
	}
	if !area.Contains(p.Position) {
		return p, dispatch.Invalid("lat", "lat, lng must be inside the service area (FLAGDOWN_SERVICE_AREA)")
	}
	if p.Code, err = dispatch.NormalizeHailCode("code", req.Code); err != nil {
		return p, err
	}
	switch {
	case p.Side == dispatch.HailDriver && req.Dropoff != nil:
		return p, dispatch.Invalid("dropoff", "must be left out: the rider gives the dropoff")
	case p.Side == dispatch.HailRider && req.Dropoff == nil:
		return p, dispatch.Invalid("dropoff", "is required of a rider (the fare is estimated from it)")
	case p.Side == dispatch.HailRider:
		d, err := req.Dropoff.Point("dropoff")
		if err != nil {
			return p, err
		}
		if err := dispatch.ValidateRidePoint("dropoff", d, area); err != nil {
			return p, err
		}
		p.Dropoff = &d
	}
	return p, nil
}

// observe counts one press that reached pairing in metrics.HailPresses.
func observe(side dispatch.HailSide, res lifecycle.HailResult, err error) {
	result := "error"
	var de *dispatch.Error
	switch {
	case err == nil && res.Waiting:
		result = "waiting"
	case err == nil:
		result = "paired"
	case errors.As(err, &de) && de.Reason != "":
		result = de.Reason
	}
	metrics.HailPresses.WithLabelValues(string(side), result).Inc()
}
