// Package auth verifies who calls a client-facing function: the `Authorization: Bearer <JWT>`
// header, checked strictly with github.com/golang-jwt/jwt/v5, becomes an Identity (subject and role)
// in the request context. OpenFaaS's free edition has no function-level auth and Knative's default
// ingress has no JWT filter, so verification happens here, inside every client-facing function
// (Require), and nowhere else.
//
// Keys come from exactly one source: an HS256 shared secret (FLAGDOWN_JWT_SECRET, small
// deployments, `flagdown token` mints with it) or the JWKS URL of an identity provider
// (FLAGDOWN_JWKS_URL, RS256 or ES256 keys, fetched with github.com/MicahParks/keyfunc/v3). The
// accepted signing methods are pinned to the source, so `alg: none` and HS/RS confusion (an HS256
// token "signed" with a public key) are refused before any key is looked up.
package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/rsa"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"

	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/dispatch"
)

// Role is what a verified caller may do; it comes from the token's role claim.
type Role string

// The roles flagdown knows, one per duty (the table in docs/security.md says what each may call).
// A token with any other role is refused (403 permission_denied).
const (
	// RoleDriver pings as himself and answers the offers and rides assigned to him.
	RoleDriver Role = "driver"
	// RoleRider requests, reads and cancels his own rides and sees coarse nearby positions.
	RoleRider Role = "rider"
	// RoleOps views: reads any ride, sees exact nearby positions and opens the operations map. It
	// may not ping (as any driver) nor run reconcile.
	RoleOps Role = "ops"
	// RoleService is the gateway aggregator: it sends location-update batches for many drivers,
	// each ping naming its driver, and nothing else.
	RoleService Role = "service"
	// RoleAdmin runs reconcile on demand, and nothing else (the cron has the internal token).
	RoleAdmin Role = "admin"
)

// Valid reports whether r is one of RoleDriver, RoleRider, RoleOps, RoleService, RoleAdmin.
func (r Role) Valid() bool {
	switch r {
	case RoleDriver, RoleRider, RoleOps, RoleService, RoleAdmin:
		return true
	}
	return false
}

// Identity is a verified caller: the token's sub (a driver or rider id passing dispatch.ValidateID;
// for ops, service and admin the id of the operator or service) and its role.
type Identity struct {
	Subject string
	Role    Role
}

// Claims are the claims flagdown reads from a token: the registered ones (sub, iss, aud, exp, nbf,
// iat) and the role claim "role".
type Claims struct {
	Role string `json:"role"`
	jwt.RegisteredClaims
}

// UnknownKIDRefreshInterval is the least time between two JWKS fetches caused by tokens naming an
// unknown kid, so a flood of such tokens cannot hammer the identity provider.
const UnknownKIDRefreshInterval = time.Minute

// JWKSRefreshInterval is how often the JWKS is fetched in the background (key rotation).
const JWKSRefreshInterval = time.Hour

// Options configure a Verifier. Exactly one of Secret and JWKSURL must be set.
type Options struct {
	// Secret is the HS256 shared secret; only HS256 tokens are accepted with it.
	Secret []byte
	// JWKSURL is the identity provider's JWK Set; only RS256 and ES256 tokens are accepted with it.
	JWKSURL string
	// Issuer is the required iss claim; Audience a required member of the aud claim. Both must be set.
	Issuer, Audience string
	// Leeway is the clock skew allowed on exp, nbf and iat.
	Leeway time.Duration
	// MaxLifetime, when > 0, is the longest a token may be valid: one without iat, or whose exp is
	// more than MaxLifetime after its iat, is refused (a stolen long-lived token stays useful).
	MaxLifetime time.Duration
	// HTTPClient fetches the JWKS (nil: a client with a 10 s timeout).
	HTTPClient *http.Client
	// UnknownKIDRefresh is the least time between JWKS fetches for unknown kids (0:
	// UnknownKIDRefreshInterval).
	UnknownKIDRefresh time.Duration
}

// Verifier checks bearer tokens. It is safe for concurrent use; Close stops its JWKS refresh.
type Verifier struct {
	parser  *jwt.Parser
	keyfunc jwt.Keyfunc
	stop    context.CancelFunc
	// maxLifetime is Options.MaxLifetime.
	maxLifetime time.Duration
}

