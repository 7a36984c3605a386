// Package internalauth owns flagdown's internal credentials: the proof that an event comes from
// flagdown's own publishers (the outbox relay, the expiry source) and that a call to an internal
// endpoint that is not an event (the reconcile cron, the WebSocket gateway's integrations) comes
// from flagdown and not from a client who found the gateway. docs/security.md holds the threat model.
//
// # Events
//
// Every event carries an Ed25519 signature in the CloudEvent extension attribute Extension
// ("flagdownsig") and the id of the signing key in KeyIDExtension ("flagdownkid"). The signature
// covers every attribute that changes what a consumer does: specversion, id, type, source, subject,
// time, datacontenttype, dataschema, the key id, and the SHA-256 digest of the data bytes exactly as
// carried. The bytes are never canonicalized: every path flagdown uses carries them unchanged (the
// relay and the expiry source build the data once; shared/broker stores the structured event with
// the data member written verbatim and the dispatcher delivers it verbatim as the binary-mode body,
// as does a Knative Broker), and a consumer hashes what it received. Extension attributes other
// than the key id are not signed: the trace context (traceparent, tracestate; shared/tracing) and
// what a broker adds (Knative's knativearrivaltime) only decide where a consumer's spans hang in a
// trace, never what it does.
//
// Only the publishers hold a private key (Signer, FLAGDOWN_EVENT_SIGNING_KEY); consumers hold only
// public keys (Verifier, FLAGDOWN_EVENT_VERIFY_KEYS: several, by key id, for rotation), so no
// consumer can produce an event another consumer accepts. A Verifier also refuses an event older
// than its maximum age (FLAGDOWN_EVENT_MAX_AGE, never shorter than MinMaxAge, the broker stream's
// retention) or stamped more than MaxFutureSkew ahead of its clock. A replay within the age is
// harmless: each consumer records (source, id) in processed_events before acting and re-reads state.
//
// # Calls that are not events
//
// The reconcile cron and the gateway's integrations send Authorization: Bearer <token> (Tokens,
// FLAGDOWN_INTERNAL_TOKEN), compared in constant time. The token is a different secret from every
// signing key: whoever holds it can call reconcile and the notify integrations, never sign an event.
package internalauth

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/flagdown/flagdown/shared/dispatch"
)

// Configuration variables (env, or the secret file config.SecretFileName(variable)).
const (
	// SigningKeyVariable holds the private key of a publisher: <key id>:<base64url Ed25519 seed
	// (32 bytes)>. Only the outbox relay and the expiry source get it.
	SigningKeyVariable = "FLAGDOWN_EVENT_SIGNING_KEY"
	// VerifyKeysVariable holds the public keys consumers accept: <key id>:<base64url Ed25519 public
	// key (32 bytes)>, several separated by commas during a rotation.
	VerifyKeysVariable = "FLAGDOWN_EVENT_VERIFY_KEYS"
	// TokenVariable holds the bearer token of internal calls that are not events: one, or several
	// separated by commas during a rotation (the first is sent, all are accepted).
	TokenVariable = "FLAGDOWN_INTERNAL_TOKEN"
)

// Extension is the CloudEvent extension attribute carrying an event's signature (HTTP binary mode:
// the header ce-flagdownsig).
const Extension = "flagdownsig"

// KeyIDExtension is the CloudEvent extension attribute naming the key that signed the event (HTTP
// binary mode: the header ce-flagdownkid); it is signed too.
const KeyIDExtension = "flagdownkid"

// MinTokenBytes is the shortest bearer token ParseTokens accepts. Use 32 random bytes in hex
// (openssl rand -hex 32, 64 characters).
const MinTokenBytes = 32

// MinMaxAge is the shortest maximum event age a deployment may configure: the retention of the
// broker's event stream (shared/broker keeps events 7 days), so that every event the broker may
// still redeliver is accepted. An older event (a dead letter replayed after a week) is refused,
// logged and counted, and reconcile repairs what it would have done.
const MinMaxAge = 7 * 24 * time.Hour

// MaxFutureSkew is how far ahead of a consumer's clock an event's time may be before the event is
// refused: clocks of publishers and consumers may differ by this much, in seconds of wall time.
const MaxFutureSkew = 5 * time.Minute

// version prefixes every signature so that the scheme can change without ambiguity.
const version = "v2="

