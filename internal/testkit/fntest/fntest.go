// Package fntest holds the helpers the functions' integration tests share: calling a handler with a
// JSON body and decoding its answer, sending a CloudEvent in binary mode, snapshotting what a test
// slice of Redis and PostgreSQL holds, and the common ride scenario steps (ping, create, match,
// accept) over the real function handlers.
//
// Every helper fails the test (t.Fatalf) on unexpected transport or decoding problems; the HTTP
// status and body are returned for the test to judge.
package fntest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/flagdown/flagdown/events"
	accept "github.com/flagdown/flagdown/functions/accept"
	hail "github.com/flagdown/flagdown/functions/hail"
	locationupdate "github.com/flagdown/flagdown/functions/location-update"
	match "github.com/flagdown/flagdown/functions/match"
	nearby "github.com/flagdown/flagdown/functions/nearby"
	ordercreate "github.com/flagdown/flagdown/functions/order-create"
	ride "github.com/flagdown/flagdown/functions/ride"
	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/app"
	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/cloudevent"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/dispatch"
)

// JSON is a decoded JSON object answer.
type JSON = map[string]any

// Do calls h with method and path. body is sent as is when it is a string or []byte, marshalled as
// JSON otherwise, and omitted when nil. headers are added to the request (Content-Type defaults to
// application/json when a body is sent). It returns the status and the answer decoded as a JSON
// object (nil when the answer is empty).
func Do(t testing.TB, h http.Handler, method, path string, body any, headers map[string]string) (int, JSON) {
	t.Helper()
	status, raw := DoRaw(t, h, method, path, body, headers)
	if len(bytes.TrimSpace(raw)) == 0 {
		return status, nil
	}
	var out JSON
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s %s: answer %d is not a JSON object: %v: %s", method, path, status, err, raw)
	}
	return status, out
}

// DoRaw is Do without decoding: it returns the status and the raw answer body.
func DoRaw(t testing.TB, h http.Handler, method, path string, body any, headers map[string]string) (int, []byte) {
	t.Helper()
	var rd *bytes.Reader
	switch b := body.(type) {
	case nil:
		rd = bytes.NewReader(nil)
	case string:
		rd = bytes.NewReader([]byte(b))
	case []byte:
		rd = bytes.NewReader(b)
	default:
		enc, err := json.Marshal(b)
		if err != nil {
			t.Fatalf("%s %s: marshal body: %v", method, path, err)
		}
		rd = bytes.NewReader(enc)
	}
	req := httptest.NewRequest(method, path, rd)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.Bytes()
}

// APIError is the error object of an error answer ({"error": {...}}).
type APIError struct {
	Code    string
	Field   string
	Reason  string
	Message string
	Details JSON
}

// ErrorOf returns the error object of an answer; it fails the test when there is none.
func ErrorOf(t testing.TB, body JSON) APIError {
	t.Helper()
	e, ok := body["error"].(JSON)
	if !ok {
		t.Fatalf("answer has no error object: %v", body)
	}
	s := func(k string) string { v, _ := e[k].(string); return v }
	d, _ := e["details"].(JSON)
	return APIError{Code: s("code"), Field: s("field"), Reason: s("reason"), Message: s("message"), Details: d}
}

// Env is one test's isolated deployment: the dependencies over a fresh schema and Redis prefix and
// every function's handler built over them.
type Env struct {
	// D are the dependencies (testkit.Deps).
	D *app.Deps
	// Location is the location-update function.
	Location http.Handler
	// Order is the order-create function.
	Order http.Handler
	// Match is the match function (CloudEvents).
	Match http.Handler
	// Accept is the accept function.
	Accept http.Handler
	// Ride is the ride function; paths are the part after /function/ride ("/{id}/start").
	Ride http.Handler
	// Nearby is the nearby function.
	Nearby http.Handler
	// Hail is the hail function (street-hail pairing).
	Hail http.Handler
}

// Token returns a valid HS256 token (one hour) for role and sub, signed with the Env's secret
// (Config.JWTSecret), the way a client of this deployment would hold one.
func (e *Env) Token(role auth.Role, sub string) string {
	tok, err := auth.Mint([]byte(e.D.Config.JWTSecret), e.D.Config.JWTIssuer, e.D.Config.JWTAudience,
		auth.Identity{Subject: sub, Role: role}, time.Hour)
	if err != nil {
		panic("fntest: mint token: " + err.Error())
	}
	return tok
}

