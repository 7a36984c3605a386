package cloudevent_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/shared/cloudevent"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/httpx"
)

// rawStructuredRequest is a structured-mode request whose member name holds rawValue verbatim (raw
// JSON, so that invalid UTF-8 reaches the decoder: json.Marshal would replace it with U+FFFD).
func rawStructuredRequest(t *testing.T, name, rawValue string) *http.Request {
	t.Helper()
	const placeholder = "@@raw@@"
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
	env[name] = placeholder
	b, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	b = bytes.Replace(b, []byte(`"`+placeholder+`"`), []byte(rawValue), 1)
	r := httptest.NewRequest(http.MethodPost, "/function/match", bytes.NewReader(b))
	r.Header.Set("Content-Type", "application/cloudevents+json")
	return r
}

// serve answers r as an event-triggered function's edge does: decode, then the one status table.
func serve(r *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	if _, err := cloudevent.FromRequest(r); err != nil {
		httpx.WriteError(rec, r, nil, err)
	} else {
		rec.WriteHeader(http.StatusOK)
	}
	return rec
}

// wantHTTP400 asserts that r is answered 400 invalid_argument naming field.
func wantHTTP400(t *testing.T, r *http.Request, field string) {
	t.Helper()
	rec := serve(r)
	if got, want := rec.Code, http.StatusBadRequest; got != want {
		t.Fatalf("status = %d, want %d: %s", got, want, rec.Body)
	}
	var body httpx.ErrorBody
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("answer is not an error body: %v: %s", err, rec.Body)
	}
	if body.Error.Code != dispatch.CodeInvalidArgument || body.Error.Field != field {
		t.Fatalf("error = %s on %q, want invalid_argument on %q (%s)", body.Error.Code, body.Error.Field, field, body.Error.Message)
	}
	if !strings.HasPrefix(body.Error.Message, field+": ") {
		t.Errorf("message %q should start with %q", body.Error.Message, field+": ")
	}
}

func TestAttributeValuesRejected(t *testing.T) {
	t.Parallel()
	// limits per attribute; "traceparent" and "foo" are extensions.
	limits := map[string]int{
		"id": cloudevent.MaxIDBytes, "source": cloudevent.MaxSourceBytes, "subject": cloudevent.MaxSubjectBytes,
		"type": cloudevent.MaxTypeBytes, "traceparent": cloudevent.MaxAttributeBytes, "foo": cloudevent.MaxAttributeBytes,
	}
	// header is a binary-mode value; raw the same value as a structured-mode JSON member.
	bad := []struct {
		name   string
		header func(limit int) string
		raw    func(limit int) string
		rule   string
	}{
		{"NUL", func(int) string { return "a\x00b" }, func(int) string { return `"a\u0000b"` }, "control characters"},
		{"a newline", func(int) string { return "a\nb" }, func(int) string { return `"a\nb"` }, "control characters"},
		{"a tab", func(int) string { return "a\tb" }, func(int) string { return `"a\tb"` }, "control characters"},
		{"an escape", func(int) string { return "a\x1bb" }, func(int) string { return `"a\u001bb"` }, "control characters"},
		{"DEL", func(int) string { return "a\x7f" }, func(int) string { return `"a\u007f"` }, "control characters"},
		{"invalid UTF-8", func(int) string { return "a\xffb" }, func(int) string { return "\"a\xffb\"" }, "valid UTF-8"},
		{"a truncated UTF-8 sequence", func(int) string { return "a\xe5\x8f" }, func(int) string { return "\"a\xe5\x8f\"" }, "valid UTF-8"},
		{"one byte over the limit", func(n int) string { return "/" + strings.Repeat("x", n) },
			func(n int) string { return `"/` + strings.Repeat("x", n) + `"` }, "at most"},
	}
	for attr, limit := range limits {
		for _, b := range bad {
			t.Run("binary "+attr+" with "+b.name, func(t *testing.T) {
				t.Parallel()
				r := binaryRequest(t, nil, `{"ride_id":"x"}`)
				r.Header.Set("Ce-"+attr, b.header(limit))
				_, err := cloudevent.FromRequest(r)
				wantInvalid(t, err, attr)
				if msg := dispatch.AsError(err).Message; !strings.Contains(msg, b.rule) {
					t.Errorf("message %q should contain %q", msg, b.rule)
				}
				r = binaryRequest(t, nil, `{"ride_id":"x"}`)
				r.Header.Set("Ce-"+attr, b.header(limit))
				wantHTTP400(t, r, attr)
			})
			t.Run("structured "+attr+" with "+b.name, func(t *testing.T) {
				t.Parallel()
				_, err := cloudevent.FromRequest(rawStructuredRequest(t, attr, b.raw(limit)))
				wantInvalid(t, err, attr)
				if msg := dispatch.AsError(err).Message; !strings.Contains(msg, b.rule) {
					t.Errorf("message %q should contain %q", msg, b.rule)
				}
				wantHTTP400(t, rawStructuredRequest(t, attr, b.raw(limit)), attr)
			})
		}
	}
}

