// Package function is the order-create function: a rider requests a ride.
//
// POST /function/order-create {"rider_id", "pickup": {lat, lng}, "dropoff": {lat, lng}, "quote_id"}
// with an optional Idempotency-Key header. The ride is created by shared/lifecycle (NewRide,
// CreateRide): validated, inserted REQUESTED with a fare estimate together with its ride.requested
// outbox row in one transaction; the relay then publishes the event that triggers matching. Answers
// 202 (200 when the Idempotency-Key names an existing ride).
//
// The fare, its surge multiplier and the quoted wait come from shared/pricing: the quote of
// fare-estimate the rider names in quote_id (what he was shown; his own, for the same pickup and
// dropoff, still valid), or, without quote_id, a quote made now. The rider never sends a price or a
// multiplier. Once the ride exists its request counts in the pickup cell's surge demand.
//
// The ride is PostgreSQL's, so a request answers while Redis does not (docs/resilience.md): the
// rate limit is then enforced by the process alone (shared/ratelimit), the ride is priced at the
// base fare (pricing.Service.BaseQuote: multiplier 1.0, no quoted wait; a quote_id is not read),
// counted in flagdown_redis_degraded_total{check="pricing"}, and matching starts once Redis is back
// (the relay's ride.requested, or reconcile's rides_retried). Every Redis step waits at most
// FLAGDOWN_REDIS_TIMEOUT.
//
// Callers need a rider token (auth.Require); the ride is the token's subject's: rider_id may be left
// out and, if sent, must be his (else 403). So the 409 rider_has_open_ride, which names the open
// ride in details.ride_id, only ever answers the rider whose ride it is.
package function

import (
	"context"
	"net/http"

	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/host"
	"github.com/flagdown/flagdown/shared/httpx"
	"github.com/flagdown/flagdown/shared/lifecycle"
	"github.com/flagdown/flagdown/shared/pricing"
	"github.com/flagdown/flagdown/shared/ratelimit"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// Source is the CloudEvent source of events this function emits.
const Source = "/flagdown/order-create"

// Function serves ride requests.
type Function struct {
	d  *host.Deps
	lc *lifecycle.Service
	h  http.Handler
	// basePriced follows the rides priced without Redis.
	basePriced *redisstore.Degradation
}

// New returns the function over d; it requires a rider token.
func New(d *host.Deps) *Function {
	f := &Function{d: d, lc: d.Lifecycle(Source), basePriced: redisstore.NewDegradation("pricing", d.Log)}
	f.h = auth.Require(d.Auth, d.Log, http.HandlerFunc(f.serve), auth.RoleRider)
	return f
}

var lazy = host.NewLazy(func(d *host.Deps) http.Handler { return New(d) })

// Handle is the OpenFaaS golang-middleware entry point.
func Handle(w http.ResponseWriter, r *http.Request) { lazy.ServeHTTP(w, r) }

// Request is the body of a ride request.
type Request struct {
	// RiderID is optional: the rider is the token's sub, and a rider_id sent must be that sub.
	RiderID string `json:"rider_id,omitempty"`
	// Pickup and Dropoff must lie in the service area (FLAGDOWN_SERVICE_AREA).
	Pickup  *httpx.PointJSON `json:"pickup"`
	Dropoff *httpx.PointJSON `json:"dropoff"`
	// QuoteID is optional: the quote_id of a fare-estimate answer, whose fare and multiplier the
	// ride is then charged.
	QuoteID string `json:"quote_id,omitempty"`
}

// Response is the answer: the ride and its fare estimate.
type Response struct {
	RideID            string              `json:"ride_id"`
	Status            dispatch.RideStatus `json:"status"`
	FareEstimateCents int64               `json:"fare_estimate_cents"`
	// EstDistanceM is the estimated road distance in metres.
	EstDistanceM float64 `json:"est_distance_m"`
	// EstDurationS is the estimated driving time in seconds.
	EstDurationS float64 `json:"est_duration_s"`
	// SurgeMultiplier is the multiplier in FareEstimateCents (1.0 without surge).
	SurgeMultiplier float64 `json:"surge_multiplier"`
	// QuotedWaitS is the predicted pickup wait, seconds; left out when no driver was near.
	QuotedWaitS *float64 `json:"quoted_wait_s,omitempty"`
}

// ServeHTTP handles POST /function/order-create.
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
		if req.RiderID, err = auth.Self(id, "rider_id", req.RiderID); err != nil {
			return 0, nil, err
		}
		key := r.Header.Get("Idempotency-Key")
		ride, err := f.newRide(&req, key)
		if err != nil {
			return 0, nil, err
		}
		if req.QuoteID != "" {
			if err := dispatch.ValidateRideID("quote_id", req.QuoteID); err != nil {
				return 0, nil, dispatch.Invalid("quote_id", "must be the quote_id of a fare-estimate answer (a lower-case UUID)")
			}
		}
		// Valid requests spend the rider's budget (FLAGDOWN_RATE_RIDES_PER_MIN); refused ones do not.
		// The check rides in the quote's round trip (pricing reads nothing it would act on before
		// the answer), and a spent budget is answered before anything pricing found.
		spend := f.d.Limiter().Queue(ratelimit.RideRequests, ride.RiderID, "rider_id", 1)
		ctx := f.d.Redis.Budget(r.Context()) // the quote and the demand record share one Redis timeout
		q, err := f.price(ctx, ride, req.QuoteID, spend.Piggyback())
		if err := spend.Err(ctx); err != nil {
			return 0, nil, err
		}
		if err != nil {
			return 0, nil, err
		}
		ride, created, err := f.lc.CreateRide(ctx, ride, key)
		if err != nil {
			return 0, nil, err
		}
		status := http.StatusAccepted
		if !created {
			status = http.StatusOK
		} else {
			rctx, cancel := f.d.Redis.Bounded(ctx)
			f.d.Pricing().Requested(rctx, q, ride.ID)
			cancel()
		}
		return status, Response{RideID: ride.ID, Status: ride.Status, FareEstimateCents: ride.FareEstimateCents,
			EstDistanceM: ride.EstDistanceM, EstDurationS: ride.EstDurationS,
			SurgeMultiplier: dispatch.RoundMultiplier(ride.SurgeMultiplier), QuotedWaitS: ride.QuotedWaitS}, nil
	})
}