// As returns the request headers of a caller with role and sub: {"Authorization": "Bearer <token>"}.
// Pass it as Do's headers (add more keys to it as needed).
func (e *Env) As(role auth.Role, sub string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + e.Token(role, sub)}
}

// AsWith returns As(role, sub) with the headers of extra added (extra is not modified).
func (e *Env) AsWith(role auth.Role, sub string, extra map[string]string) map[string]string {
	h := e.As(role, sub)
	for k, v := range extra {
		h[k] = v
	}
	return h
}

// Ops returns the headers of an operator (role ops), who may read any ride.
func (e *Env) Ops() map[string]string { return e.As(auth.RoleOps, "ops-test") }

// Service returns the headers of the gateway aggregator (role service), who sends ping batches for
// many drivers.
func (e *Env) Service() map[string]string { return e.As(auth.RoleService, "service-test") }

// NewEnv builds an Env over testkit.Deps(t, tune).
func NewEnv(t testing.TB, tune func(*config.Config)) *Env {
	t.Helper()
	d := testkit.Deps(t, tune)
	return &Env{
		D: d, Location: locationupdate.New(d), Order: ordercreate.New(d.Deps), Match: match.New(d),
		Accept: accept.New(d.Deps), Ride: ride.New(d.Deps), Nearby: nearby.New(d.Deps), Hail: hail.New(d.Deps),
	}
}

// Offset returns the point dy metres north and dx metres east of p (flat-earth approximation,
// good to well under a metre at city scale).
func Offset(p dispatch.Point, dyM, dxM float64) dispatch.Point {
	const mPerDegLat = dispatch.EarthRadiusM * math.Pi / 180
	return dispatch.Point{
		Lat: p.Lat + dyM/mPerDegLat,
		Lng: p.Lng + dxM/(mPerDegLat*math.Cos(p.Lat*math.Pi/180)),
	}
}

// Ping sends one ping for driverID at p (status available, timestamp now) as driver driverID and
// returns its answer; it fails the test unless the answer is 200.
func (e *Env) Ping(t testing.TB, driverID string, p dispatch.Point) JSON {
	t.Helper()
	status, body := Do(t, e.Location, http.MethodPost, "/", JSON{
		"driver_id": driverID, "lat": p.Lat, "lng": p.Lng, "status": "available",
	}, e.As(auth.RoleDriver, driverID))
	if status != http.StatusOK {
		t.Fatalf("ping %s: status %d: %v", driverID, status, body)
	}
	return body
}

// CreateRide requests a ride for riderID as rider riderID and returns its id; it fails the test
// unless the answer is 202.
func (e *Env) CreateRide(t testing.TB, riderID string, pickup, dropoff dispatch.Point) string {
	t.Helper()
	status, body := Do(t, e.Order, http.MethodPost, "/", JSON{
		"rider_id": riderID, "pickup": pickup, "dropoff": dropoff,
	}, e.As(auth.RoleRider, riderID))
	if status != http.StatusAccepted {
		t.Fatalf("order-create %s: status %d: %v", riderID, status, body)
	}
	id, _ := body["ride_id"].(string)
	if id == "" {
		t.Fatalf("order-create %s: no ride_id in %v", riderID, body)
	}
	return id
}

// Event is a CloudEvent to send to an event-triggered function.
type Event struct {
	// ID defaults to a fresh random id; Source to /test; Type to events.RideRequested.
	ID, Source, Type string
	// Subject is the ride id.
	Subject string
	// Data defaults to {"ride_id": Subject}.
	Data any
}

// SendEvent sends ev to h as a binary-mode CloudEvents HTTP request, written by the sdk-go HTTP
// binding and signed with testkit.EventSigner like the relay signs, and returns the status and
// decoded answer.
func SendEvent(t testing.TB, h http.Handler, ev Event) (int, JSON) {
	t.Helper()
	ce := BuildEvent(t, ev)
	if err := testkit.EventSigner().Sign(&ce); err != nil {
		t.Fatalf("sign event: %v", err)
	}
	return SendCloudEvent(t, h, ce)
}

