package cloudevent_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/shared/cloudevent"
	"github.com/flagdown/flagdown/shared/dispatch"
)

const rideID = "5b0b9c5e-8a51-4f7b-9d7e-0d2f3c7c1a11"

func binaryRequest(t *testing.T, headers map[string]string, body string) *http.Request {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/function/match", strings.NewReader(body))
	base := map[string]string{
		"Ce-Specversion": "1.0",
		"Ce-Id":          "evt-1",
		"Ce-Source":      "/flagdown/order-create",
		"Ce-Type":        events.RideRequested,
		"Ce-Subject":     rideID,
		"Ce-Time":        "2026-01-01T00:00:00Z",
		"Content-Type":   "application/json",
	}
	for k, v := range headers {
		base[k] = v
	}
	for k, v := range base {
		if v != "" {
			r.Header.Set(k, v)
		}
	}
	return r
}

func structuredRequest(t *testing.T, override map[string]any, drop ...string) *http.Request {
	t.Helper()
	env := map[string]any{
		"specversion":     "1.0",
		"id":              "evt-2",
		"source":          "/flagdown/order-create",
		"type":            events.RideRequested,
		"subject":         rideID,
		"time":            "2026-01-01T00:00:00Z",
		"datacontenttype": "application/json",
		"data":            map[string]any{"ride_id": rideID, "rider_id": "r-1"},
	}
	for k, v := range override {
		env[k] = v
	}
	for _, k := range drop {
		delete(env, k)
	}
	b, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodPost, "/function/match", strings.NewReader(string(b)))
	r.Header.Set("Content-Type", "application/cloudevents+json; charset=utf-8")
	return r
}

func wantInvalid(t *testing.T, err error, field string) {
	t.Helper()
	if err == nil {
		t.Fatalf("want invalid_argument on %q, got success", field)
	}
	var de *dispatch.Error
	if !errors.As(err, &de) {
		t.Fatalf("want *dispatch.Error, got %T: %v", err, err)
	}
	if de.Code != dispatch.CodeInvalidArgument || de.Field != field {
		t.Fatalf("want invalid_argument on %q, got %s on %q: %s", field, de.Code, de.Field, de.Message)
	}
	if de.Message == "" || !strings.HasPrefix(de.Message, field) {
		t.Fatalf("message %q should name the field %q", de.Message, field)
	}
}

func TestFromRequestBinary(t *testing.T) {
	t.Parallel()
	r := binaryRequest(t, nil, `{"ride_id":"`+rideID+`","rider_id":"r-1"}`)
	e, err := cloudevent.FromRequest(r)
	if err != nil {
		t.Fatal(err)
	}
	if e.ID() != "evt-1" || e.Type() != events.RideRequested || e.Subject() != rideID || e.Source() != "/flagdown/order-create" {
		t.Fatalf("unexpected attributes: %s", e)
	}
	if !e.Time().Equal(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("time = %v", e.Time())
	}
	var d events.RideRequestedData
	if err := cloudevent.DecodeData(e, &d); err != nil {
		t.Fatal(err)
	}
	if d.RideID != rideID || d.RiderID != "r-1" {
		t.Fatalf("data = %+v", d)
	}
}

func TestFromRequestBinaryWithoutContentType(t *testing.T) {
	t.Parallel()
	r := binaryRequest(t, map[string]string{"Content-Type": ""}, `{"ride_id":"x"}`)
	r.Header.Del("Content-Type")
	if _, err := cloudevent.FromRequest(r); err != nil {
		t.Fatal(err)
	}
}

