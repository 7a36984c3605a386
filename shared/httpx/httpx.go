// Package httpx is the HTTP edge every function shares: strict JSON decoding, the one table mapping
// error codes to HTTP statuses, JSON responses, the shape of error bodies, and the request metrics
// and tracing middleware (Instrument).
package httpx

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/metrics"
	"github.com/flagdown/flagdown/shared/tracing"
)

// statusOf is the only place error codes become HTTP statuses.
var statusOf = map[dispatch.Code]int{
	dispatch.CodeInvalidArgument:  http.StatusBadRequest,
	dispatch.CodeUnauthenticated:  http.StatusUnauthorized,
	dispatch.CodePermissionDenied: http.StatusForbidden,
	dispatch.CodeNotFound:         http.StatusNotFound,
	dispatch.CodeMethodNotAllowed: http.StatusMethodNotAllowed,
	dispatch.CodeConflict:         http.StatusConflict,
	dispatch.CodeTooLarge:         http.StatusRequestEntityTooLarge,
	dispatch.CodeRateLimited:      http.StatusTooManyRequests,
	dispatch.CodeInternal:         http.StatusInternalServerError,
	dispatch.CodeUnavailable:      http.StatusServiceUnavailable,
}

// Status returns the HTTP status for an error code (500 for an unknown code).
func Status(c dispatch.Code) int {
	if s, ok := statusOf[c]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// ErrorBody is the JSON body of every error answer: {"error": {...}}.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail describes an error to the caller.
type ErrorDetail struct {
	Code    dispatch.Code  `json:"code"`
	Field   string         `json:"field,omitempty"`
	Reason  string         `json:"reason,omitempty"`
	Message string         `json:"message"`
	Details map[string]any `json:"details,omitempty"`
}

// WriteJSON writes v as JSON with the given status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // an API answer, not HTML: "<JWT>" stays readable
	_ = enc.Encode(v)
}

// WriteError writes err as an ErrorBody with the status of its code. Internal and unavailable
// errors are logged with their cause; the caller only sees the generic message.
func WriteError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	e := dispatch.AsError(err)
	if e.Code == dispatch.CodeInternal || e.Code == dispatch.CodeUnavailable {
		if log == nil {
			log = slog.Default()
		}
		log.Error("request failed", "method", r.Method, "path", r.URL.Path, "code", e.Code, "err", err)
	}
	if s, ok := e.Details["retry_after_s"].(int); ok && e.Code == dispatch.CodeRateLimited {
		w.Header().Set("Retry-After", strconv.Itoa(s))
	}
	WriteJSON(w, Status(e.Code), ErrorBody{Error: ErrorDetail{
		Code: e.Code, Field: e.Field, Reason: e.Reason, Message: e.Message, Details: e.Details,
	}})
}

// DecodeJSON reads r's body (at most maxBytes) into v strictly: the body must be one JSON value
// with no unknown fields, no type mismatches (numbers sent as strings are refused), no NaN or
// Infinity (not JSON) and no trailing bytes. Errors are *dispatch.Error naming the field:
// CodeTooLarge past maxBytes, CodeInvalidArgument otherwise.
func DecodeJSON(w http.ResponseWriter, r *http.Request, maxBytes int64, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(strings.ToLower(ct), "application/json") {
		return dispatch.Invalid("Content-Type", "must be application/json")
	}
	body := http.MaxBytesReader(w, r.Body, maxBytes)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err, maxBytes)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return decodeError(err, maxBytes)
		}
		return dispatch.Invalid("body", "must hold exactly one JSON value (found trailing data)")
	}
	return nil
}

// JSONError turns an encoding/json decoding error into an invalid_argument error naming the field.
func JSONError(err error) error { return decodeError(err, 0) }

func decodeError(err error, maxBytes int64) error {
	var (
		mbe *http.MaxBytesError
		se  *json.SyntaxError
		te  *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &mbe):
		return &dispatch.Error{Code: dispatch.CodeTooLarge, Field: "body",
			Message: fmt.Sprintf("body: must be at most %d bytes", maxBytes)}
	case errors.Is(err, io.EOF):
		return dispatch.Invalid("body", "must be a JSON object (the body is empty)")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return dispatch.Invalid("body", "must be complete JSON (it ends too early)")
	case errors.As(err, &se):
		return dispatch.Invalid("body", fmt.Sprintf("must be valid JSON (syntax error at byte %d; NaN and Infinity are not JSON)", se.Offset))
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			field = "body"
		}
		if te.Type == timestampType {
			return dispatch.Invalid(field, "must be an RFC 3339 time string (e.g. 2026-12-01T15:04:05Z), not "+te.Value)
		}
		return dispatch.Invalid(field, fmt.Sprintf("must be a JSON %s, not %s", jsonKind(te.Type.Kind().String()), te.Value))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return dispatch.Invalid(name, "is not a known field")
	}
	return dispatch.Invalid("body", "must be valid JSON: "+err.Error())
}

