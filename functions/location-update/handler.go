// Package function is the location-update function: drivers' GPS pings, one or a batch per call.
//
// POST /function/location-update with one ping or {"pings": [...]}. Each ping refreshes the
// driver's heartbeat and state and, for available drivers, his place in the available-drivers GEO
// set, all in one Redis round trip per call. The answer carries each driver's live offer so a
// polling driver app learns of offers within one ping interval. See docs/api.md. With
// push on, a ping of a driver on a ride whose position push is due (at most one per ride per
// FLAGDOWN_PUSH_POSITION_INTERVAL, decided in the ping script) sends it to the ride's rider in the
// background (push.Pusher.PositionsAsync); the answer never waits for it.
//
// Callers (auth.Require): a driver pings only as himself (every ping's driver_id is his token's sub
// or left out), so an answer only ever carries his own offer; a service token (the gateway
// aggregator, the replay) may send batches for many drivers, each ping naming its driver_id, and
// gets each driver's offer in that driver's result. No other role pings: an operator (ops) views,
// he cannot take a driver offline or invent one.
package function

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/flagdown/flagdown/shared/app"
	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/httpx"
	"github.com/flagdown/flagdown/shared/metrics"
	"github.com/flagdown/flagdown/shared/push"
	"github.com/flagdown/flagdown/shared/ratelimit"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// Function serves location updates.
type Function struct {
	d   *app.Deps
	now func() time.Time
	h   http.Handler
}

// New returns the function over d; it requires a driver or service token.
func New(d *app.Deps) *Function {
	f := &Function{d: d, now: d.Config.Now}
	f.h = auth.Require(d.Auth, d.Log, http.HandlerFunc(f.serve), auth.RoleDriver, auth.RoleService)
	return f
}

var lazy = app.NewLazy(func(d *app.Deps) http.Handler { return New(d) })

// Handle is the OpenFaaS golang-middleware entry point.
func Handle(w http.ResponseWriter, r *http.Request) { lazy.ServeHTTP(w, r) }

// PingRequest is one ping as sent by a driver's app.
type PingRequest struct {
	// DriverID identifies the driver (dispatch.ValidateID). A driver may leave it out (it is his
	// token's sub) and may only name himself; a service caller must name the driver of every ping.
	DriverID string `json:"driver_id"`
	// Lat is the latitude in WGS84 degrees, |lat| <= 85.05112878.
	Lat *float64 `json:"lat"`
	// Lng is the longitude in WGS84 degrees, |lng| <= 180.
	Lng *float64 `json:"lng"`
	// Heading is degrees clockwise from north, 0..360 (optional).
	Heading *float64 `json:"heading,omitempty"`
	// SpeedMPS is the device's speed in metres per second, 0..MaxSpeedMPS×2 (optional).
	SpeedMPS *float64 `json:"speed_mps,omitempty"`
	// TS is when the fix was taken (RFC 3339); defaults to the server's time; at most
	// FLAGDOWN_MAX_CLOCK_SKEW in the future.
	TS *httpx.Timestamp `json:"ts,omitempty"`
	// Status is offline, available or paused (optional; keeps the current status).
	Status string `json:"status,omitempty"`
}

type batchRequest struct {
	Pings []json.RawMessage `json:"pings"`
}

// PositionPushTimeout bounds the background pushes of one call's driver positions to their riders.
const PositionPushTimeout = 2 * time.Second

// PingResponse is the answer for one ping.
type PingResponse struct {
	DriverID string `json:"driver_id"`
	Applied  bool   `json:"applied"`
	// Rejected is "stale", "gps_jump" or "rate_limited" (RejectedRateLimited) when Applied is false.
	Rejected string                `json:"rejected,omitempty"`
	Status   dispatch.DriverStatus `json:"status"`
	Offer    *dispatch.LiveOffer   `json:"offer,omitempty"`
}

// ServeHTTP handles POST /function/location-update.
func (f *Function) ServeHTTP(w http.ResponseWriter, r *http.Request) { f.h.ServeHTTP(w, r) }

func (f *Function) serve(w http.ResponseWriter, r *http.Request) {
	httpx.Serve(w, r, f.d.Log, http.MethodPost, func() (int, any, error) {
		id, err := auth.Must(r)
		if err != nil {
			return 0, nil, err
		}
		var raw json.RawMessage
		if err := httpx.DecodeJSON(w, r, f.d.Config.MaxBodyBytes, &raw); err != nil {
			return 0, nil, err
		}
		single, reqs, err := f.parse(raw)
		if err != nil {
			return 0, nil, err
		}
		pings, err := f.validate(reqs, single, id)
		if err != nil {
			return 0, nil, err
		}
		// One round trip for the whole call; each ping spends its driver's budget in the script.
		results, err := f.d.Redis.ApplyPings(r.Context(), pings)
		if err != nil {
			return 0, nil, err
		}
		if single && results[0].Rejected == RejectedRateLimited {
			return 0, nil, ratelimit.Refusal(ratelimit.Pings, f.d.Redis.PingsPerMin, "driver_id", results[0].RetryAfter)
		}
		out := make([]PingResponse, len(pings))
		var ups []push.PositionUpdate
		for i, res := range results {
			p := pings[i]
			out[i] = PingResponse{DriverID: p.DriverID, Applied: res.Applied, Rejected: res.Rejected, Status: res.Status, Offer: res.Offer}
			if res.Rejected == RejectedRateLimited {
				out[i].Status = ""
			}
			observePing(res)
			if res.PushRide != "" {
				ups = append(ups, push.PositionUpdate{At: p.At, Data: push.DriverPosition{
					RideID: res.PushRide, DriverID: p.DriverID, Position: p.Position, HeadingDeg: p.HeadingDeg}})
			}
		}
		f.d.Push().PositionsAsync(ups, PositionPushTimeout)
		if single {
			return http.StatusOK, out[0], nil
		}
		return http.StatusOK, map[string]any{"results": out}, nil
	})
}

