package internalauth_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
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
	tokenA = "token-a-0123456789abcdef0123456789abcdef"
	tokenB = "token-b-0123456789abcdef0123456789abcdef"
)

func signer(t *testing.T, kid string) *internalauth.Signer {
	t.Helper()
	s, err := internalauth.GenerateSigner(kid)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// verifier accepts the public keys of signers.
func verifier(t *testing.T, signers ...*internalauth.Signer) *internalauth.Verifier {
	t.Helper()
	var entries []string
	for _, s := range signers {
		entries = append(entries, s.VerifyKey())
	}
	v, err := internalauth.ParseVerifier(strings.Join(entries, ","), 0)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// sampleAt is a ride.requested event at time at.
func sampleAt(t *testing.T, at time.Time) event.Event {
	t.Helper()
	e, err := cloudevent.New("evt-1", events.RideRequested, "/flagdown/order-create", "ride-1",
		map[string]any{"ride_id": "ride-1", "rider_id": "rider-1", "version": 1}, at)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func sample(t *testing.T) event.Event { return sampleAt(t, time.Now().Add(-time.Minute)) }

// wantRefused fails unless err is unauthenticated on flagdownsig with reason.
func wantRefused(t *testing.T, what string, err error, reason string) {
	t.Helper()
	e := dispatch.AsError(err)
	if err == nil || e.Code != dispatch.CodeUnauthenticated || e.Field != internalauth.Extension || e.Reason != reason {
		t.Errorf("%s: %v (code %s, reason %q), want unauthenticated on %s with reason %s", what, err, e.Code, e.Reason, internalauth.Extension, reason)
	}
}

func TestParse(t *testing.T) {
	s := signer(t, "k1")
	if got, err := internalauth.ParseSigner(s.Secret()); err != nil || got.VerifyKey() != s.VerifyKey() || got.KeyID() != "k1" {
		t.Fatalf("ParseSigner(Secret()) = %v, %v", got, err)
	}
	if got, err := internalauth.ParseSigner(" "); err != nil || got.Configured() {
		t.Fatalf("empty signing key: %v, %v", got, err)
	}
	if v, err := internalauth.ParseVerifier("", 0); err != nil || v.Configured() {
		t.Fatalf("empty verify keys: %v, %v", v, err)
	}
	for name, value := range map[string]string{
		"no key id":          strings.SplitN(s.Secret(), ":", 2)[1],
		"bad key id":         "k 1:" + strings.SplitN(s.Secret(), ":", 2)[1],
		"short key":          "k1:AAAA",
		"not base64":         "k1:!!!!",
		"a public key entry": s.VerifyKey() + "AA",
	} {
		if _, err := internalauth.ParseSigner(value); err == nil {
			t.Errorf("ParseSigner %s: accepted", name)
		}
	}
	if _, err := internalauth.ParseVerifier(s.VerifyKey()+","+s.VerifyKey(), 0); err == nil {
		t.Error("a key id given twice was accepted")
	}
	if v := verifier(t, s, signer(t, "k2")); fmt.Sprint(v.KeyIDs()) != "[k1 k2]" || v.MaxAge() != internalauth.MinMaxAge {
		t.Errorf("verifier: keys %v, max age %s", v.KeyIDs(), v.MaxAge())
	}
	if _, err := internalauth.ParseTokens("short"); err == nil {
		t.Fatal("a 5-byte token was accepted")
	}
	if k, err := internalauth.ParseTokens(tokenA + ", " + tokenB + ","); err != nil || !k.Configured() {
		t.Fatalf("two tokens: %v", err)
	}
}

// TestSignerNeverPrintsItsKey: neither fmt nor slog shows the private key.
func TestSignerNeverPrintsItsKey(t *testing.T) {
	s := signer(t, "k1")
	seed := strings.SplitN(s.Secret(), ":", 2)[1]
	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Info("x", "signer", s)
	for _, out := range []string{fmt.Sprint(s), fmt.Sprintf("%v %+v %s", s, s, s), buf.String()} {
		if strings.Contains(out, seed) || !strings.Contains(out, "k1") {
			t.Errorf("printed %q", out)
		}
	}
}

func TestSignVerify(t *testing.T) {
	s := signer(t, "k1")
	v := verifier(t, s)
	e := sample(t)
	wantRefused(t, "unsigned", v.Verify(e), internalauth.ReasonUnsigned)
	if err := s.Sign(&e); err != nil {
		t.Fatal(err)
	}
	if err := v.Verify(e); err != nil {
		t.Fatalf("signed event: %v", err)
	}
	if e.Extensions()[internalauth.KeyIDExtension] != "k1" {
		t.Errorf("key id extension %v, want k1", e.Extensions()[internalauth.KeyIDExtension])
	}
	malformed := e.Clone()
	malformed.SetExtension(internalauth.Extension, "v2=not-a-signature")
	wantRefused(t, "malformed", v.Verify(malformed), internalauth.ReasonMalformed)
	old := e.Clone()
	old.SetExtension(internalauth.Extension, "v1="+strings.Repeat("ab", 32))
	wantRefused(t, "an HMAC signature of the old scheme", v.Verify(old), internalauth.ReasonMalformed)

	// Each signed attribute counts, the data included: a valid signature on a changed event fails.
	for name, change := range map[string]func(*event.Event){
		"id":              func(e *event.Event) { e.SetID("evt-2") },
		"type":            func(e *event.Event) { e.SetType(events.RideRetry) },
		"source":          func(e *event.Event) { e.SetSource("/flagdown/other") },
		"subject":         func(e *event.Event) { e.SetSubject("ride-2") },
		"time":            func(e *event.Event) { e.SetTime(e.Time().Add(time.Nanosecond)) },
		"datacontenttype": func(e *event.Event) { e.SetDataContentType("application/json; charset=latin1") },
		"dataschema":      func(e *event.Event) { e.SetDataSchema("https://example.com/schema") },
		"data rider_id": func(e *event.Event) {
			e.DataEncoded = []byte(`{"ride_id":"ride-1","rider_id":"attacker","version":1}`)
		},
		"data version": func(e *event.Event) {
			e.DataEncoded = []byte(`{"ride_id":"ride-1","rider_id":"rider-1","version":2147483647}`)
		},
		"data whitespace": func(e *event.Event) {
			e.DataEncoded = []byte(`{"ride_id": "ride-1","rider_id":"rider-1","version":1}`)
		},
		"key id": func(e *event.Event) { e.SetExtension(internalauth.KeyIDExtension, "k2") },
	} {
		c := e.Clone()
		change(&c)
		if err := v.Verify(c); dispatch.ErrorCode(err) != dispatch.CodeUnauthenticated {
			t.Errorf("changed %s: %v, want unauthenticated", name, err)
		}
	}
	if err := (*internalauth.Signer)(nil).Sign(&e); err == nil {
		t.Error("a nil signer signed")
	}
	if err := (*internalauth.Verifier)(nil).Verify(e); dispatch.ErrorCode(err) != dispatch.CodeUnavailable {
		t.Errorf("nil verifier: %v, want unavailable", err)
	}
}

// TestUnknownKeyRefused: an event signed with a key outside the verification set is refused, even
// when it claims the key id of an accepted key.
func TestUnknownKeyRefused(t *testing.T) {
	v := verifier(t, signer(t, "k1"))
	e := sample(t)
	if err := signer(t, "k9").Sign(&e); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, "unknown key id", v.Verify(e), internalauth.ReasonUnknownKey)
	impostor := sample(t)
	if err := signer(t, "k1").Sign(&impostor); err != nil { // another key under the accepted id
		t.Fatal(err)
	}
	wantRefused(t, "another key under an accepted id", v.Verify(impostor), internalauth.ReasonBadSignature)
}

// TestRotation: during a rotation consumers accept the old and the new key; the new key signs;
// once the old key is dropped its signatures are refused.
func TestRotation(t *testing.T) {
	old, next := signer(t, "2026-01"), signer(t, "2026-02")
	before, during, after := verifier(t, old), verifier(t, old, next), verifier(t, next)
	signedOld, signedNew := sample(t), sample(t)
	if err := old.Sign(&signedOld); err != nil {
		t.Fatal(err)
	}
	if err := next.Sign(&signedNew); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		v    *internalauth.Verifier
		e    event.Event
		want bool
	}{
		"old key, before": {before, signedOld, true}, "new key, before": {before, signedNew, false},
		"old key, during": {during, signedOld, true}, "new key, during": {during, signedNew, true},
		"old key, after": {after, signedOld, false}, "new key, after": {after, signedNew, true},
	} {
		if err := c.v.Verify(c.e); (err == nil) != c.want {
			t.Errorf("%s: %v, want accepted %v", name, err, c.want)
		}
	}
}

// TestAge: an event older than the maximum age or too far in the future is refused.
func TestAge(t *testing.T) {
	s := signer(t, "k1")
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	v := verifier(t, s).WithClock(func() time.Time { return now })
	for name, c := range map[string]struct {
		at     time.Time
		reason string
	}{
		"a second old":         {now.Add(-time.Second), ""},
		"at the maximum age":   {now.Add(-internalauth.MinMaxAge), ""},
		"past the maximum age": {now.Add(-internalauth.MinMaxAge - time.Second), internalauth.ReasonTooOld},
		"within the skew":      {now.Add(internalauth.MaxFutureSkew), ""},
		"beyond the skew":      {now.Add(internalauth.MaxFutureSkew + time.Second), internalauth.ReasonFuture},
	} {
		e := sampleAt(t, c.at)
		if err := s.Sign(&e); err != nil {
			t.Fatal(err)
		}
		if err := v.Verify(e); c.reason == "" && err != nil {
			t.Errorf("%s: %v, want accepted", name, err)
		} else if c.reason != "" {
			wantRefused(t, name, err, c.reason)
		}
	}
	longer, err := internalauth.ParseVerifier(s.VerifyKey(), 30*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	e := sampleAt(t, now.Add(-20*24*time.Hour))
	if err := s.Sign(&e); err != nil {
		t.Fatal(err)
	}
	if err := longer.WithClock(func() time.Time { return now }).Verify(e); err != nil {
		t.Errorf("20 days old with a 30-day maximum: %v", err)
	}
}

// roundTrip sends e through the broker's structured JSON (the data member written verbatim) and the
// dispatcher's binary-mode HTTP request, and decodes it as a function does.
func roundTrip(t *testing.T, e event.Event) event.Event {
	t.Helper()
	b, err := e.MarshalJSON()
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
	for _, h := range []string{internalauth.Extension, internalauth.KeyIDExtension} {
		if req.Header.Get("ce-"+h) == "" {
			t.Fatalf("binary mode lacks ce-%s: %v", h, req.Header)
		}
	}
	got, err := cloudevent.FromRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestSurvivesTransports: the signature verifies after the broker's structured JSON and the
// dispatcher's binary mode, for data as PostgreSQL's jsonb prints it (spaces) and with characters
// encoding/json would escape (<, >, &, U+2028).
func TestSurvivesTransports(t *testing.T) {
	s := signer(t, "k1")
	v := verifier(t, s)
	for name, data := range map[string]string{
		"compact": `{"ride_id":"ride-1"}`,
		"jsonb":   `{"ride_id": "ride-1", "reason": "a <b> & c", "n": 1.50}`,
		"unicode": "{\"note\": \"caf\u00e9 \u2028 \\u00e9\"}",
	} {
		e, err := cloudevent.New("evt-1", events.RideRequested, "/flagdown/order-create", "ride-1", json.RawMessage(data), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Sign(&e); err != nil {
			t.Fatal(err)
		}
		got := roundTrip(t, e)
		if string(got.Data()) != data {
			t.Errorf("%s: data %q arrived as %q", name, data, got.Data())
		}
		if err := v.Verify(got); err != nil {
			t.Errorf("%s: after JSON and binary mode: %v", name, err)
		}
	}
}

func TestVerifyRequest(t *testing.T) {
	k, err := internalauth.ParseTokens(tokenB + "," + tokenA)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"", "Bearer", "Basic " + tokenA, "Bearer " + tokenA[:20], "Bearer wrong-token-0123456789abcdef0123456789"} {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		if h != "" {
			r.Header.Set("Authorization", h)
		}
		if err := k.VerifyRequest(r); dispatch.ErrorCode(err) != dispatch.CodeUnauthenticated {
			t.Errorf("Authorization %q: %v, want unauthenticated", h, err)
		}
	}
	for _, s := range []string{tokenA, tokenB} {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		r.Header.Set("Authorization", "Bearer "+s)
		if err := k.VerifyRequest(r); err != nil {
			t.Errorf("Bearer of a configured token: %v", err)
		}
	}
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	if err := k.SetBearer(r); err != nil || k.VerifyRequest(r) != nil {
		t.Fatalf("SetBearer: %v", err)
	}
	if !strings.HasSuffix(r.Header.Get("Authorization"), tokenB) {
		t.Error("SetBearer does not send the first token")
	}
	if err := (*internalauth.Tokens)(nil).VerifyRequest(r); dispatch.ErrorCode(err) != dispatch.CodeUnavailable {
		t.Errorf("nil tokens: %v, want unavailable", err)
	}
}

// TestTokenCannotSign: the bearer token is no signing key: an event "signed" with it in every way
// the old scheme allowed is refused.
func TestTokenCannotSign(t *testing.T) {
	v := verifier(t, signer(t, "k1"))
	if _, err := internalauth.ParseSigner(tokenA); err == nil {
		t.Fatal("a token parses as a signing key")
	}
	if _, err := internalauth.ParseSigner("k1:" + tokenA); err == nil {
		t.Fatal("a token parses as a signing key under a key id")
	}
	e := sample(t)
	e.SetExtension(internalauth.KeyIDExtension, "k1")
	e.SetExtension(internalauth.Extension, "v2="+tokenA)
	if err := v.Verify(e); dispatch.ErrorCode(err) != dispatch.CodeUnauthenticated {
		t.Fatalf("the token as a signature: %v", err)
	}
}

// TestSignStampsTime: an event without a time gets one before it is signed, so a sender that
// stamps unset times (the CloudEvents client's WithTimeNow) leaves the signature valid.
func TestSignStampsTime(t *testing.T) {
	s := signer(t, "k1")
	e := sample(t)
	e.SetTime(time.Time{})
	if err := s.Sign(&e); err != nil {
		t.Fatal(err)
	}
	if e.Time().IsZero() {
		t.Fatal("Sign left the time unset")
	}
	if err := verifier(t, s).Verify(e); err != nil {
		t.Fatal(err)
	}
}

// TestTraceContextIsNotSigned: the trace context attributes (traceparent, tracestate: the
// CloudEvents distributed tracing extension) and what a broker adds (knativearrivaltime) are
// outside the signature by design: they only decide where the consumer's spans hang in a trace,
// never what the consumer does. What a tampered value may hold is still bounded: FromRequest
// refuses control characters and oversized values like any attribute's.
func TestTraceContextIsNotSigned(t *testing.T) {
	s := signer(t, "k1")
	v := verifier(t, s)
	e := sample(t)
	e.SetExtension("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	e.SetExtension("tracestate", "vendor=x")
	if err := s.Sign(&e); err != nil {
		t.Fatal(err)
	}
	got := roundTrip(t, e)
	if err := v.Verify(got); err != nil {
		t.Fatalf("with trace context after JSON and binary mode: %v", err)
	}
	for name, tamper := range map[string]func(*event.Event){
		"rewritten": func(e *event.Event) {
			e.SetExtension("traceparent", "00-11111111111111111111111111111111-2222222222222222-00")
		},
		"dropped":      func(e *event.Event) { e.SetExtension("traceparent", nil); e.SetExtension("tracestate", nil) },
		"broker added": func(e *event.Event) { e.SetExtension("knativearrivaltime", "2026-03-01T12:00:00Z") },
	} {
		c := got.Clone()
		tamper(&c)
		if err := v.Verify(c); err != nil {
			t.Errorf("trace context %s: %v; want the signature to hold", name, err)
		}
	}
	c := got.Clone()
	c.SetSubject("ride-2")
	if err := v.Verify(c); dispatch.ErrorCode(err) != dispatch.CodeUnauthenticated {
		t.Errorf("changed subject with a trace context: %v", err)
	}
}