// BuildEvent returns the unsigned CloudEvent SendEvent sends for ev (defaults filled in).
func BuildEvent(t testing.TB, ev Event) event.Event {
	t.Helper()
	if ev.ID == "" {
		ev.ID = "evt-" + testkit.ID()
	}
	if ev.Source == "" {
		ev.Source = "/test"
	}
	if ev.Type == "" {
		ev.Type = events.RideRequested
	}
	if ev.Data == nil {
		ev.Data = JSON{"ride_id": ev.Subject}
	}
	ce, err := cloudevent.New(ev.ID, ev.Type, ev.Source, ev.Subject, ev.Data, time.Time{})
	if err != nil {
		t.Fatalf("build event: %v", err)
	}
	return ce
}

// SendCloudEvent sends ce to h as it is (no signature added) as a binary-mode CloudEvents HTTP
// request and returns the status and decoded answer.
func SendCloudEvent(t testing.TB, h http.Handler, ce event.Event) (int, JSON) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/", nil)
	if err := cehttp.WriteRequest(context.Background(), binding.ToMessage(&ce), req); err != nil {
		t.Fatalf("write event request: %v", err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var out JSON
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("event answer %d is not JSON: %v: %s", rec.Code, err, rec.Body.String())
	}
	return rec.Code, out
}

// MatchRide sends a ride.requested event for rideID to the match function and returns its outcome;
// it fails the test unless the answer is 200.
func (e *Env) MatchRide(t testing.TB, rideID string) string {
	t.Helper()
	return e.MatchEvent(t, Event{Subject: rideID})
}

// MatchEvent sends ev to the match function and returns its outcome; it fails the test unless the
// answer is 200.
func (e *Env) MatchEvent(t testing.TB, ev Event) string {
	t.Helper()
	status, body := SendEvent(t, e.Match, ev)
	if status != http.StatusOK {
		t.Fatalf("match %s: status %d: %v", ev.Subject, status, body)
	}
	out, _ := body["outcome"].(string)
	return out
}

// OfferedDriver returns the driver of rideID's PENDING offer, or "" when none.
func (e *Env) OfferedDriver(t testing.TB, rideID string) string {
	t.Helper()
	var id string
	err := e.D.DB.Pool.QueryRow(context.Background(),
		`SELECT coalesce(max(driver_id), '') FROM offers WHERE ride_id = $1 AND status = 'PENDING'`, rideID).Scan(&id)
	if err != nil {
		t.Fatalf("pending offer of %s: %v", rideID, err)
	}
	return id
}

// AcceptRide posts an accept as driver driverID and returns its status and answer.
func (e *Env) AcceptRide(t testing.TB, rideID, driverID string) (int, JSON) {
	t.Helper()
	return Do(t, e.Accept, http.MethodPost, "/", JSON{"ride_id": rideID, "driver_id": driverID}, e.As(auth.RoleDriver, driverID))
}

// RideAction posts action (decline, start, complete, cancel) with body to the ride function, as
// the actor the body names: the rider of {"by": "rider", "rider_id": …}, else the driver of
// "driver_id" (a body naming nobody is sent without a token). Use RideActionAs for any other caller.
func (e *Env) RideAction(t testing.TB, rideID, action string, body any) (int, JSON) {
	t.Helper()
	var headers map[string]string
	if m, ok := body.(JSON); ok {
		if r, _ := m["rider_id"].(string); r != "" && m["by"] == "rider" {
			headers = e.As(auth.RoleRider, r)
		} else if d, _ := m["driver_id"].(string); d != "" {
			headers = e.As(auth.RoleDriver, d)
		}
	}
	return Do(t, e.Ride, http.MethodPost, "/"+rideID+"/"+action, body, headers)
}

// RideActionAs posts action with body to the ride function with the given headers (e.As(...)).
func (e *Env) RideActionAs(t testing.TB, headers map[string]string, rideID, action string, body any) (int, JSON) {
	t.Helper()
	return Do(t, e.Ride, http.MethodPost, "/"+rideID+"/"+action, body, headers)
}

// GetRide returns GET /ride/{id} as an operator (who may read any ride); it fails the test unless
// the answer is 200.
func (e *Env) GetRide(t testing.TB, rideID string) JSON {
	t.Helper()
	status, body := Do(t, e.Ride, http.MethodGet, "/"+rideID, nil, e.Ops())
	if status != http.StatusOK {
		t.Fatalf("get ride %s: status %d: %v", rideID, status, body)
	}
	return body
}