// parse tells a single ping from a batch: a batch is an object whose only key is "pings".
func (f *Function) parse(raw json.RawMessage) (bool, []PingRequest, error) {
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(raw, &probe); err != nil {
		return false, nil, dispatch.Invalid("body", "must be a JSON object")
	}
	if _, ok := probe["pings"]; ok {
		var b batchRequest
		if err := strictUnmarshal(raw, &b); err != nil {
			return false, nil, err
		}
		if len(b.Pings) == 0 {
			return false, nil, dispatch.Invalid("pings", "must hold at least one ping")
		}
		if len(b.Pings) > f.d.Config.MaxBatch {
			return false, nil, &dispatch.Error{Code: dispatch.CodeTooLarge, Field: "pings",
				Message: fmt.Sprintf("pings: must hold at most %d pings", f.d.Config.MaxBatch)}
		}
		reqs := make([]PingRequest, len(b.Pings))
		for i, raw := range b.Pings {
			if err := strictUnmarshal(raw, &reqs[i]); err != nil {
				return false, nil, inPing(i, err)
			}
		}
		return false, reqs, nil
	}
	var p PingRequest
	if err := strictUnmarshal(raw, &p); err != nil {
		return false, nil, err
	}
	return true, []PingRequest{p}, nil
}

// inPing makes a decoding error of batch ping i name its field as pings[i].field.
func inPing(i int, err error) error {
	e := dispatch.AsError(err)
	if e.Code != dispatch.CodeInvalidArgument {
		return err
	}
	rule := strings.TrimPrefix(e.Message, e.Field+": ")
	field := fmt.Sprintf("pings[%d]", i)
	if e.Field != "body" && e.Field != "" {
		field += "." + e.Field
	}
	return dispatch.Invalid(field, rule)
}

func strictUnmarshal(raw json.RawMessage, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return httpx.JSONError(err)
	}
	return nil
}

// validate checks the pings and whose they are: a driver's pings are all his own (driver_id empty
// or his sub, else 403), a service's name their drivers.
func (f *Function) validate(reqs []PingRequest, single bool, id auth.Identity) ([]redisstore.Ping, error) {
	now := f.now()
	out := make([]redisstore.Ping, len(reqs))
	for i, p := range reqs {
		field := func(s string) string {
			if single {
				return s
			}
			return fmt.Sprintf("pings[%d].%s", i, s)
		}
		if id.Role == auth.RoleDriver {
			self, err := auth.Self(id, field("driver_id"), p.DriverID)
			if err != nil {
				return nil, err
			}
			p.DriverID = self
		}
		if err := dispatch.ValidateID(field("driver_id"), p.DriverID); err != nil {
			return nil, err
		}
		if p.Lat == nil {
			return nil, dispatch.Invalid(field("lat"), "is required")
		}
		if p.Lng == nil {
			return nil, dispatch.Invalid(field("lng"), "is required")
		}
		pos := dispatch.Point{Lat: *p.Lat, Lng: *p.Lng}
		prefix := ""
		if !single {
			prefix = fmt.Sprintf("pings[%d]", i)
		}
		if err := dispatch.ValidatePoint(prefix, pos); err != nil {
			return nil, err
		}
		if p.Heading != nil && (math.IsNaN(*p.Heading) || *p.Heading < 0 || *p.Heading > 360) {
			return nil, dispatch.Invalid(field("heading"), "must be between 0 and 360 degrees")
		}
		if p.SpeedMPS != nil && (*p.SpeedMPS < 0 || *p.SpeedMPS > 2*f.d.Config.MaxSpeedMPS) {
			return nil, dispatch.Invalid(field("speed_mps"), fmt.Sprintf("must be between 0 and %v metres per second", 2*f.d.Config.MaxSpeedMPS))
		}
		at := now
		if p.TS != nil {
			at = p.TS.Time
			if at.After(now.Add(f.d.Config.MaxClockSkew)) {
				return nil, dispatch.Invalid(field("ts"), fmt.Sprintf("must not be more than %s in the future", f.d.Config.MaxClockSkew))
			}
			if at.Before(now.Add(-24 * time.Hour)) {
				return nil, dispatch.Invalid(field("ts"), "must not be more than 24h in the past")
			}
		}
		var status dispatch.DriverStatus
		if p.Status != "" {
			s, err := dispatch.ParseClientDriverStatus(field("status"), p.Status)
			if err != nil {
				return nil, err
			}
			status = s
		}
		out[i] = redisstore.Ping{DriverID: p.DriverID, Position: pos, At: at, Status: status, HeadingDeg: p.Heading, SpeedMPS: p.SpeedMPS}
	}
	return out, nil
}

// RejectedRateLimited is PingResponse.Rejected for a ping of a batch whose driver spent his ping
// budget (FLAGDOWN_RATE_PINGS_PER_MIN, spent in the ping script: redisstore.RejectedRateLimited):
// that ping was not applied, the batch's other pings were. A single ping past the budget answers
// 429 with Retry-After instead.
const RejectedRateLimited = redisstore.RejectedRateLimited

// observePing counts one ping the store judged in metrics.Pings: applied, or its rejection (stale,
// gps_jump, rate_limited).
func observePing(res redisstore.PingResult) {
	result := "applied"
	if !res.Applied {
		result = res.Rejected
	}
	metrics.Pings.WithLabelValues(result).Inc()
}
