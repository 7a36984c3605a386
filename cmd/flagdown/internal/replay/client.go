package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/flagdown/flagdown/shared/auth"
)

// Ping is one location-update ping as sent to POST /function/location-update.
type Ping struct {
	// DriverID identifies the simulated driver.
	DriverID string `json:"driver_id"`
	// Lat is the latitude, WGS84 degrees.
	Lat float64 `json:"lat"`
	// Lng is the longitude, WGS84 degrees.
	Lng float64 `json:"lng"`
	// Heading is degrees clockwise from north, 0..360; omitted when the driver is not moving.
	Heading *float64 `json:"heading,omitempty"`
	// SpeedMPS is the driver's speed in metres per simulated second (0 when not moving; capped at 100 so
	// it stays within the platform's limit of 2 × FLAGDOWN_MAX_SPEED_MPS).
	SpeedMPS float64 `json:"speed_mps"`
	// TS is the wall-clock time of the ping, RFC 3339 UTC (the platform's timers are real time).
	TS string `json:"ts"`
	// Status is sent only to go online (available) or offline; omitted otherwise so the platform's
	// busy/navigating states are not overwritten.
	Status string `json:"status,omitempty"`
}

// Offer is a live offer carried in a ping answer.
type Offer struct {
	// OfferID identifies the offer.
	OfferID string `json:"offer_id"`
	// RideID is the ride offered.
	RideID string `json:"ride_id"`
	// Pickup is the ride's pickup (WGS84 degrees, lat/lng).
	Pickup LatLng `json:"pickup"`
	// Dropoff is the ride's dropoff (WGS84 degrees, lat/lng).
	Dropoff LatLng `json:"dropoff"`
	// DistanceM is the driver's straight-line distance to the pickup when offered, metres.
	DistanceM float64 `json:"distance_m"`
	// ExpiresAt is when the offer lapses (server wall clock, RFC 3339).
	ExpiresAt string `json:"expires_at"`
}

// PingResult is the platform's answer to one ping.
type PingResult struct {
	// DriverID echoes the ping's driver.
	DriverID string `json:"driver_id"`
	// Applied is false when the ping was not used as the position.
	Applied bool `json:"applied"`
	// Rejected is "stale" or "gps_jump" when not applied.
	Rejected string `json:"rejected"`
	// Status is the driver's status after the ping (offline, available, paused, busy, navigating).
	Status string `json:"status"`
	// Offer is present while the driver holds a live offer.
	Offer *Offer `json:"offer"`
}

// APIError is a non-2xx answer from the platform, decoded from the contract's error shape.
type APIError struct {
	// Status is the HTTP status code.
	Status int
	// Code is the error code (invalid_argument, conflict, …).
	Code string
	// Reason refines conflicts (ride_taken, offer_expired, …).
	Reason string
	// Message is the human-readable message.
	Message string
}

