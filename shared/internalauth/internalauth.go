// Package internalauth owns flagdown's internal credential: the proof that a call to an internal
// endpoint (an event-triggered function, reconcile) comes from flagdown itself (the outbox relay,
// the expiry source, the reconcile cron) and not from a client who found the gateway.
//
// Events carry an HMAC-SHA256 signature in the CloudEvent extension attribute Extension
// ("flagdownsig"), computed with a shared secret (FLAGDOWN_INTERNAL_SECRET) over a canonical string
// of the event's id, type, source, subject and time. An extension attribute is part of the event,
// so the signature travels unchanged through every broker flagdown uses (NATS JetStream stores the
// structured event; the local dispatcher and a Knative Broker deliver it in binary mode as the
// header ce-flagdownsig). The data is not signed: consumers act on the subject and re-read state,
// and a broker may re-encode JSON data. Nor are the trace context attributes traceparent and
// tracestate (shared/tracing): a broker may set or rewrite them, and they only decide where a
// consumer's spans hang in a trace, never what it does.
//
// There is no age check on the event's time: JetStream redelivers events of any age in its stream
// and dead letters may be replayed, and replaying a correctly signed event is harmless because each
// consumer records (source, id) in processed_events before acting and re-reads state.
//
// Calls that are not events (the reconcile cron) send Authorization: Bearer <secret>, compared in
// constant time.
//
// Keys holds a list of secrets for rotation: the first signs, every one verifies.
package internalauth

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/flagdown/flagdown/shared/dispatch"
)

// Variable is the environment variable (or secret file flagdown-internal-secret) holding the
// secrets: one, or several separated by commas during a rotation (the first signs, all verify).
const Variable = "FLAGDOWN_INTERNAL_SECRET"

// Extension is the CloudEvent extension attribute carrying an event's signature (HTTP binary mode:
// the header ce-flagdownsig).
const Extension = "flagdownsig"

// MinSecretBytes is the shortest secret Parse accepts. Use 32 random bytes (openssl rand -hex 32).
const MinSecretBytes = 16

// version prefixes every signature so that the scheme can change without ambiguity.
const version = "v1="

// ErrNoSecret is returned by Sign when no secret is configured.
var ErrNoSecret = errors.New("internalauth: no internal secret configured (" + Variable + ")")

// Keys are the configured internal secrets. The zero value and nil hold none: they sign nothing
// and verify nothing. Keys are safe for concurrent use.
type Keys struct {
	secrets [][]byte
}

// Parse reads the value of Variable: secrets separated by commas, surrounding whitespace trimmed,
// empty entries ignored. An empty value gives nil Keys and no error (nothing configured); a secret
// shorter than MinSecretBytes is an error.
func Parse(value string) (*Keys, error) {
	var k Keys
	for i, s := range strings.Split(value, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if len(s) < MinSecretBytes {
			return nil, fmt.Errorf("internalauth: %s: secret %d is %d bytes, at least %d needed", Variable, i+1, len(s), MinSecretBytes)
		}
		k.secrets = append(k.secrets, []byte(s))
	}
	if len(k.secrets) == 0 {
		return nil, nil
	}
	return &k, nil
}

// New returns Keys over secrets (the first signs, all verify), with the rules of Parse.
func New(secrets ...string) (*Keys, error) {
	return Parse(strings.Join(secrets, ","))
}

// Configured reports whether k holds at least one secret.
func (k *Keys) Configured() bool { return k != nil && len(k.secrets) > 0 }

// canonical is the signed string of e: a version line, then id, type, source, subject and time
// (RFC 3339 in UTC with nanoseconds, empty when unset), each as <length>:<value> on its own line,
// so no two different attribute tuples give the same string.
func canonical(e event.Event) []byte {
	at := ""
	if t := e.Time(); !t.IsZero() {
		at = t.UTC().Format(time.RFC3339Nano)
	}
	var b strings.Builder
	b.WriteString("flagdown-event-v1\n")
	for _, v := range [...]string{e.ID(), e.Type(), e.Source(), e.Subject(), at} {
		b.WriteString(strconv.Itoa(len(v)))
		b.WriteByte(':')
		b.WriteString(v)
		b.WriteByte('\n')
	}
	return []byte(b.String())
}

func mac(secret, msg []byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write(msg)
	return h.Sum(nil)
}

