package httpx_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/httpx"
)

func TestStatusCoversEveryCode(t *testing.T) {
	t.Parallel()
	// The table of docs/api.md.
	want := map[dispatch.Code]int{
		dispatch.CodeInvalidArgument:  400,
		dispatch.CodeUnauthenticated:  401,
		dispatch.CodePermissionDenied: 403,
		dispatch.CodeNotFound:         404,
		dispatch.CodeConflict:         409,
		dispatch.CodeTooLarge:         413,
		dispatch.CodeInternal:         500,
		dispatch.CodeUnavailable:      503,
	}
	for code, status := range want {
		t.Run(string(code), func(t *testing.T) {
			if got := httpx.Status(code); got != status {
				t.Errorf("Status(%s) = %d, want %d", code, got, status)
			}
		})
	}
	if got, want := httpx.Status("made_up"), 500; got != want {
		t.Errorf("Status(unknown) = %d, want %d", got, want)
	}
}

func TestWriteErrorShape(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		err        error
		wantStatus int
		wantBody   string
	}{
		{"invalid argument", dispatch.Invalid("pickup.lat", "must be between -90 and 90 degrees"), 400,
			`{"error":{"code":"invalid_argument","field":"pickup.lat","message":"pickup.lat: must be between -90 and 90 degrees"}}`},
		{"conflict with details", dispatch.Conflict(dispatch.ReasonIllegalTransition, "no").With("current_status", "COMPLETED"), 409,
			`{"error":{"code":"conflict","reason":"illegal_transition","message":"no","details":{"current_status":"COMPLETED"}}}`},
		{"a plain error hides its cause", errors.New("pq: password leaked"), 500,
			`{"error":{"code":"internal","message":"internal error"}}`},
		{"unavailable hides its cause", dispatch.Unavailable("redis", errors.New("dial tcp 10.0.0.1")), 503,
			`{"error":{"code":"unavailable","message":"redis is unavailable"}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			httpx.WriteError(rec, httptest.NewRequest(http.MethodGet, "/", nil), nil, tc.err)
			if got, want := rec.Code, tc.wantStatus; got != want {
				t.Errorf("status = %d, want %d", got, want)
			}
			if got, want := rec.Header().Get("Content-Type"), "application/json"; got != want {
				t.Errorf("Content-Type = %q, want %q", got, want)
			}
			if got, want := strings.TrimSpace(rec.Body.String()), tc.wantBody; got != want {
				t.Errorf("body = %s, want %s", got, want)
			}
		})
	}
}

type point struct {
	Lat *float64 `json:"lat"`
	Lng *float64 `json:"lng"`
}

type order struct {
	RiderID string `json:"rider_id"`
	Pickup  *point `json:"pickup"`
	Count   int    `json:"count"`
	Tags    []string
}

func TestDecodeJSON(t *testing.T) {
	t.Parallel()
	const limit = 64
	tests := []struct {
		name        string
		body        string
		contentType string
		wantCode    dispatch.Code // "" means accepted
		wantField   string
		wantRule    string
	}{
		{"a valid body", `{"rider_id": "r-1", "pickup": {"lat": 1, "lng": 2}}`, "application/json", "", "", ""},
		{"a content type with charset", `{"rider_id": "r-1"}`, "application/json; charset=utf-8", "", "", ""},
		{"no content type", `{"rider_id": "r-1"}`, "", "", "", ""},
		{"trailing whitespace", "{\"rider_id\": \"r-1\"}\n\t ", "application/json", "", "", ""},
		{"a wrong content type", `{}`, "text/plain", dispatch.CodeInvalidArgument, "Content-Type", "application/json"},
		{"an empty body", ``, "application/json", dispatch.CodeInvalidArgument, "body", "empty"},
		{"a truncated body", `{"rider_id": "r`, "application/json", dispatch.CodeInvalidArgument, "body", "ends too early"},
		{"NaN", `{"pickup": {"lat": NaN}}`, "", dispatch.CodeInvalidArgument, "body", "NaN"},
		{"Infinity", `{"pickup": {"lat": Infinity}}`, "", dispatch.CodeInvalidArgument, "body", "Infinity"},
		{"a number as a string", `{"pickup": {"lat": "1.5"}}`, "", dispatch.CodeInvalidArgument, "pickup.lat", "must be a JSON number, not string"},
		{"a string as a number", `{"rider_id": 5}`, "", dispatch.CodeInvalidArgument, "rider_id", "must be a JSON string, not number"},
		{"a fraction for an integer", `{"count": 1.5}`, "", dispatch.CodeInvalidArgument, "count", "number"},
		{"an object for the whole body", `[1]`, "", dispatch.CodeInvalidArgument, "body", "object"},
		{"an unknown field", `{"rider_id": "r", "extra": 1}`, "", dispatch.CodeInvalidArgument, "extra", "not a known field"},
		{"an unknown nested field", `{"pickup": {"alt": 1}}`, "", dispatch.CodeInvalidArgument, "alt", "not a known field"},
		{"a second value", `{"rider_id": "r"} {"rider_id": "s"}`, "", dispatch.CodeInvalidArgument, "body", "trailing"},
		{"trailing garbage", `{"rider_id": "r"}x`, "", dispatch.CodeInvalidArgument, "body", "trailing"},
		{"a body over the limit", `{"rider_id": "` + strings.Repeat("r", limit) + `"}`, "", dispatch.CodeTooLarge, "body", fmt.Sprintf("at most %d bytes", limit)},
		{"a body over the limit after a valid value", `{"rider_id": "r"}` + strings.Repeat(" ", limit), "", dispatch.CodeTooLarge, "body", "at most"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(tc.body))
			if tc.contentType != "" {
				r.Header.Set("Content-Type", tc.contentType)
			}
			var v order
			err := httpx.DecodeJSON(httptest.NewRecorder(), r, limit, &v)
			if tc.wantCode == "" {
				if err != nil {
					t.Errorf("DecodeJSON = %v, want nil", err)
				}
				return
			}
			var e *dispatch.Error
			if !errors.As(err, &e) {
				t.Fatalf("DecodeJSON = %v, want a *dispatch.Error", err)
			}
			if got, want := e.Code, tc.wantCode; got != want {
				t.Errorf("code = %q, want %q (%s)", got, want, e.Message)
			}
			if got, want := e.Field, tc.wantField; got != want {
				t.Errorf("field = %q, want %q (%s)", got, want, e.Message)
			}
			if !strings.Contains(e.Message, tc.wantField) || !strings.Contains(e.Message, tc.wantRule) {
				t.Errorf("message %q should name %q and the rule %q", e.Message, tc.wantField, tc.wantRule)
			}
		})
	}
}

func TestMethodNotAllowed(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	httpx.MethodNotAllowed(rec, http.MethodGet, http.MethodPost)
	if got, want := rec.Code, http.StatusMethodNotAllowed; got != want {
		t.Errorf("status = %d, want %d", got, want)
	}
	if got, want := rec.Header().Get("Allow"), "GET, POST"; got != want {
		t.Errorf("Allow = %q, want %q", got, want)
	}
	var body httpx.ErrorBody
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	if got, want := body.Error.Field, "method"; got != want {
		t.Errorf("field = %q, want %q", got, want)
	}
	// The status comes from the code, through the one table, like every other error.
	if got, want := httpx.Status(body.Error.Code), http.StatusMethodNotAllowed; got != want {
		t.Errorf("code %q maps to %d, want %d", body.Error.Code, got, want)
	}
}
