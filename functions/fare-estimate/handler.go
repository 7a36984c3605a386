// Package function is the fare-estimate function: what a ride would cost and how long the rider
// would wait for his driver, before he asks for it.
//
// GET /function/fare-estimate?pickup=40.7549,-73.9840&dropoff=40.7306,-73.9866 (lat,lng in WGS84
// degrees, inside the service area) answers the fare with the surge multiplier of the pickup's cell
// and the predicted pickup wait (shared/pricing), and a quote_id valid for pricing.QuoteTTL: an
// order-create naming it charges exactly this fare and multiplier. Nothing but the quote is written
// (and the cell's multiplier when its update is due).
//
// Callers need a rider token (auth.Require); the quote is his and only he can charge it. Each call
// spends one unit of the rider's and of his client IP's FLAGDOWN_RATE_ESTIMATES_PER_MIN /
// FLAGDOWN_RATE_PER_IP_PER_MIN budgets (429 with Retry-After past them).
package function

import (
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/host"
	"github.com/flagdown/flagdown/shared/httpx"
	"github.com/flagdown/flagdown/shared/ratelimit"
)

// Function serves fare estimates.
type Function struct {
	d *host.Deps
	h http.Handler
}

// New returns the function over d; it requires a rider token.
func New(d *host.Deps) *Function {
	f := &Function{d: d}
	f.h = auth.Require(d.Auth, d.Log, http.HandlerFunc(f.serve), auth.RoleRider)
	return f
}

var lazy = host.NewLazy(func(d *host.Deps) http.Handler { return New(d) })

// Handle is the OpenFaaS golang-middleware entry point.
func Handle(w http.ResponseWriter, r *http.Request) { lazy.ServeHTTP(w, r) }

// Response is the estimate.
type Response struct {
	// QuoteID names the stored quote; pass it to order-create as quote_id.
	QuoteID string `json:"quote_id"`
	// ExpiresAt is when the quote can no longer be charged (RFC 3339 UTC).
	ExpiresAt time.Time `json:"expires_at"`
	// FareEstimateCents is the fare with the multiplier applied, cents.
	FareEstimateCents int64 `json:"fare_estimate_cents"`
	// EstDistanceM is the estimated road distance in metres.
	EstDistanceM float64 `json:"est_distance_m"`
	// EstDurationS is the estimated driving time in seconds.
	EstDurationS float64 `json:"est_duration_s"`
	// SurgeMode is the surge mode: off, shadow or on.
	SurgeMode dispatch.SurgeMode `json:"surge_mode"`
	// SurgeMultiplier is the multiplier charged (1.0 unless surge_mode is on).
	SurgeMultiplier float64 `json:"surge_multiplier"`
	// SurgeComputed is the pickup cell's multiplier (what mode on charges); left out when surge is off.
	SurgeComputed *float64 `json:"surge_computed,omitempty"`
	// EstWaitS is the predicted pickup wait, seconds: WaitMatchS + WaitDriveS + WaitCalibrationS, at
	// least 0. The four are in whole steps of dispatch.RiderWaitStepS (the rider view,
	// dispatch.RiderWait) and are left out when no available driver is within the largest match
	// radius.
	EstWaitS *float64 `json:"est_wait_s,omitempty"`
	// WaitMatchS is the recent time from request to accept, seconds.
	WaitMatchS *float64 `json:"wait_match_s,omitempty"`
	// WaitDriveS is the drive to the pickup from the nearest centre of an available driver's cell
	// (dispatch.RiderCell), seconds.
	WaitDriveS *float64 `json:"wait_drive_s,omitempty"`
	// WaitCalibrationS is the learned correction (dispatch.Calibrate), seconds, may be negative.
	WaitCalibrationS *float64 `json:"wait_calibration_s,omitempty"`
}

// ServeHTTP handles GET /function/fare-estimate.
func (f *Function) ServeHTTP(w http.ResponseWriter, r *http.Request) { f.h.ServeHTTP(w, r) }

func (f *Function) serve(w http.ResponseWriter, r *http.Request) {
	httpx.Serve(w, r, f.d.Log, http.MethodGet, func() (int, any, error) {
		who, err := auth.Must(r)
		if err != nil {
			return 0, nil, err
		}
		pickup, dropoff, err := f.parse(r.URL.Query())
		if err != nil {
			return 0, nil, err
		}
		// Each estimate stores a quote: budgeted per rider and per client IP.
		if err := f.d.Limiter().AllowCaller(r.Context(), ratelimit.Estimates, who.Subject, "rider_id",
			httpx.ClientIP(r, f.d.Config.TrustedProxyHops)); err != nil {
			return 0, nil, err
		}
		p := f.d.Pricing()
		q, err := p.Estimate(r.Context(), who.Subject, pickup, dropoff)
		if err != nil {
			return 0, nil, err
		}
		if err := p.Offer(r.Context(), q); err != nil {
			return 0, nil, err
		}
		out := Response{QuoteID: q.ID, ExpiresAt: q.ExpiresAt, FareEstimateCents: q.Fare.FareCents,
			EstDistanceM: q.Fare.DistanceM, EstDurationS: q.Fare.DurationS,
			SurgeMode: q.Mode, SurgeMultiplier: q.Multiplier, SurgeComputed: q.Computed}
		if q.Wait != nil {
			out.EstWaitS, out.WaitMatchS, out.WaitDriveS = &q.Wait.TotalS, &q.Wait.MatchS, &q.Wait.DriveS
			out.WaitCalibrationS = &q.Wait.CalibrationS
		}
		return http.StatusOK, out, nil
	})
}

// parse reads pickup and dropoff ("lat,lng" each, once) and checks them as order-create does.
func (f *Function) parse(q url.Values) (dispatch.Point, dispatch.Point, error) {
	for k := range q {
		if k != "pickup" && k != "dropoff" {
			return dispatch.Point{}, dispatch.Point{}, dispatch.Invalid(k, "is not a known parameter (pickup, dropoff)")
		}
	}
	area := f.d.ServiceArea()
	var pts [2]dispatch.Point
	for i, name := range []string{"pickup", "dropoff"} {
		p, err := point(q, name)
		if err != nil {
			return dispatch.Point{}, dispatch.Point{}, err
		}
		if err := dispatch.ValidateRidePoint(name, p, area); err != nil {
			return dispatch.Point{}, dispatch.Point{}, err
		}
		pts[i] = p
	}
	return pts[0], pts[1], nil
}

// point parses the parameter name as "lat,lng" (finite decimal degrees).
func point(q url.Values, name string) (dispatch.Point, error) {
	vs, ok := q[name]
	if !ok {
		return dispatch.Point{}, dispatch.Invalid(name, "is required (lat,lng in degrees, e.g. 40.7549,-73.9840)")
	}
	if len(vs) != 1 {
		return dispatch.Point{}, dispatch.Invalid(name, "must be given once")
	}
	lat, lng, ok := strings.Cut(vs[0], ",")
	if !ok {
		return dispatch.Point{}, dispatch.Invalid(name, "must be lat,lng in degrees, e.g. 40.7549,-73.9840")
	}
	num := func(field, s string) (float64, error) {
		v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return 0, dispatch.Invalid(field, "must be a finite decimal number")
		}
		return v, nil
	}
	la, err := num(name+".lat", lat)
	if err != nil {
		return dispatch.Point{}, err
	}
	ln, err := num(name+".lng", lng)
	if err != nil {
		return dispatch.Point{}, err
	}
	return dispatch.Point{Lat: la, Lng: ln}, nil
}
