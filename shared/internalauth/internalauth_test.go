package internalauth_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/shared/cloudevent"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/internalauth"
)

const (
	secretA = "secret-a-0123456789abcdef"
	secretB = "secret-b-0123456789abcdef"
)

func keys(t *testing.T, secrets ...string) *internalauth.Keys {
	t.Helper()
	k, err := internalauth.New(secrets...)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func sample(t *testing.T) event.Event {
	t.Helper()
	e, err := cloudevent.New("evt-1", events.RideRequested, "/flagdown/order-create", "ride-1",
		map[string]string{"ride_id": "ride-1"}, time.Date(2025, 3, 1, 12, 0, 0, 123456000, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func wantCode(t *testing.T, err error, code dispatch.Code) {
	t.Helper()
	if got := dispatch.ErrorCode(err); err == nil || got != code {
		t.Fatalf("error %v (code %s), want code %s", err, got, code)
	}
}

func TestParse(t *testing.T) {
	if k, err := internalauth.Parse(" "); err != nil || k.Configured() {
		t.Fatalf("empty value: %v, configured %v; want nothing configured", err, k.Configured())
	}
	if _, err := internalauth.Parse("short"); err == nil {
		t.Fatal("a 5-byte secret was accepted")
	}
	if k, err := internalauth.Parse(secretA + ", " + secretB + ","); err != nil || !k.Configured() {
		t.Fatalf("two secrets: %v", err)
	}
}

func TestSignVerify(t *testing.T) {
	k := keys(t, secretA)
	e := sample(t)
	wantCode(t, k.Verify(e), dispatch.CodeUnauthenticated) // unsigned
	if err := k.Sign(&e); err != nil {
		t.Fatal(err)
	}
	if err := k.Verify(e); err != nil {
		t.Fatalf("signed event: %v", err)
	}
	if err := keys(t, secretB).Verify(e); dispatch.ErrorCode(err) != dispatch.CodeUnauthenticated {
		t.Fatalf("another secret verified the signature: %v", err)
	}
	// Each signed attribute counts: a valid signature replayed on a changed event fails.
	for name, change := range map[string]func(*event.Event){
		"id":      func(e *event.Event) { e.SetID("evt-2") },
		"type":    func(e *event.Event) { e.SetType(events.RideRetry) },
		"source":  func(e *event.Event) { e.SetSource("/flagdown/attacker") },
		"subject": func(e *event.Event) { e.SetSubject("ride-2") },
		"time":    func(e *event.Event) { e.SetTime(e.Time().Add(time.Microsecond)) },
	} {
		c := e.Clone()
		change(&c)
		if err := k.Verify(c); dispatch.ErrorCode(err) != dispatch.CodeUnauthenticated {
			t.Errorf("%s changed: %v, want unauthenticated", name, err)
		}
	}
	for _, bad := range []any{"", "v1=", "v1=zz", "v2=" + strings.Repeat("00", 32), "v1=" + strings.Repeat("00", 32), 42} {
		c := e.Clone()
		c.SetExtension(internalauth.Extension, bad)
		if err := k.Verify(c); dispatch.ErrorCode(err) != dispatch.CodeUnauthenticated {
			t.Errorf("signature %v: %v, want unauthenticated", bad, err)
		}
	}
	wantCode(t, (*internalauth.Keys)(nil).Verify(e), dispatch.CodeUnavailable)
	if err := (*internalauth.Keys)(nil).Sign(&e); err == nil {
		t.Error("nil keys signed")
	}
}

// TestRotation: the first secret signs, every secret verifies.
func TestRotation(t *testing.T) {
	old, next := keys(t, secretA), keys(t, secretB, secretA)
	e := sample(t)
	if err := old.Sign(&e); err != nil {
		t.Fatal(err)
	}
	if err := next.Verify(e); err != nil {
		t.Fatalf("event signed with the old secret during a rotation: %v", err)
	}
	if err := next.Sign(&e); err != nil {
		t.Fatal(err)
	}
	if err := old.Verify(e); err == nil {
		t.Fatal("the old secret alone verified the new signature")
	}
	if err := keys(t, secretB).Verify(e); err != nil {
		t.Fatalf("after the rotation: %v", err)
	}
}

// TestSurvivesTransports: the signature verifies after the event went through the broker's
// structured JSON and the dispatcher's binary-mode HTTP request (ce-flagdownsig).
func TestSurvivesTransports(t *testing.T) {
	k := keys(t, secretA)
	e := sample(t)
	if err := k.Sign(&e); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	var stored event.Event
	if err := json.Unmarshal(b, &stored); err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodPost, "/", nil)
	if err := cehttp.WriteRequest(t.Context(), binding.ToMessage(&stored), req); err != nil {
		t.Fatal(err)
	}
	if req.Header.Get("ce-"+internalauth.Extension) == "" {
		t.Fatalf("binary mode lacks ce-%s: %v", internalauth.Extension, req.Header)
	}
	got, err := cloudevent.FromRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Verify(got); err != nil {
		t.Fatalf("after JSON and binary mode: %v", err)
	}
}

func TestVerifyRequest(t *testing.T) {
	k := keys(t, secretB, secretA)
	for h, want := range map[string]dispatch.Code{
		"":                               dispatch.CodeUnauthenticated,
		"Bearer":                         dispatch.CodeUnauthenticated,
		"Basic " + secretA:               dispatch.CodeUnauthenticated,
		"Bearer " + secretA[:20]:         dispatch.CodeUnauthenticated,
		"Bearer wrong-secret-0123456789": dispatch.CodeUnauthenticated,
	} {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		if h != "" {
			r.Header.Set("Authorization", h)
		}
		wantCode(t, k.VerifyRequest(r), want)
	}
	for _, s := range []string{secretA, secretB} {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		r.Header.Set("Authorization", "Bearer "+s)
		if err := k.VerifyRequest(r); err != nil {
			t.Errorf("Bearer of a configured secret: %v", err)
		}
	}
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	if err := k.SetBearer(r); err != nil || k.VerifyRequest(r) != nil {
		t.Fatalf("SetBearer: %v", err)
	}
	if !strings.HasSuffix(r.Header.Get("Authorization"), secretB) {
		t.Error("SetBearer does not send the first secret")
	}
	wantCode(t, (*internalauth.Keys)(nil).VerifyRequest(r), dispatch.CodeUnavailable)
}

// TestSignStampsTime: an event without a time gets one before it is signed, so a sender that
// stamps unset times (the CloudEvents client's WithTimeNow) leaves the signature valid.
func TestSignStampsTime(t *testing.T) {
	k := keys(t, secretA)
	e := sample(t)
	e.SetTime(time.Time{})
	if !e.Time().IsZero() {
		t.Fatal("the sample event still has a time")
	}
	if err := k.Sign(&e); err != nil {
		t.Fatal(err)
	}
	if e.Time().IsZero() {
		t.Fatal("Sign left the time unset")
	}
	if err := k.Verify(e); err != nil {
		t.Fatal(err)
	}
}

// TestTraceContextIsNotSigned: the trace context attributes (traceparent, tracestate: the
// CloudEvents distributed tracing extension) are outside the signature by design. An event signed
// with them verifies after the broker's JSON and the dispatcher's binary mode (ce-traceparent);
// one whose trace context a broker set, rewrote or dropped on the way verifies as well, because it
// only decides where the consumer's spans hang in a trace, never what the consumer does (it acts on
// the signed id, type, source and subject). What a tampered value may hold is still bounded:
// FromRequest refuses control characters and oversized values like any attribute's.
func TestTraceContextIsNotSigned(t *testing.T) {
	k := keys(t, secretA)
	e := sample(t)
	e.SetExtension("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	e.SetExtension("tracestate", "vendor=x")
	if err := k.Sign(&e); err != nil {
		t.Fatal(err)
	}
	plain := sample(t)
	if err := k.Sign(&plain); err != nil {
		t.Fatal(err)
	}
	if e.Extensions()[internalauth.Extension] != plain.Extensions()[internalauth.Extension] {
		t.Fatal("the signature depends on the trace context")
	}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	var stored event.Event
	if err := json.Unmarshal(b, &stored); err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodPost, "/", nil)
	if err := cehttp.WriteRequest(t.Context(), binding.ToMessage(&stored), req); err != nil {
		t.Fatal(err)
	}
	if got := req.Header.Get("ce-traceparent"); got != "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" {
		t.Fatalf("binary mode ce-traceparent = %q", got)
	}
	got, err := cloudevent.FromRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Verify(got); err != nil {
		t.Fatalf("with trace context after JSON and binary mode: %v", err)
	}

	for name, tamper := range map[string]func(*event.Event){
		"rewritten": func(e *event.Event) {
			e.SetExtension("traceparent", "00-11111111111111111111111111111111-2222222222222222-00")
		},
		"dropped":   func(e *event.Event) { e.SetExtension("traceparent", nil); e.SetExtension("tracestate", nil) },
		"malformed": func(e *event.Event) { e.SetExtension("traceparent", "garbage") },
	} {
		c := got.Clone()
		tamper(&c)
		if err := k.Verify(c); err != nil {
			t.Errorf("trace context %s: %v; want the signature to hold", name, err)
		}
	}
	// The signed attributes stay covered with a trace context present.
	c := got.Clone()
	c.SetSubject("ride-2")
	wantCode(t, k.Verify(c), dispatch.CodeUnauthenticated)

	// A traceparent with a control character is refused before anything reads it.
	req = httptest.NewRequest(http.MethodPost, "/", nil)
	if err := cehttp.WriteRequest(t.Context(), binding.ToMessage(&stored), req); err != nil {
		t.Fatal(err)
	}
	req.Header.Set("ce-traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\x01")
	_, err = cloudevent.FromRequest(req)
	if de := dispatch.AsError(err); err == nil || de.Code != dispatch.CodeInvalidArgument || de.Field != "traceparent" {
		t.Errorf("control character in ce-traceparent: %v; want invalid_argument on traceparent", err)
	}
}