// Error formats the status, code, reason and message.
func (e *APIError) Error() string {
	s := fmt.Sprintf("HTTP %d %s", e.Status, e.Code)
	if e.Reason != "" {
		s += " (" + e.Reason + ")"
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// client talks to the platform's HTTP API, each call with the bearer token of who makes it.
type client struct {
	base   string
	http   *http.Client
	tokens *tokens
	// answers times every call to an AnswerOps endpoint.
	answers answerLog
}

// tokens mints and caches one HS256 token per (role, subject) with the platform's secret
// (auth.Mint), valid for tokenTTL: every simulated driver and rider holds his own, and the batched
// pings go out with one service token, as a gateway aggregator's would (the final ride reads with an
// ops token).
type tokens struct {
	secret      []byte
	issuer, aud string
	mu          sync.Mutex
	cache       map[string]string
}

// tokenTTL is the lifetime of a replay token, longer than any replay.
const tokenTTL = 24 * time.Hour

// serviceSubject is the subject of the replay's service token (its ping batches), opsSubject of its
// ops token (its ride reads).
const (
	serviceSubject = "replay-aggregator"
	opsSubject     = "replay-ops"
)

// header returns {"Authorization": "Bearer <token of role and sub>"}.
func (t *tokens) header(role auth.Role, sub string) map[string]string {
	key := string(role) + "/" + sub
	t.mu.Lock()
	tok, ok := t.cache[key]
	t.mu.Unlock()
	if !ok {
		var err error
		if tok, err = auth.Mint(t.secret, t.issuer, t.aud, auth.Identity{Subject: sub, Role: role}, tokenTTL); err != nil {
			// Mint fails only without a secret, which Run refuses before any request.
			panic("replay: mint token: " + err.Error())
		}
		t.mu.Lock()
		t.cache[key] = tok
		t.mu.Unlock()
	}
	return map[string]string{"Authorization": "Bearer " + tok}
}

// newHTTPClient returns a client whose transport keeps up to conns idle connections to the platform,
// so workers reuse connections instead of dialling per request.
func newHTTPClient(conns int) *http.Client {
	t := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conns * 2,
		MaxIdleConnsPerHost: conns * 2,
		MaxConnsPerHost:     0,
		IdleConnTimeout:     90 * time.Second,
		ForceAttemptHTTP2:   false,
	}
	return &http.Client{Transport: t, Timeout: 30 * time.Second}
}

// do sends method path with body (JSON-encoded unless nil) and decodes a 2xx answer into out
// (when non-nil). It returns the status and an *APIError for non-2xx answers.
func (c *client) do(ctx context.Context, method, path string, body any, header map[string]string, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	sent := time.Now()
	resp, err := c.http.Do(req)
	if op := answerOp(method, path); op != "" {
		st := 0
		if err == nil {
			st = resp.StatusCode
		}
		c.answers.add(answer{op: op, at: sent, dur: time.Since(sent), status: st})
	}
	if err != nil {
		return 0, err
	}
	defer func() {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
	}()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		ae := &APIError{Status: resp.StatusCode}
		var env struct {
			Error struct {
				Code    string `json:"code"`
				Reason  string `json:"reason"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(raw, &env) == nil && env.Error.Code != "" {
			ae.Code, ae.Reason, ae.Message = env.Error.Code, env.Error.Reason, env.Error.Message
		} else {
			ae.Message = strings.TrimSpace(string(raw))
			if len(ae.Message) > 200 {
				ae.Message = ae.Message[:200] + "…"
			}
		}
		return resp.StatusCode, ae
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return resp.StatusCode, fmt.Errorf("decoding %s %s answer: %w", method, path, err)
		}
	}
	return resp.StatusCode, nil
}

// ready checks GET /readyz answers 200.
func (c *client) ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := c.do(ctx, http.MethodGet, "/readyz", nil, nil, nil)
	if err != nil && st == 0 {
		return err
	}
	if st != http.StatusOK {
		return fmt.Errorf("GET /readyz answered %d", st)
	}
	return nil
}

// locationUpdate sends pings: a single ping object when there is one and batch is false, else
// {"pings": [...]}. It returns one result per ping, in order.
func (c *client) locationUpdate(ctx context.Context, pings []Ping, batch bool) ([]PingResult, error) {
	if !batch && len(pings) == 1 {
		var r PingResult
		if _, err := c.do(ctx, http.MethodPost, "/function/location-update", pings[0], c.tokens.header(auth.RoleDriver, pings[0].DriverID), &r); err != nil {
			return nil, err
		}
		return []PingResult{r}, nil
	}
	var r struct {
		Results []PingResult `json:"results"`
	}
	if _, err := c.do(ctx, http.MethodPost, "/function/location-update", map[string]any{"pings": pings}, c.tokens.header(auth.RoleService, serviceSubject), &r); err != nil {
		return nil, err
	}
	if len(r.Results) != len(pings) {
		return r.Results, fmt.Errorf("location-update: %d results for %d pings", len(r.Results), len(pings))
	}
	return r.Results, nil
}

// FareQuote is the subset of GET /function/fare-estimate the replay reads.
type FareQuote struct {
	// QuoteID is passed to order-create, which charges the quote.
	QuoteID string `json:"quote_id"`
	// SurgeMode is the platform's surge mode (off, shadow, on).
	SurgeMode string `json:"surge_mode"`
	// SurgeMultiplier is the multiplier charged; SurgeComputed the cell's (nil when surge is off).
	SurgeMultiplier float64  `json:"surge_multiplier"`
	SurgeComputed   *float64 `json:"surge_computed"`
	// EstWaitS is the predicted pickup wait, seconds in the riders' time (simulated, when the
	// platform runs with FLAGDOWN_SIM_SPEEDUP = the replay's speed-up); WaitMatchS, WaitDriveS and
	// WaitCalibrationS its parts. nil when no driver was near.
	EstWaitS         *float64 `json:"est_wait_s"`
	WaitMatchS       *float64 `json:"wait_match_s"`
	WaitDriveS       *float64 `json:"wait_drive_s"`
	WaitCalibrationS *float64 `json:"wait_calibration_s"`
}

// fareEstimate asks for the quote of a ride as its rider.
func (c *client) fareEstimate(ctx context.Context, riderID string, pickup, dropoff LatLng) (*FareQuote, error) {
	var q FareQuote
	path := fmt.Sprintf("/function/fare-estimate?pickup=%v,%v&dropoff=%v,%v", pickup.Lat, pickup.Lng, dropoff.Lat, dropoff.Lng)
	if _, err := c.do(ctx, http.MethodGet, path, nil, c.tokens.header(auth.RoleRider, riderID), &q); err != nil {
		return nil, err
	}
	return &q, nil
}

// orderCreate creates a ride (charged at quoteID when not empty); it returns the ride id and the
// HTTP status (202 new, 200 replayed).
func (c *client) orderCreate(ctx context.Context, riderID string, pickup, dropoff LatLng, idemKey, quoteID string) (string, int, error) {
	var r struct {
		RideID string `json:"ride_id"`
	}
	body := map[string]any{"rider_id": riderID, "pickup": pickup, "dropoff": dropoff}
	if quoteID != "" {
		body["quote_id"] = quoteID
	}
	h := c.tokens.header(auth.RoleRider, riderID)
	h["Idempotency-Key"] = idemKey
	st, err := c.do(ctx, http.MethodPost, "/function/order-create", body, h, &r)
	if err == nil && r.RideID == "" {
		err = fmt.Errorf("order-create: answer %d without ride_id", st)
	}
	return r.RideID, st, err
}

// accept accepts rideID for driverID.
func (c *client) accept(ctx context.Context, rideID, driverID string) error {
	_, err := c.do(ctx, http.MethodPost, "/function/accept", map[string]string{"ride_id": rideID, "driver_id": driverID}, c.tokens.header(auth.RoleDriver, driverID), nil)
	return err
}

// rideAction posts decline/start/complete for driverID.
func (c *client) rideAction(ctx context.Context, rideID, action, driverID string) error {
	_, err := c.do(ctx, http.MethodPost, "/function/ride/"+rideID+"/"+action, map[string]string{"driver_id": driverID}, c.tokens.header(auth.RoleDriver, driverID), nil)
	return err
}

// RideView is the subset of GET /function/ride/{id} the replay reads.
type RideView struct {
	// RideID identifies the ride.
	RideID string `json:"ride_id"`
	// Status is the ride's status (REQUESTED, ACCEPTED, IN_PROGRESS, COMPLETED, CANCELLED, UNMATCHED).
	Status string `json:"status"`
	// DriverID is the ride's driver; empty while REQUESTED (a re-opened ride has its driver cleared).
	DriverID string `json:"driver_id"`
	// MatchAttempts is how many match attempts the platform made for the ride.
	MatchAttempts int `json:"match_attempts"`
	// MatchNote is why the latest match attempt offered nobody, if it did not.
	MatchNote string `json:"match_note"`
	// CreatedAt is the server's wall-clock creation time.
	CreatedAt *time.Time `json:"created_at"`
	// FirstOfferedAt is the server's wall-clock time of the ride's first offer; nil if never offered.
	FirstOfferedAt *time.Time `json:"first_offered_at"`
	// FirstMatchAt is the server's wall-clock time the first match attempt finished, offered or not.
	FirstMatchAt *time.Time `json:"first_match_at"`
	// AcceptedAt is the server's wall-clock time of the latest accept; nil if never accepted. It is
	// kept when the ride is re-opened, so REQUESTED or UNMATCHED with AcceptedAt set means re-opened.
	AcceptedAt *time.Time `json:"accepted_at"`
}

// getRide fetches one ride, as ops (the replay reads every ride at its end).
func (c *client) getRide(ctx context.Context, rideID string) (*RideView, error) {
	var r RideView
	if _, err := c.do(ctx, http.MethodGet, "/function/ride/"+rideID, nil, c.tokens.header(auth.RoleOps, opsSubject), &r); err != nil {
		return nil, err
	}
	return &r, nil
}
