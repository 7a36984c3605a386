package auth_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/httpx"
)

var secret = []byte("0123456789abcdef0123456789abcdef")

func hsVerifier(t *testing.T) *auth.Verifier {
	t.Helper()
	v, err := auth.New(auth.Options{Secret: secret, Issuer: "flagdown", Audience: "flagdown", Leeway: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// claims returns valid claims for role and sub, changed by edit.
func claims(role, sub string, edit func(*jwt.MapClaims)) jwt.MapClaims {
	now := time.Now()
	c := jwt.MapClaims{"sub": sub, "role": role, "iss": "flagdown", "aud": "flagdown",
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
	if edit != nil {
		edit(&c)
	}
	return c
}

func sign(t *testing.T, m jwt.SigningMethod, key any, c jwt.MapClaims, kid string) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, c)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func wantCode(t *testing.T, name string, err error, want dispatch.Code) {
	t.Helper()
	if got := dispatch.ErrorCode(err); got != want {
		t.Errorf("%s: code %q (%v), want %q", name, got, err, want)
	}
}

func TestVerifyHS256(t *testing.T) {
	v := hsVerifier(t)
	good := sign(t, jwt.SigningMethodHS256, secret, claims("driver", "d-7", nil), "")
	id, err := v.Verify(good)
	if err != nil || id != (auth.Identity{Subject: "d-7", Role: auth.RoleDriver}) {
		t.Fatalf("valid token: %v %v", id, err)
	}
	minted, err := auth.Mint(secret, "flagdown", "flagdown", auth.Identity{Subject: "r-1", Role: auth.RoleRider}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if id, err := v.Verify(minted); err != nil || id.Subject != "r-1" || id.Role != auth.RoleRider {
		t.Fatalf("minted token: %v %v", id, err)
	}

	none, err := jwt.NewWithClaims(jwt.SigningMethodNone, claims("ops", "o-1", nil)).SignedString(jwt.UnsafeAllowNoneSignatureType)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		token string
		want  dispatch.Code
	}{
		{"forged signature", sign(t, jwt.SigningMethodHS256, []byte("another-secret-another-secret-xx"), claims("driver", "d-7", nil), ""), dispatch.CodeUnauthenticated},
		{"tampered payload", tamper(good), dispatch.CodeUnauthenticated},
		{"expired", sign(t, jwt.SigningMethodHS256, secret, claims("driver", "d-7", func(c *jwt.MapClaims) { (*c)["exp"] = time.Now().Add(-time.Minute).Unix() }), ""), dispatch.CodeUnauthenticated},
		{"missing exp", sign(t, jwt.SigningMethodHS256, secret, claims("driver", "d-7", func(c *jwt.MapClaims) { delete(*c, "exp") }), ""), dispatch.CodeUnauthenticated},
		{"wrong issuer", sign(t, jwt.SigningMethodHS256, secret, claims("driver", "d-7", func(c *jwt.MapClaims) { (*c)["iss"] = "evil" }), ""), dispatch.CodeUnauthenticated},
		{"missing issuer", sign(t, jwt.SigningMethodHS256, secret, claims("driver", "d-7", func(c *jwt.MapClaims) { delete(*c, "iss") }), ""), dispatch.CodeUnauthenticated},
		{"wrong audience", sign(t, jwt.SigningMethodHS256, secret, claims("driver", "d-7", func(c *jwt.MapClaims) { (*c)["aud"] = []string{"other"} }), ""), dispatch.CodeUnauthenticated},
		{"missing audience", sign(t, jwt.SigningMethodHS256, secret, claims("driver", "d-7", func(c *jwt.MapClaims) { delete(*c, "aud") }), ""), dispatch.CodeUnauthenticated},
		{"not yet valid", sign(t, jwt.SigningMethodHS256, secret, claims("driver", "d-7", func(c *jwt.MapClaims) { (*c)["nbf"] = time.Now().Add(time.Hour).Unix() }), ""), dispatch.CodeUnauthenticated},
		{"alg none", none, dispatch.CodeUnauthenticated},
		{"HS384", sign(t, jwt.SigningMethodHS384, secret, claims("driver", "d-7", nil), ""), dispatch.CodeUnauthenticated},
		{"bad sub", sign(t, jwt.SigningMethodHS256, secret, claims("driver", "d 7{x}", nil), ""), dispatch.CodeUnauthenticated},
		{"empty sub", sign(t, jwt.SigningMethodHS256, secret, claims("driver", "", nil), ""), dispatch.CodeUnauthenticated},
		{"bad role", sign(t, jwt.SigningMethodHS256, secret, claims("root", "d-7", nil), ""), dispatch.CodePermissionDenied},
		{"missing role", sign(t, jwt.SigningMethodHS256, secret, claims("", "d-7", nil), ""), dispatch.CodePermissionDenied},
		{"garbage", "not.a.jwt", dispatch.CodeUnauthenticated},
	}
	for _, tc := range cases {
		_, err := v.Verify(tc.token)
		wantCode(t, tc.name, err, tc.want)
		if err != nil && strings.Contains(err.Error(), tc.token) {
			t.Errorf("%s: the error repeats the token", tc.name)
		}
	}
	// Within the leeway an expired token still passes; beyond it not (above).
	late := sign(t, jwt.SigningMethodHS256, secret, claims("driver", "d-7", func(c *jwt.MapClaims) { (*c)["exp"] = time.Now().Add(-10 * time.Second).Unix() }), "")
	if _, err := v.Verify(late); err != nil {
		t.Errorf("token 10s past exp within a 30s leeway: %v", err)
	}
}

// tamper changes the payload of a signed token without re-signing it (sub d-7 → d-8).
func tamper(tok string) string {
	parts := strings.Split(tok, ".")
	raw, _ := base64.RawURLEncoding.DecodeString(parts[1])
	parts[1] = base64.RawURLEncoding.EncodeToString([]byte(strings.Replace(string(raw), "d-7", "d-8", 1)))
	return strings.Join(parts, ".")
}

// jwks serves a JWK Set (RFC 7517) of an RSA and a P-256 key and counts its requests.
type jwks struct {
	srv  *httptest.Server
	rsa  *rsa.PrivateKey
	ec   *ecdsa.PrivateKey
	hits atomic.Int64
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func newJWKS(t *testing.T) *jwks {
	t.Helper()
	j := &jwks{}
	var err error
	if j.rsa, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		t.Fatal(err)
	}
	if j.ec, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		t.Fatal(err)
	}
	pad := func(n *big.Int) []byte { b := make([]byte, 32); return n.FillBytes(b) }
	ecPub, err := j.ec.PublicKey.ECDH()
	if err != nil {
		t.Fatal(err)
	}
	raw := ecPub.Bytes() // 0x04 || X || Y
	x, y := new(big.Int).SetBytes(raw[1:33]), new(big.Int).SetBytes(raw[33:])
	set := map[string]any{"keys": []map[string]any{
		{"kty": "RSA", "kid": "rsa-1", "use": "sig", "alg": "RS256",
			"n": b64(j.rsa.N.Bytes()), "e": b64(big.NewInt(int64(j.rsa.E)).Bytes())},
		{"kty": "EC", "kid": "ec-1", "use": "sig", "alg": "ES256", "crv": "P-256",
			"x": b64(pad(x)), "y": b64(pad(y))},
	}}
	body, _ := json.Marshal(set)
	j.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		j.hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	t.Cleanup(j.srv.Close)
	return j
}

func (j *jwks) verifier(t *testing.T) *auth.Verifier {
	t.Helper()
	v, err := auth.New(auth.Options{JWKSURL: j.srv.URL, Issuer: "flagdown", Audience: "flagdown", Leeway: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)
	return v
}

func TestVerifyJWKS(t *testing.T) {
	j := newJWKS(t)
	v := j.verifier(t)
	for name, tok := range map[string]string{
		"RS256": sign(t, jwt.SigningMethodRS256, j.rsa, claims("rider", "r-1", nil), "rsa-1"),
		"ES256": sign(t, jwt.SigningMethodES256, j.ec, claims("rider", "r-1", nil), "ec-1"),
	} {
		if id, err := v.Verify(tok); err != nil || id.Subject != "r-1" {
			t.Errorf("%s: %v %v", name, id, err)
		}
	}

	// HS/RS confusion: an HS256 token "signed" with the RSA public key's bytes as the secret.
	der, err := x509.MarshalPKIXPublicKey(&j.rsa.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	for name, key := range map[string][]byte{"PEM": pemKey, "DER": der, "n": j.rsa.N.Bytes()} {
		tok := sign(t, jwt.SigningMethodHS256, key, claims("ops", "o-1", nil), "rsa-1")
		_, err := v.Verify(tok)
		wantCode(t, "HS256 with the RSA public key as secret ("+name+")", err, dispatch.CodeUnauthenticated)
	}
	// An RS256 token naming the EC key, an RS256 token signed by another key, alg none.
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	wantCode(t, "RS256 with the EC kid", func() error {
		_, err := v.Verify(sign(t, jwt.SigningMethodRS256, j.rsa, claims("ops", "o-1", nil), "ec-1"))
		return err
	}(), dispatch.CodeUnauthenticated)
	wantCode(t, "RS256 forged", func() error {
		_, err := v.Verify(sign(t, jwt.SigningMethodRS256, other, claims("ops", "o-1", nil), "rsa-1"))
		return err
	}(), dispatch.CodeUnauthenticated)
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, claims("ops", "o-1", nil)).SignedString(jwt.UnsafeAllowNoneSignatureType)
	wantCode(t, "alg none (JWKS)", func() error { _, err := v.Verify(none); return err }(), dispatch.CodeUnauthenticated)
	wantCode(t, "expired (JWKS)", func() error {
		_, err := v.Verify(sign(t, jwt.SigningMethodRS256, j.rsa, claims("ops", "o-1", func(c *jwt.MapClaims) { (*c)["exp"] = time.Now().Add(-time.Hour).Unix() }), "rsa-1"))
		return err
	}(), dispatch.CodeUnauthenticated)
}

// TestUnknownKIDRefreshLimited: a flood of tokens with unknown kids costs the identity provider one
// JWKS fetch per UnknownKIDRefreshInterval, and a token never waits for the limiter.
func TestUnknownKIDRefreshLimited(t *testing.T) {
	j := newJWKS(t)
	v := j.verifier(t)
	start := j.hits.Load()
	if start != 1 {
		t.Fatalf("JWKS fetched %d times at start, want 1", start)
	}
	began := time.Now()
	for i := range 50 {
		tok := sign(t, jwt.SigningMethodRS256, j.rsa, claims("rider", "r-1", nil), "unknown-"+string(rune('a'+i%26)))
		_, err := v.Verify(tok)
		wantCode(t, "unknown kid", err, dispatch.CodeUnauthenticated)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("50 unknown-kid tokens took %s: they waited for the limiter", took)
	}
	if got := j.hits.Load() - start; got != 1 {
		t.Errorf("unknown kids caused %d JWKS fetches, want 1 (at most one per %s)", got, auth.UnknownKIDRefreshInterval)
	}
	// A known kid still verifies without a fetch.
	if _, err := v.Verify(sign(t, jwt.SigningMethodRS256, j.rsa, claims("rider", "r-1", nil), "rsa-1")); err != nil {
		t.Errorf("known kid after the flood: %v", err)
	}
	if got := j.hits.Load() - start; got != 1 {
		t.Errorf("JWKS fetches %d after a known kid, want 1", got)
	}
}

func TestRequire(t *testing.T) {
	v := hsVerifier(t)
	var seen auth.Identity
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen, _ = auth.FromContext(r.Context())
		httpx.WriteJSON(w, http.StatusOK, map[string]string{"ok": "yes"})
	})
	h := auth.Require(v, nil, next, auth.RoleDriver)
	call := func(h http.Handler, header string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/", nil)
		if header != "" {
			req.Header.Set("Authorization", header)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	driver, _ := auth.Mint(secret, "flagdown", "flagdown", auth.Identity{Subject: "d-1", Role: auth.RoleDriver}, time.Minute)
	rider, _ := auth.Mint(secret, "flagdown", "flagdown", auth.Identity{Subject: "r-1", Role: auth.RoleRider}, time.Minute)
	if rec := call(h, "Bearer "+driver); rec.Code != http.StatusOK || seen.Subject != "d-1" {
		t.Fatalf("driver token: %d %s, identity %v", rec.Code, rec.Body, seen)
	}
	if rec := call(h, "bearer "+driver); rec.Code != http.StatusOK {
		t.Errorf("lower-case scheme: %d", rec.Code)
	}
	for name, tc := range map[string]struct {
		h      http.Handler
		header string
		status int
		code   string
		www    string
	}{
		"no header":   {h, "", 401, "unauthenticated", `Bearer realm="flagdown"`},
		"basic":       {h, "Basic ZDox", 401, "unauthenticated", `Bearer realm="flagdown", error="invalid_token"`},
		"empty token": {h, "Bearer ", 401, "unauthenticated", `Bearer realm="flagdown", error="invalid_token"`},
		"forged":      {h, "Bearer " + driver + "x", 401, "unauthenticated", `Bearer realm="flagdown", error="invalid_token"`},
		"wrong role":  {h, "Bearer " + rider, 403, "permission_denied", `Bearer realm="flagdown", error="insufficient_scope"`},
		"no verifier": {auth.Require(nil, nil, next, auth.RoleDriver), "Bearer " + driver, 503, "unavailable", ""},
	} {
		rec := call(tc.h, tc.header)
		var body httpx.ErrorBody
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Errorf("%s: answer is not the JSON error: %s", name, rec.Body)
			continue
		}
		if rec.Code != tc.status || string(body.Error.Code) != tc.code || rec.Header().Get("WWW-Authenticate") != tc.www {
			t.Errorf("%s: %d %s WWW-Authenticate %q, want %d %s %q", name, rec.Code, body.Error.Code,
				rec.Header().Get("WWW-Authenticate"), tc.status, tc.code, tc.www)
		}
	}
}

// TestMaxLifetime: with a maximum lifetime, a token living longer (exp − iat) or without iat is
// refused; one within it passes.
func TestMaxLifetime(t *testing.T) {
	v, err := auth.New(auth.Options{Secret: secret, Issuer: "flagdown", Audience: "flagdown", Leeway: 30 * time.Second, MaxLifetime: 2 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(sign(t, jwt.SigningMethodHS256, secret, claims("rider", "r-1", nil), "")); err != nil {
		t.Errorf("a 1 h token: %v", err)
	}
	long := claims("rider", "r-1", func(c *jwt.MapClaims) { (*c)["exp"] = time.Now().Add(30 * 24 * time.Hour).Unix() })
	_, err = v.Verify(sign(t, jwt.SigningMethodHS256, secret, long, ""))
	wantCode(t, "a 30-day token", err, dispatch.CodeUnauthenticated)
	noIat := claims("rider", "r-1", func(c *jwt.MapClaims) { delete(*c, "iat") })
	_, err = v.Verify(sign(t, jwt.SigningMethodHS256, secret, noIat, ""))
	wantCode(t, "a token without iat", err, dispatch.CodeUnauthenticated)
}