// Count returns the result of a SELECT count(*) query (any query returning one integer).
func (e *Env) Count(t testing.TB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := e.D.DB.Pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("count %q: %v", query, err)
	}
	return n
}

// OutboxTypes returns the outbox event types written for subject, in insertion order.
func (e *Env) OutboxTypes(t testing.TB, subject string) []string {
	t.Helper()
	rows, err := e.D.DB.Pool.Query(context.Background(), `SELECT type FROM outbox WHERE subject = $1 ORDER BY id`, subject)
	if err != nil {
		t.Fatalf("outbox of %s: %v", subject, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatalf("outbox of %s: %v", subject, err)
		}
		out = append(out, s)
	}
	return out
}

// Key returns the full Redis key of name under this test's prefix ("geo:available", "offer:d-1").
func (e *Env) Key(name string) string { return e.D.Config.RedisPrefix + name }

// GeoPos returns driverID's position in the available GEO set as Redis reports it (GEOPOS), or
// nil when he is not a member.
func (e *Env) GeoPos(t testing.TB, driverID string) *dispatch.Point {
	t.Helper()
	p, err := e.D.Redis.GeoPosition(context.Background(), driverID)
	if err != nil {
		t.Fatalf("geopos %s: %v", driverID, err)
	}
	return p
}

// State is what a test's slice of Redis and PostgreSQL holds: every Redis key under the prefix
// with its serialised value (DUMP), and the row count of each dispatch table.
type State struct {
	// Keys maps each Redis key to its DUMP serialisation.
	Keys map[string]string
	// Rows maps each table (rides, offers, outbox, processed_events) to its row count.
	Rows map[string]int
}

// Snapshot returns the current State.
func (e *Env) Snapshot(t testing.TB) State {
	t.Helper()
	ctx := context.Background()
	rdb := e.D.Redis.Client()
	s := State{Keys: map[string]string{}, Rows: map[string]int{}}
	iter := rdb.Scan(ctx, 0, e.D.Config.RedisPrefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		v, err := rdb.Dump(ctx, iter.Val()).Result()
		if err != nil {
			t.Fatalf("dump %s: %v", iter.Val(), err)
		}
		s.Keys[iter.Val()] = v
	}
	if err := iter.Err(); err != nil {
		t.Fatalf("scan: %v", err)
	}
	for _, table := range []string{"rides", "offers", "outbox", "processed_events"} {
		s.Rows[table] = e.Count(t, "SELECT count(*) FROM "+table)
	}
	var rideSum string
	if err := e.D.DB.Pool.QueryRow(ctx, `SELECT coalesce(string_agg(id::text || status || coalesce(driver_id, ''), ',' ORDER BY id), '') FROM rides`).Scan(&rideSum); err != nil {
		t.Fatalf("rides: %v", err)
	}
	s.Keys["pg:rides"] = rideSum
	return s
}

// Diff describes how got differs from want, or "" when they are equal.
func (s State) Diff(got State) string {
	if reflect.DeepEqual(s, got) {
		return ""
	}
	var out []string
	for k, v := range got.Keys {
		if w, ok := s.Keys[k]; !ok {
			out = append(out, "added "+k)
		} else if w != v {
			out = append(out, "changed "+k)
		}
	}
	for k := range s.Keys {
		if _, ok := got.Keys[k]; !ok {
			out = append(out, "removed "+k)
		}
	}
	for k, v := range got.Rows {
		if s.Rows[k] != v {
			out = append(out, fmt.Sprintf("%s rows %d -> %d", k, s.Rows[k], v))
		}
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

// Eventually waits up to timeout (wall time) for cond to return true, failing the test with msg: it
// is testkit.Eventually for a condition without a state to report.
func Eventually(t testing.TB, timeout time.Duration, msg string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, timeout, func() (bool, string) { return cond(), msg })
}

// Near reports whether a and b are within tol degrees of each other in both coordinates.
func Near(a, b dispatch.Point, tol float64) bool {
	return math.Abs(a.Lat-b.Lat) <= tol && math.Abs(a.Lng-b.Lng) <= tol
}