// Reasons of refused events (dispatch.Error.Reason of Verify's errors; the label of
// metrics.EventsRefused).
const (
	ReasonUnsigned     = "unsigned"
	ReasonMalformed    = "malformed_signature"
	ReasonUnknownKey   = "unknown_key"
	ReasonBadSignature = "bad_signature"
	ReasonTooOld       = "too_old"
	ReasonFuture       = "future_time"
)

// ErrNoSigningKey is returned by Sign when no signing key is configured.
var ErrNoSigningKey = errors.New("internalauth: no event signing key configured (" + SigningKeyVariable + ")")

// ErrNoToken is returned by SetBearer when no token is configured.
var ErrNoToken = errors.New("internalauth: no internal token configured (" + TokenVariable + ")")

var keyIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// decodeKey reads the base64url (padding optional; standard alphabet accepted) bytes of a key.
func decodeKey(s string) ([]byte, error) {
	s = strings.TrimRight(s, "=")
	if b, err := base64.RawURLEncoding.DecodeString(s); err == nil {
		return b, nil
	}
	return base64.RawStdEncoding.DecodeString(s)
}

// splitKey splits <key id>:<base64 key> and checks the key id.
func splitKey(variable, entry string, size int) (string, []byte, error) {
	kid, enc, ok := strings.Cut(entry, ":")
	if !ok || !keyIDPattern.MatchString(kid) {
		return "", nil, fmt.Errorf("internalauth: %s: want <key id>:<base64url key>, the key id of 1 to 64 letters, digits, '.', '_' or '-'", variable)
	}
	b, err := decodeKey(enc)
	if err != nil || len(b) != size {
		return "", nil, fmt.Errorf("internalauth: %s: key %s is not %d bytes of base64url", variable, kid, size)
	}
	return kid, b, nil
}

// Signer signs events with one Ed25519 private key. The zero value and nil sign nothing. It never
// prints its key (String, LogValue). Signers are safe for concurrent use.
type Signer struct {
	kid string
	key ed25519.PrivateKey
}

// ParseSigner reads the value of SigningKeyVariable. An empty value gives a nil Signer and no
// error (nothing configured).
func ParseSigner(value string) (*Signer, error) {
	value = strings.TrimSpace(value)
	if value == "" {
		return nil, nil
	}
	kid, seed, err := splitKey(SigningKeyVariable, value, ed25519.SeedSize)
	if err != nil {
		return nil, err
	}
	return &Signer{kid: kid, key: ed25519.NewKeyFromSeed(seed)}, nil
}

// GenerateSigner returns a Signer over a new random key named kid (flagdown dev, chaos runs, key
// rotation: `flagdown keygen`).
func GenerateSigner(kid string) (*Signer, error) {
	if !keyIDPattern.MatchString(kid) {
		return nil, fmt.Errorf("internalauth: key id %q: 1 to 64 letters, digits, '.', '_' or '-'", kid)
	}
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("internalauth: generate key: %w", err)
	}
	return &Signer{kid: kid, key: key}, nil
}

// Configured reports whether s holds a key.
func (s *Signer) Configured() bool { return s != nil && len(s.key) == ed25519.PrivateKeySize }

// KeyID returns the id of s's key ("" when none).
func (s *Signer) KeyID() string {
	if s == nil {
		return ""
	}
	return s.kid
}

// Secret returns the value of SigningKeyVariable for s: its private key. Hand it only to a
// publisher (the environment of a child process); never log it.
func (s *Signer) Secret() string {
	if !s.Configured() {
		return ""
	}
	return s.kid + ":" + base64.RawURLEncoding.EncodeToString(s.key.Seed())
}

// VerifyKey returns s's entry of VerifyKeysVariable: <key id>:<base64url public key>.
func (s *Signer) VerifyKey() string {
	if !s.Configured() {
		return ""
	}
	return s.kid + ":" + base64.RawURLEncoding.EncodeToString(s.key.Public().(ed25519.PublicKey))
}

// String names the key without revealing it.
func (s *Signer) String() string { return "internalauth.Signer(" + s.KeyID() + ")" }

// LogValue names the key without revealing it (log/slog).
func (s *Signer) LogValue() slog.Value { return slog.StringValue(s.String()) }

// Signature returns the value of Extension for e as signed by s, whose key id e must already carry
// in KeyIDExtension (Sign sets it).
func (s *Signer) Signature(e event.Event) (string, error) {
	if !s.Configured() {
		return "", ErrNoSigningKey
	}
	return version + base64.RawURLEncoding.EncodeToString(ed25519.Sign(s.key, canonical(e))), nil
}