func TestAttributeValuesAtTheirLimitsAccepted(t *testing.T) {
	t.Parallel()
	fill := func(prefix string, n int) string { return prefix + strings.Repeat("x", n-len(prefix)) }
	values := map[string]string{
		"id":      fill("evt-", cloudevent.MaxIDBytes),
		"source":  fill("/flagdown/", cloudevent.MaxSourceBytes),
		"subject": fill("flagdown:{test}:offer:司机-", cloudevent.MaxSubjectBytes),
		"foo":     fill("Straße 🚕 ", cloudevent.MaxAttributeBytes),
	}
	for name, v := range values {
		t.Run("binary "+name, func(t *testing.T) {
			t.Parallel()
			r := binaryRequest(t, nil, `{"ride_id":"x"}`)
			r.Header.Set("Ce-"+name, v)
			e, err := cloudevent.FromRequest(r)
			if err != nil {
				t.Fatal(err)
			}
			if got := attribute(e.ID(), e.Source(), e.Subject(), e.Extensions()["foo"], name); got != v {
				t.Errorf("%s = %.40q…, want %.40q…", name, got, v)
			}
		})
		t.Run("structured "+name, func(t *testing.T) {
			t.Parallel()
			e, err := cloudevent.FromRequest(structuredRequest(t, map[string]any{name: v}))
			if err != nil {
				t.Fatal(err)
			}
			if got := attribute(e.ID(), e.Source(), e.Subject(), e.Extensions()["foo"], name); got != v {
				t.Errorf("%s = %.40q…, want %.40q…", name, got, v)
			}
		})
	}
	// A percent sign is a character like any other: the SDK does not percent-decode header values.
	e, err := cloudevent.FromRequest(binaryRequest(t, map[string]string{"Ce-Id": "evt%00"}, `{"ride_id":"x"}`))
	if err != nil || e.ID() != "evt%00" {
		t.Fatalf("id %q, err %v; want evt%%00 accepted as sent", e.ID(), err)
	}
}

func attribute(id, source, subject string, foo any, name string) string {
	switch name {
	case "id":
		return id
	case "source":
		return source
	case "subject":
		return subject
	}
	s, _ := foo.(string)
	return s
}

func TestAttributeShapeNamesTheAttribute(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		req   func(t *testing.T) *http.Request
		field string
	}{
		{"binary unparsable time", func(t *testing.T) *http.Request {
			return binaryRequest(t, map[string]string{"Ce-Time": "yesterday"}, `{"ride_id":"x"}`)
		}, "time"},
		{"structured id as a number", func(t *testing.T) *http.Request { return rawStructuredRequest(t, "id", `5`) }, "id"},
		{"structured subject as a boolean", func(t *testing.T) *http.Request { return rawStructuredRequest(t, "subject", `true`) }, "subject"},
		{"structured source as an object", func(t *testing.T) *http.Request { return rawStructuredRequest(t, "source", `{}`) }, "source"},
		{"structured data with invalid UTF-8", func(t *testing.T) *http.Request {
			return rawStructuredRequest(t, "data", "{\"ride_id\":\"a\xffb\"}")
		}, "data"},
		{"structured member name with invalid UTF-8", func(t *testing.T) *http.Request {
			return rawStructuredRequest(t, "data", "{\"ride_id\":\"x\"},\"x\xff\":\"y\"")
		}, "data"},
		{"binary data with invalid UTF-8", func(t *testing.T) *http.Request {
			return binaryRequest(t, nil, "{\"ride_id\":\"a\xffb\"}")
		}, "data"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := cloudevent.FromRequest(c.req(t))
			wantInvalid(t, err, c.field)
			wantHTTP400(t, c.req(t), c.field)
		})
	}
	// Extensions may be numbers and booleans in structured mode.
	if _, err := cloudevent.FromRequest(rawStructuredRequest(t, "foo", `7`)); err != nil {
		t.Errorf("integer extension: %v", err)
	}
}

func TestCheckAttributes(t *testing.T) {
	t.Parallel()
	good := func(t *testing.T) event.Event {
		t.Helper()
		e, err := cloudevent.New("evt-7", events.RideRequested, "/flagdown/order-create", rideID, json.RawMessage(`{}`), time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	cases := []struct {
		name  string
		edit  func(e *event.Event)
		field string
	}{
		{"id with NUL", func(e *event.Event) { e.SetID("evt\x00") }, "id"},
		{"id over-long", func(e *event.Event) { e.SetID(strings.Repeat("x", cloudevent.MaxIDBytes+1)) }, "id"},
		{"subject with a newline", func(e *event.Event) { e.SetSubject(rideID[:8] + "\n" + rideID[8:]) }, "subject"},
		{"subject with invalid UTF-8", func(e *event.Event) { e.SetSubject(rideID + "\xff") }, "subject"},
		{"subject over-long", func(e *event.Event) { e.SetSubject(strings.Repeat("x", cloudevent.MaxSubjectBytes+1)) }, "subject"},
		{"type over-long", func(e *event.Event) { e.SetType(strings.Repeat("x", cloudevent.MaxTypeBytes+1)) }, "type"},
		{"source over-long", func(e *event.Event) { e.SetSource("/" + strings.Repeat("x", cloudevent.MaxSourceBytes)) }, "source"},
		{"extension with NUL", func(e *event.Event) { e.SetExtension("foo", "a\x00b") }, "foo"},
		{"data with invalid UTF-8", func(e *event.Event) { e.DataEncoded = []byte("{\"ride_id\":\"\xff\"}") }, "data"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := good(t)
			if err := cloudevent.Check(e); err != nil {
				t.Fatalf("unedited event: %v", err)
			}
			c.edit(&e)
			wantInvalid(t, cloudevent.Check(e), c.field)
		})
	}
}
