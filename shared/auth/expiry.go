package auth

import (
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// TokenExpiry returns the exp claim of a token Verify has accepted (it does not verify it again:
// call it only after Verify). A WebSocket connection, and a connect ticket, last no longer than
// the token they were opened with (shared/push).
func TokenExpiry(token string) (time.Time, error) {
	var c jwt.RegisteredClaims
	if _, _, err := jwt.NewParser().ParseUnverified(token, &c); err != nil {
		return time.Time{}, unauthenticated("the token cannot be read: " + err.Error())
	}
	if c.ExpiresAt == nil {
		return time.Time{}, unauthenticated("the token lacks an exp claim")
	}
	return c.ExpiresAt.Time, nil
}