// Signature returns the value of Extension for e, signed with the first secret.
func (k *Keys) Signature(e event.Event) (string, error) {
	if !k.Configured() {
		return "", ErrNoSecret
	}
	return version + hex.EncodeToString(mac(k.secrets[0], canonical(e))), nil
}

// Sign sets e's Extension attribute to its signature (Signature), replacing any earlier one. An
// event without a time gets the current time first: a sender that stamps the time later (the
// CloudEvents client's WithTimeNow) would otherwise change a signed attribute.
func (k *Keys) Sign(e *event.Event) error {
	if e.Time().IsZero() {
		e.SetTime(time.Now().UTC())
	}
	sig, err := k.Signature(*e)
	if err != nil {
		return err
	}
	e.SetExtension(Extension, sig)
	return nil
}

// Signed returns a publish function that signs each event (Sign) and hands it to publish; an event
// that cannot be signed is not published. The relay and the expiry source publish through it.
func Signed(k *Keys, publish func(context.Context, event.Event) error) func(context.Context, event.Event) error {
	return func(ctx context.Context, e event.Event) error {
		if err := k.Sign(&e); err != nil {
			return err
		}
		return publish(ctx, e)
	}
}

func unauthenticated(msg string) error {
	return &dispatch.Error{Code: dispatch.CodeUnauthenticated, Field: Extension, Message: msg}
}

// notConfigured is the error of a verifier without secrets: the deployment is incomplete, not the
// caller wrong, so it is unavailable (a trigger retries) rather than unauthenticated.
func notConfigured() error {
	return dispatch.Unavailable("internal credential check", ErrNoSecret)
}

// Verify checks e's Extension attribute against every secret in constant time. It returns nil for
// a valid signature, a CodeUnauthenticated *dispatch.Error (field flagdownsig) for a missing,
// malformed or wrong one, and a CodeUnavailable error when k holds no secret.
func (k *Keys) Verify(e event.Event) error {
	if !k.Configured() {
		return notConfigured()
	}
	v, ok := e.Extensions()[Extension]
	if !ok {
		return unauthenticated(Extension + ": an internal event must carry the signature of flagdown's relay or expiry source")
	}
	s, ok := v.(string)
	if !ok {
		return unauthenticated(Extension + ": must be a string")
	}
	got, err := hex.DecodeString(strings.TrimPrefix(s, version))
	if !strings.HasPrefix(s, version) || err != nil || len(got) != sha256.Size {
		return unauthenticated(Extension + ": malformed signature")
	}
	msg := canonical(e)
	okAny := 0
	for _, secret := range k.secrets {
		okAny |= subtle.ConstantTimeCompare(got, mac(secret, msg))
	}
	if okAny != 1 {
		return unauthenticated(Extension + ": signature does not match the event")
	}
	return nil
}

// Token returns the bearer credential of calls that are not events (the reconcile cron): the first
// secret. Send it as SetBearer does.
func (k *Keys) Token() (string, error) {
	if !k.Configured() {
		return "", ErrNoSecret
	}
	return string(k.secrets[0]), nil
}

// SetBearer sets r's Authorization header to Bearer <Token>.
func (k *Keys) SetBearer(r *http.Request) error {
	t, err := k.Token()
	if err != nil {
		return err
	}
	r.Header.Set("Authorization", "Bearer "+t)
	return nil
}

// VerifyRequest checks that r carries Authorization: Bearer <one of the secrets>, compared in
// constant time. It returns nil, a CodeUnauthenticated *dispatch.Error (field Authorization) when
// the header is missing or wrong, or a CodeUnavailable error when k holds no secret.
func (k *Keys) VerifyRequest(r *http.Request) error {
	if !k.Configured() {
		return notConfigured()
	}
	h := r.Header.Get("Authorization")
	scheme, token, found := strings.Cut(h, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return &dispatch.Error{Code: dispatch.CodeUnauthenticated, Field: "Authorization",
			Message: "Authorization: an internal call needs Bearer <internal secret>"}
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(token)))
	okAny := 0
	for _, secret := range k.secrets {
		want := sha256.Sum256(secret)
		okAny |= subtle.ConstantTimeCompare(got[:], want[:])
	}
	if okAny != 1 {
		return &dispatch.Error{Code: dispatch.CodeUnauthenticated, Field: "Authorization",
			Message: "Authorization: the internal credential is not valid"}
	}
	return nil
}