func TestFromRequestStructured(t *testing.T) {
	t.Parallel()
	e, err := cloudevent.FromRequest(structuredRequest(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	if e.ID() != "evt-2" || e.Type() != events.RideRequested || e.Subject() != rideID {
		t.Fatalf("unexpected attributes: %s", e)
	}
	var d events.RideRequestedData
	if err := cloudevent.DecodeData(e, &d); err != nil {
		t.Fatal(err)
	}
	if d.RideID != rideID {
		t.Fatalf("data = %+v", d)
	}
}

func TestFromRequestRejects(t *testing.T) {
	t.Parallel()
	good := `{"ride_id":"x"}`
	cases := []struct {
		name  string
		req   func(t *testing.T) *http.Request
		field string
	}{
		{"binary missing id", func(t *testing.T) *http.Request { return binaryRequest(t, map[string]string{"Ce-Id": ""}, good) }, "id"},
		{"binary missing source", func(t *testing.T) *http.Request { return binaryRequest(t, map[string]string{"Ce-Source": ""}, good) }, "source"},
		{"binary missing type", func(t *testing.T) *http.Request { return binaryRequest(t, map[string]string{"Ce-Type": ""}, good) }, "type"},
		{"binary missing subject", func(t *testing.T) *http.Request { return binaryRequest(t, map[string]string{"Ce-Subject": ""}, good) }, "subject"},
		{"binary unknown type", func(t *testing.T) *http.Request {
			return binaryRequest(t, map[string]string{"Ce-Type": "io.flagdown.ride.teleported.v1"}, good)
		}, "type"},
		{"binary wrong specversion", func(t *testing.T) *http.Request {
			return binaryRequest(t, map[string]string{"Ce-Specversion": "0.3"}, good)
		}, "specversion"},
		{"binary malformed json", func(t *testing.T) *http.Request { return binaryRequest(t, nil, `{"ride_id":`) }, "data"},
		{"binary empty data", func(t *testing.T) *http.Request { return binaryRequest(t, nil, ``) }, "data"},
		{"binary not json content type", func(t *testing.T) *http.Request {
			return binaryRequest(t, map[string]string{"Content-Type": "text/plain"}, good)
		}, "data"},
		{"structured missing id", func(t *testing.T) *http.Request { return structuredRequest(t, nil, "id") }, "id"},
		{"structured missing source", func(t *testing.T) *http.Request { return structuredRequest(t, nil, "source") }, "source"},
		{"structured missing type", func(t *testing.T) *http.Request { return structuredRequest(t, nil, "type") }, "type"},
		{"structured missing subject", func(t *testing.T) *http.Request { return structuredRequest(t, nil, "subject") }, "subject"},
		{"structured unknown type", func(t *testing.T) *http.Request {
			return structuredRequest(t, map[string]any{"type": "com.example.other"})
		}, "type"},
		{"structured wrong specversion", func(t *testing.T) *http.Request {
			return structuredRequest(t, map[string]any{"specversion": "0.2"})
		}, "specversion"},
		{"structured missing specversion", func(t *testing.T) *http.Request { return structuredRequest(t, nil, "specversion") }, "specversion"},
		{"structured malformed json", func(t *testing.T) *http.Request {
			r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(`{"specversion":"1.0","id":`))
			r.Header.Set("Content-Type", "application/cloudevents+json")
			return r
		}, "data"},
		{"structured missing data", func(t *testing.T) *http.Request { return structuredRequest(t, nil, "data") }, "data"},
		{"structured text data", func(t *testing.T) *http.Request {
			return structuredRequest(t, map[string]any{"datacontenttype": "text/plain", "data": "hello"})
		}, "data"},
		{"plain json request", func(t *testing.T) *http.Request {
			r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(good))
			r.Header.Set("Content-Type", "application/json")
			return r
		}, "specversion"},
		{"empty request", func(t *testing.T) *http.Request { return httptest.NewRequest(http.MethodPost, "/", nil) }, "specversion"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := cloudevent.FromRequest(c.req(t))
			wantInvalid(t, err, c.field)
		})
	}
}

func TestFromRequestTooLarge(t *testing.T) {
	t.Parallel()
	body := `{"ride_id":"` + strings.Repeat("x", 2048) + `"}`
	_, err := cloudevent.FromRequestLimit(binaryRequest(t, nil, body), 1024)
	if dispatch.ErrorCode(err) != dispatch.CodeTooLarge {
		t.Fatalf("want too_large, got %v", err)
	}
	// Without a Content-Length the limit still applies while reading.
	r := binaryRequest(t, nil, body)
	r.ContentLength = -1
	_, err = cloudevent.FromRequestLimit(r, 1024)
	if dispatch.ErrorCode(err) != dispatch.CodeTooLarge {
		t.Fatalf("want too_large, got %v", err)
	}
	if _, err := cloudevent.FromRequestLimit(binaryRequest(t, nil, body), 4096); err != nil {
		t.Fatal(err)
	}
}

func TestDecodeDataStrict(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"unknown field":   `{"ride_id":"x","extra":1}`,
		"trailing data":   `{"ride_id":"x"} {"ride_id":"y"}`,
		"trailing junk":   `{"ride_id":"x"}]`,
		"number string":   `{"ride_id":"x","fare_estimate_cents":"12"}`,
		"wrong type":      `["x"]`,
		"malformed":       `{"ride_id":`,
		"nan":             `{"fare_estimate_cents":NaN}`,
		"object for time": `{"requested_at":{}}`,
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e, err := cloudevent.New("evt-3", events.RideRequested, "/flagdown/test", rideID, []byte(`{}`), time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			e.DataEncoded = []byte(data)
			var d events.RideRequestedData
			wantInvalid(t, cloudevent.DecodeData(e, &d), "data")
		})
	}
}

func TestNew(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 2, 3, 4, 5, 6, 0, time.FixedZone("x", 3600))
	e, err := cloudevent.New("evt-4", events.RideAccepted, "/flagdown/accept", rideID,
		events.RideAcceptedData{RideID: rideID, DriverID: "d-1"}, at)
	if err != nil {
		t.Fatal(err)
	}
	if e.SpecVersion() != "1.0" || e.DataContentType() != "application/json" || !e.Time().Equal(at) || e.Time().Location() != time.UTC {
		t.Fatalf("unexpected event %s", e)
	}
	if err := cloudevent.Check(e); err != nil {
		t.Fatal(err)
	}
	var d events.RideAcceptedData
	if err := cloudevent.DecodeData(e, &d); err != nil || d.DriverID != "d-1" {
		t.Fatalf("decode: %v %+v", err, d)
	}
	raw, err := cloudevent.New("evt-5", events.RideAccepted, "/flagdown/accept", rideID, json.RawMessage(`{"ride_id":"r"}`), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if string(raw.Data()) != `{"ride_id":"r"}` {
		t.Fatalf("data = %s", raw.Data())
	}
	if _, err := cloudevent.New("evt-6", events.RideAccepted, "/flagdown/accept", rideID, json.RawMessage(`{`), time.Time{}); err == nil {
		t.Fatal("invalid raw JSON accepted")
	}
	if _, err := cloudevent.New("", events.RideAccepted, "/flagdown/accept", rideID, nil, time.Time{}); err == nil {
		t.Fatal("missing id accepted")
	}
}