// newRide reads the points of req and has lifecycle validate the request and decide the ride
// (lifecycle.Service.NewRide: nothing written).
func (f *Function) newRide(req *Request, key string) (*dispatch.Ride, error) {
	pickup, err := req.Pickup.Point("pickup")
	if err != nil {
		return nil, err
	}
	dropoff, err := req.Dropoff.Point("dropoff")
	if err != nil {
		return nil, err
	}
	return f.lc.NewRide(lifecycle.RideRequest{RiderID: req.RiderID, Pickup: pickup, Dropoff: dropoff, IdempotencyKey: key})
}

// price sets the ride's fare, multiplier and quoted wait from the rider's quote quoteID, or from a
// quote made now (pricing.Service.Price: nothing written) when quoteID is empty, and returns the
// quote. Its first Redis round trip carries also.
func (f *Function) price(ctx context.Context, ride *dispatch.Ride, quoteID string, also redisstore.Piggyback) (*pricing.Quote, error) {
	ctx, cancel := f.d.Redis.Bounded(ctx)
	defer cancel()
	var q *pricing.Quote
	var err error
	if quoteID != "" {
		q, err = f.d.Pricing().Take(ctx, quoteID, ride.RiderID, ride.Pickup, ride.Dropoff, also)
	} else {
		q, err = f.d.Pricing().Price(ctx, ride.RiderID, ride.Pickup, ride.Dropoff, also)
	}
	switch {
	case dispatch.ErrorCode(err) == dispatch.CodeUnavailable:
		f.basePriced.Degraded(err, "rides priced at the base fare (1.0, no quoted wait)")
		q, err = f.d.Pricing().BaseQuote(ride.RiderID, ride.Pickup, ride.Dropoff), nil
	case err == nil:
		f.basePriced.Recovered()
	}
	if err != nil {
		return nil, err
	}
	ride.FareEstimateCents, ride.EstDistanceM, ride.EstDurationS = q.Fare.FareCents, q.Fare.DistanceM, q.Fare.DurationS
	ride.SurgeMultiplier, ride.SurgeComputed = q.Multiplier, q.Computed
	if q.Wait != nil {
		w, c := q.Wait.TotalS, q.Wait.CalibrationS
		ride.QuotedWaitS, ride.QuotedWaitCalS = &w, &c
	}
	return q, nil
}