// Sign sets e's KeyIDExtension to s's key id and its Extension to the signature (Signature),
// replacing earlier ones. An event without a time gets the current time first: a sender that
// stamps the time later (the CloudEvents client's WithTimeNow) would otherwise change a signed
// attribute.
func (s *Signer) Sign(e *event.Event) error {
	if !s.Configured() {
		return ErrNoSigningKey
	}
	if e.Time().IsZero() {
		e.SetTime(time.Now().UTC())
	}
	e.SetExtension(KeyIDExtension, s.kid)
	sig, err := s.Signature(*e)
	if err != nil {
		return err
	}
	e.SetExtension(Extension, sig)
	return nil
}

// extensionString returns e's extension name as a string ("" when unset or not a string).
func extensionString(e event.Event, name string) string {
	s, _ := e.Extensions()[name].(string)
	return s
}

// canonical is the signed message of e: a version line, then the key id, specversion, id, type,
// source, subject, time (RFC 3339 in UTC with nanoseconds, empty when unset), datacontenttype,
// dataschema and the hex SHA-256 of the data bytes, each as <length>:<value> on its own line, so no
// two different events give the same message.
func canonical(e event.Event) []byte {
	at := ""
	if t := e.Time(); !t.IsZero() {
		at = t.UTC().Format(time.RFC3339Nano)
	}
	digest := sha256.Sum256(e.Data())
	var b strings.Builder
	b.WriteString("flagdown-event-v2\n")
	for _, v := range [...]string{
		extensionString(e, KeyIDExtension), e.SpecVersion(), e.ID(), e.Type(), e.Source(), e.Subject(), at,
		e.DataContentType(), e.DataSchema(), hex.EncodeToString(digest[:]),
	} {
		b.WriteString(strconv.Itoa(len(v)))
		b.WriteByte(':')
		b.WriteString(v)
		b.WriteByte('\n')
	}
	return []byte(b.String())
}

// Verifier checks event signatures against a set of public keys (key id → key). The zero value and
// nil verify nothing. Verifiers are safe for concurrent use.
type Verifier struct {
	keys   map[string]ed25519.PublicKey
	maxAge time.Duration
	now    func() time.Time
}

// ParseVerifier reads the value of VerifyKeysVariable (entries separated by commas, surrounding
// whitespace trimmed, empty entries ignored; a key id given twice is an error) and returns a
// Verifier refusing events older than maxAge (MinMaxAge when maxAge <= 0). An empty value gives a
// nil Verifier and no error (nothing configured).
func ParseVerifier(value string, maxAge time.Duration) (*Verifier, error) {
	v := &Verifier{keys: map[string]ed25519.PublicKey{}, maxAge: maxAge, now: time.Now}
	if v.maxAge <= 0 {
		v.maxAge = MinMaxAge
	}
	for _, entry := range strings.Split(value, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		kid, pub, err := splitKey(VerifyKeysVariable, entry, ed25519.PublicKeySize)
		if err != nil {
			return nil, err
		}
		if _, dup := v.keys[kid]; dup {
			return nil, fmt.Errorf("internalauth: %s: key id %s given twice", VerifyKeysVariable, kid)
		}
		v.keys[kid] = pub
	}
	if len(v.keys) == 0 {
		return nil, nil
	}
	return v, nil
}

// WithClock returns a copy of v that reads the time from now (tests of the age checks).
func (v *Verifier) WithClock(now func() time.Time) *Verifier {
	c := *v
	c.now = now
	return &c
}

// Configured reports whether v holds at least one key.
func (v *Verifier) Configured() bool { return v != nil && len(v.keys) > 0 }