// FromConfig returns the Verifier cfg describes (FLAGDOWN_JWT_SECRET or FLAGDOWN_JWKS_URL, issuer,
// audience, leeway), or nil and no error when neither key source is set: then Require answers every
// request 503 unavailable, so a function without identity configuration is closed, not open.
func FromConfig(cfg *config.Config) (*Verifier, error) {
	if cfg.JWTSecret == "" && cfg.JWKSURL == "" {
		return nil, nil
	}
	return New(Options{
		Secret: []byte(cfg.JWTSecret), JWKSURL: cfg.JWKSURL,
		Issuer: cfg.JWTIssuer, Audience: cfg.JWTAudience, Leeway: cfg.JWTLeeway, MaxLifetime: cfg.JWTMaxLifetime,
	})
}

// New returns a Verifier for o. With JWKSURL it starts fetching the key set in the background; a
// provider that does not answer at start is not an error (tokens fail until a fetch succeeds).
func New(o Options) (*Verifier, error) {
	if (len(o.Secret) == 0) == (o.JWKSURL == "") {
		return nil, errors.New("auth: exactly one of a secret and a JWKS URL is required")
	}
	if o.Issuer == "" || o.Audience == "" {
		return nil, errors.New("auth: issuer and audience are required")
	}
	v := &Verifier{stop: func() {}, maxLifetime: o.MaxLifetime}
	var methods []string
	if len(o.Secret) > 0 {
		methods = []string{jwt.SigningMethodHS256.Alg()}
		secret := append([]byte(nil), o.Secret...)
		v.keyfunc = func(t *jwt.Token) (any, error) {
			if t.Method != jwt.SigningMethodHS256 {
				return nil, fmt.Errorf("signing method %s not accepted", t.Method.Alg())
			}
			return secret, nil
		}
	} else {
		methods = []string{jwt.SigningMethodRS256.Alg(), jwt.SigningMethodES256.Alg()}
		client := o.HTTPClient
		if client == nil {
			client = &http.Client{Timeout: 10 * time.Second}
		}
		every := o.UnknownKIDRefresh
		if every <= 0 {
			every = UnknownKIDRefreshInterval
		}
		ctx, cancel := context.WithCancel(context.Background())
		kf, err := keyfunc.NewDefaultOverrideCtx(ctx, []string{o.JWKSURL}, keyfunc.Override{
			Client:          client,
			RefreshInterval: JWKSRefreshInterval,
			// One fetch for an unknown kid per interval; a token arriving while the limiter is empty
			// does not wait for it (1 ms at most), it fails at once.
			RefreshUnknownKID: rate.NewLimiter(rate.Every(every), 1),
			RateLimitWaitMax:  time.Millisecond,
			// Errors are the token's (401), not worth a log line per token.
			RefreshErrorHandlerFunc: func(string) func(context.Context, error) {
				return func(context.Context, error) {}
			},
		})
		if err != nil {
			cancel()
			return nil, fmt.Errorf("auth: JWKS %s: %w", o.JWKSURL, err)
		}
		v.stop = cancel
		inner := kf.Keyfunc
		v.keyfunc = func(t *jwt.Token) (any, error) {
			key, err := inner(t)
			if err != nil {
				return nil, err
			}
			// The key must be of the token's family: an RSA key for RS256, a P-256 key for ES256.
			switch k := key.(type) {
			case *rsa.PublicKey:
				if t.Method != jwt.SigningMethodRS256 {
					return nil, fmt.Errorf("an RSA key cannot verify %s", t.Method.Alg())
				}
			case *ecdsa.PublicKey:
				if t.Method != jwt.SigningMethodES256 || k.Curve.Params().Name != "P-256" {
					return nil, fmt.Errorf("an EC key cannot verify %s", t.Method.Alg())
				}
			default:
				return nil, fmt.Errorf("key type %T not accepted", key)
			}
			return key, nil
		}
	}
	v.parser = jwt.NewParser(
		jwt.WithValidMethods(methods),
		jwt.WithExpirationRequired(),
		jwt.WithIssuer(o.Issuer),
		jwt.WithAudience(o.Audience),
		jwt.WithLeeway(o.Leeway),
		jwt.WithIssuedAt(),
		jwt.WithStrictDecoding(),
	)
	return v, nil
}