func jsonKind(goKind string) string {
	switch goKind {
	case "float64", "float32", "int", "int64", "int32", "uint", "uint64":
		return "number"
	case "string":
		return "string"
	case "bool":
		return "boolean"
	case "slice", "array":
		return "array"
	case "struct", "map", "ptr":
		return "object"
	}
	return goKind
}

// MethodNotAllowed answers 405 with an invalid_argument body listing the allowed methods.
func MethodNotAllowed(w http.ResponseWriter, allowed ...string) {
	w.Header().Set("Allow", strings.Join(allowed, ", "))
	WriteJSON(w, Status(dispatch.CodeMethodNotAllowed), ErrorBody{Error: ErrorDetail{
		Code: dispatch.CodeMethodNotAllowed, Field: "method",
		Message: "method: must be one of " + strings.Join(allowed, ", "),
	}})
}

// Serve answers r with fn's result: fn returns a status and a body to write as JSON, or an error
// written through WriteError (the one code → status table). A request whose method is not method
// gets 405 without calling fn.
func Serve(w http.ResponseWriter, r *http.Request, log *slog.Logger, method string, fn func() (int, any, error)) {
	if r.Method != method {
		MethodNotAllowed(w, method)
		return
	}
	status, body, err := fn()
	if err != nil {
		WriteError(w, r, log, err)
		return
	}
	WriteJSON(w, status, body)
}

// Instrument wraps h, the handler of one function, so that every request it answers is counted in
// metrics.HTTPRequests and timed in metrics.HTTPDuration under function and the status code written
// (200 when h writes a body without WriteHeader, or nothing at all), and runs in a server span named
// function that continues the request's traceparent (tracing.StartServer; a no-op span when
// tracing is off).
func Instrument(function string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		ctx, span := tracing.StartServer(r, function)
		defer func() {
			status := sw.status()
			tracing.EndServer(span, status)
			code := strconv.Itoa(status)
			metrics.HTTPRequests.WithLabelValues(function, code).Inc()
			metrics.HTTPDuration.WithLabelValues(function, code).Observe(metrics.Since(start))
		}()
		if ctx != r.Context() {
			r = r.WithContext(ctx)
		}
		h.ServeHTTP(sw, r)
	})
}

// statusWriter remembers the status code a handler writes.
type statusWriter struct {
	http.ResponseWriter
	code int
}

// WriteHeader records code and passes it on.
func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write records an implicit 200 when no status was written, and passes b on.
func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush passes a flush through (server-sent events, streamed answers).
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) status() int {
	if w.code == 0 {
		return http.StatusOK
	}
	return w.code
}

// PointJSON is a position in a request body, WGS84 degrees: {"lat": …, "lng": …}. Both are required;
// Point checks that they are there, dispatch.ValidatePoint / ValidateRidePoint what they hold.
type PointJSON struct {
	Lat *float64 `json:"lat"`
	Lng *float64 `json:"lng"`
}

// Point returns p as a dispatch.Point. A missing p or coordinate is a CodeInvalid error naming it
// (field, field.lat or field.lng).
func (p *PointJSON) Point(field string) (dispatch.Point, error) {
	if p == nil {
		return dispatch.Point{}, dispatch.Invalid(field, "is required")
	}
	if p.Lat == nil {
		return dispatch.Point{}, dispatch.Invalid(field+".lat", "is required")
	}
	if p.Lng == nil {
		return dispatch.Point{}, dispatch.Invalid(field+".lng", "is required")
	}
	return dispatch.Point{Lat: *p.Lat, Lng: *p.Lng}, nil
}

// Timestamp is a time in a request body: a JSON string in RFC 3339 (e.g. "2026-12-01T15:04:05Z";
// fractional seconds allowed). Anything else fails decoding as a *json.UnmarshalTypeError, which
// DecodeJSON reports naming the field and this rule.
type Timestamp struct{ time.Time }

var timestampType = reflect.TypeFor[Timestamp]()

// UnmarshalJSON parses an RFC 3339 string.
func (t *Timestamp) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return &json.UnmarshalTypeError{Value: jsonValueKind(b), Type: timestampType}
	}
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return &json.UnmarshalTypeError{Value: strconv.Quote(s), Type: timestampType}
	}
	t.Time = v
	return nil
}

// jsonValueKind names the kind of the JSON value b (number, object, array, bool, null), as
// encoding/json's own type errors do.
func jsonValueKind(b []byte) string {
	switch c := bytes.TrimSpace(b); {
	case len(c) == 0:
		return "nothing"
	case c[0] == '{':
		return "object"
	case c[0] == '[':
		return "array"
	case c[0] == 't' || c[0] == 'f':
		return "bool"
	case c[0] == 'n':
		return "null"
	}
	return "number"
}