// KeyIDs returns the ids of v's keys, sorted.
func (v *Verifier) KeyIDs() []string {
	if v == nil {
		return nil
	}
	out := make([]string, 0, len(v.keys))
	for k := range v.keys {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// MaxAge returns the age beyond which v refuses events.
func (v *Verifier) MaxAge() time.Duration {
	if v == nil {
		return 0
	}
	return v.maxAge
}

func refused(reason, msg string) error {
	return &dispatch.Error{Code: dispatch.CodeUnauthenticated, Field: Extension, Reason: reason, Message: msg}
}

// Verify checks e: a signature (Extension) by the key its KeyIDExtension names, one of v's keys,
// over the attributes and data e carries, and a time no older than v's maximum age and no more than
// MaxFutureSkew ahead. It returns nil, a CodeUnauthenticated *dispatch.Error (field flagdownsig,
// Reason one of the Reason constants), or a CodeUnavailable error when v holds no key (the
// deployment is incomplete, not the caller wrong: a trigger retries).
func (v *Verifier) Verify(e event.Event) error {
	if !v.Configured() {
		return dispatch.Unavailable("event signature check",
			errors.New("internalauth: no event verification keys configured ("+VerifyKeysVariable+")"))
	}
	raw, ok := e.Extensions()[Extension]
	if !ok {
		return refused(ReasonUnsigned, Extension+": an internal event must carry the signature of flagdown's relay or expiry source")
	}
	s, ok := raw.(string)
	sig, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(s, version))
	if !ok || !strings.HasPrefix(s, version) || err != nil || len(sig) != ed25519.SignatureSize {
		return refused(ReasonMalformed, Extension+": malformed signature")
	}
	pub, ok := v.keys[extensionString(e, KeyIDExtension)]
	if !ok {
		return refused(ReasonUnknownKey, Extension+": signed with a key this deployment does not accept ("+KeyIDExtension+")")
	}
	if !ed25519.Verify(pub, canonical(e), sig) {
		return refused(ReasonBadSignature, Extension+": signature does not match the event")
	}
	now := v.now()
	switch at := e.Time(); {
	case at.IsZero() || now.Sub(at) > v.maxAge:
		return refused(ReasonTooOld, fmt.Sprintf("%s: the event is older than %s (time %s)", Extension, v.maxAge, at.UTC().Format(time.RFC3339)))
	case at.Sub(now) > MaxFutureSkew:
		return refused(ReasonFuture, fmt.Sprintf("%s: the event's time %s is ahead of this clock by more than %s", Extension, at.UTC().Format(time.RFC3339), MaxFutureSkew))
	}
	return nil
}

// Tokens are the bearer tokens of internal calls that are not events. The zero value and nil hold
// none: they send nothing and accept nothing. Tokens are safe for concurrent use.
type Tokens struct {
	tokens [][]byte
}

// ParseTokens reads the value of TokenVariable: tokens separated by commas, surrounding whitespace
// trimmed, empty entries ignored. An empty value gives nil Tokens and no error (nothing configured);
// a token shorter than MinTokenBytes is an error.
func ParseTokens(value string) (*Tokens, error) {
	var t Tokens
	for i, s := range strings.Split(value, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if len(s) < MinTokenBytes {
			return nil, fmt.Errorf("internalauth: %s: token %d is %d bytes, at least %d needed", TokenVariable, i+1, len(s), MinTokenBytes)
		}
		t.tokens = append(t.tokens, []byte(s))
	}
	if len(t.tokens) == 0 {
		return nil, nil
	}
	return &t, nil
}

// GenerateToken returns a random token of 32 bytes in hex (flagdown dev, chaos runs).
func GenerateToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// Configured reports whether t holds at least one token.
func (t *Tokens) Configured() bool { return t != nil && len(t.tokens) > 0 }

// Contains reports whether s is one of t's tokens (configuration checks: a token must not be a
// signing key).
func (t *Tokens) Contains(s string) bool {
	if t == nil {
		return false
	}
	for _, tok := range t.tokens {
		if string(tok) == s {
			return true
		}
	}
	return false
}

// SetBearer sets r's Authorization header to Bearer <the first token>.
func (t *Tokens) SetBearer(r *http.Request) error {
	if !t.Configured() {
		return ErrNoToken
	}
	r.Header.Set("Authorization", "Bearer "+string(t.tokens[0]))
	return nil
}

// VerifyRequest checks that r carries Authorization: Bearer <one of the tokens>, compared in
// constant time. It returns nil, a CodeUnauthenticated *dispatch.Error (field Authorization) when
// the header is missing or wrong, or a CodeUnavailable error when t holds no token.
func (t *Tokens) VerifyRequest(r *http.Request) error {
	if !t.Configured() {
		return dispatch.Unavailable("internal credential check", ErrNoToken)
	}
	h := r.Header.Get("Authorization")
	scheme, token, found := strings.Cut(h, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return &dispatch.Error{Code: dispatch.CodeUnauthenticated, Field: "Authorization",
			Message: "Authorization: an internal call needs Bearer <internal token>"}
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(token)))
	okAny := 0
	for _, tok := range t.tokens {
		want := sha256.Sum256(tok)
		okAny |= subtle.ConstantTimeCompare(got[:], want[:])
	}
	if okAny != 1 {
		return &dispatch.Error{Code: dispatch.CodeUnauthenticated, Field: "Authorization",
			Message: "Authorization: the internal token is not valid"}
	}
	return nil
}