// Close stops the background JWKS refresh (nothing for a secret). Safe on a nil Verifier.
func (v *Verifier) Close() {
	if v != nil {
		v.stop()
	}
}

// Verify checks token (the part after "Bearer ") and returns its Identity. Errors are
// *dispatch.Error: CodeUnauthenticated (401) when the token is malformed, badly signed, expired, not
// yet valid, of the wrong issuer or audience, without exp, or its sub is not a valid id;
// CodePermissionDenied (403) when it is valid but its role is not one flagdown knows. Messages never
// contain the token.
func (v *Verifier) Verify(token string) (Identity, error) {
	var c Claims
	if _, err := v.parser.ParseWithClaims(token, &c, v.keyfunc); err != nil {
		return Identity{}, unauthenticated(reason(err))
	}
	if v.maxLifetime > 0 {
		if c.IssuedAt == nil || c.ExpiresAt == nil {
			return Identity{}, unauthenticated("the token lacks an iat claim (tokens may live at most " + v.maxLifetime.String() + ")")
		}
		if c.ExpiresAt.Sub(c.IssuedAt.Time) > v.maxLifetime {
			return Identity{}, unauthenticated("the token lives longer than " + v.maxLifetime.String() + " (exp - iat; FLAGDOWN_JWT_MAX_LIFETIME)")
		}
	}
	if err := dispatch.ValidateID("sub", c.Subject); err != nil {
		return Identity{}, unauthenticated("its sub claim must be a valid driver or rider id")
	}
	role := Role(c.Role)
	if !role.Valid() {
		return Identity{}, dispatch.PermissionDenied("role", "the token's role claim must be driver, rider, ops, service or admin")
	}
	return Identity{Subject: c.Subject, Role: role}, nil
}

// reason names what was wrong with a token, from the jwt error chain.
func reason(err error) string {
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		return "the token is malformed"
	case errors.Is(err, jwt.ErrTokenUnverifiable), errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return "the token's signature cannot be verified"
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return "the token lacks a required claim (exp, iss, aud)"
	case errors.Is(err, jwt.ErrTokenExpired):
		return "the token has expired"
	case errors.Is(err, jwt.ErrTokenNotValidYet), errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return "the token is not valid yet"
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return "the token's issuer is not accepted"
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return "the token's audience is not accepted"
	}
	return "the token is not valid"
}

func unauthenticated(msg string) *dispatch.Error {
	return &dispatch.Error{Code: dispatch.CodeUnauthenticated, Field: "Authorization", Message: "Authorization: " + msg}
}

// BearerToken returns the token of r's `Authorization: Bearer <token>` header (scheme
// case-insensitive), or a CodeUnauthenticated error when the header is missing, repeated or not a
// bearer token.
func BearerToken(r *http.Request) (string, error) {
	hs := r.Header.Values("Authorization")
	if len(hs) == 0 {
		return "", unauthenticated("a bearer token is required (Authorization: Bearer <JWT>)")
	}
	if len(hs) > 1 {
		return "", unauthenticated("must be sent once")
	}
	scheme, tok, ok := strings.Cut(hs[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
		return "", unauthenticated("must be Bearer <JWT>")
	}
	return strings.TrimSpace(tok), nil
}

type ctxKey struct{}

// WithIdentity returns ctx carrying id.
func WithIdentity(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, ctxKey{}, id)
}

// FromContext returns the Identity Require put in ctx, and whether there is one.
func FromContext(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(ctxKey{}).(Identity)
	return id, ok
}

// Mint returns an HS256 token for id signed with secret: iss issuer, aud [audience], sub, role, iat
// now and exp now+ttl. It is what `flagdown token`, the replay and the tests use; a deployment
// behind an identity provider never mints.
func Mint(secret []byte, issuer, audience string, id Identity, ttl time.Duration) (string, error) {
	if len(secret) == 0 || ttl <= 0 {
		return "", errors.New("auth: mint needs a secret and a positive ttl")
	}
	now := time.Now()
	return jwt.NewWithClaims(jwt.SigningMethodHS256, Claims{
		Role: string(id.Role),
		RegisteredClaims: jwt.RegisteredClaims{
			Subject: id.Subject, Issuer: issuer, Audience: jwt.ClaimStrings{audience},
			IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
		},
	}).SignedString(secret)
}
