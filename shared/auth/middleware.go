package auth

import (
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"

	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/httpx"
)

// Require returns next behind bearer-token verification, the one middleware of every client-facing
// function: the request's token is verified with v and its Identity put in the request context
// (FromContext) before next runs. A missing, malformed or invalid token answers 401
// unauthenticated, a valid token whose role is not among roles 403 permission_denied, both as the
// JSON error of httpx.WriteError with a `WWW-Authenticate: Bearer` header (RFC 6750). A nil v (no
// key source configured) answers 503 unavailable: closed, never open. Tokens are never logged.
func Require(v *Verifier, log *slog.Logger, next http.Handler, roles ...Role) http.Handler {
	allowed := make([]string, len(roles))
	for i, r := range roles {
		allowed[i] = string(r)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v == nil {
			httpx.WriteError(w, r, log, dispatch.Unavailable("identity verification",
				errors.New("no key source: set FLAGDOWN_JWT_SECRET or FLAGDOWN_JWKS_URL")))
			return
		}
		tok, err := BearerToken(r)
		if err == nil {
			var id Identity
			if id, err = v.Verify(tok); err == nil {
				if !slices.Contains(roles, id.Role) {
					err = dispatch.PermissionDenied("role", "must be "+strings.Join(allowed, " or ")+" for this endpoint")
				} else {
					next.ServeHTTP(w, r.WithContext(WithIdentity(r.Context(), id)))
					return
				}
			}
		}
		switch {
		case dispatch.ErrorCode(err) == dispatch.CodePermissionDenied:
			w.Header().Set("WWW-Authenticate", `Bearer realm="flagdown", error="insufficient_scope"`)
		case r.Header.Get("Authorization") == "":
			// RFC 6750 §3.1: no error code when the request carried no credentials.
			w.Header().Set("WWW-Authenticate", `Bearer realm="flagdown"`)
		default:
			w.Header().Set("WWW-Authenticate", `Bearer realm="flagdown", error="invalid_token"`)
		}
		httpx.WriteError(w, r, log, err)
	})
}

// Must returns the Identity Require put in r's context. A handler behind Require always has one;
// without it (a handler wired without Require) the error is CodeUnauthenticated, so a wiring
// mistake refuses the request instead of acting for nobody.
func Must(r *http.Request) (Identity, error) {
	if id, ok := FromContext(r.Context()); ok {
		return id, nil
	}
	return Identity{}, unauthenticated("a bearer token is required (Authorization: Bearer <JWT>)")
}

// Self checks that an id the caller sent in field (a body or path value, e.g. "driver_id") names
// the caller himself: an empty value is the caller (ids are optional where the token says who
// acts); a value that is no valid id is 400 invalid_argument (dispatch.ValidateID), another valid
// id 403 permission_denied. It returns the id to act as.
func Self(id Identity, field, value string) (string, error) {
	if value == "" || value == id.Subject {
		return id.Subject, nil
	}
	if err := dispatch.ValidateID(field, value); err != nil {
		return "", err
	}
	return "", dispatch.PermissionDenied(field, "must be the id of the token's subject (or be left out)")
}
