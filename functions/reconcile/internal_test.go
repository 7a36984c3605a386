package function_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/flagdown/flagdown/internal/testkit/fntest"
	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/config"
)

// TestReconcileNeedsTheInternalCredential: without Authorization: Bearer <internal token> (none,
// another scheme, a wrong token) reconcile answers 401 and repairs nothing; with it, it runs. A
// deployment without FLAGDOWN_INTERNAL_TOKEN answers 503 to everybody.
func TestReconcileNeedsTheInternalCredential(t *testing.T) {
	t.Parallel()
	env := fntest.NewTimeoutEnv(t, func(c *config.Config) { c.OfferWindow = time.Second; c.ReconcileGrace = 0 })
	env.Ping(t, "d-1", fntest.Offset(pickup, 100, 0))
	rideID := offered(t, env, "r-1", "d-1")
	// The offer window passes with nobody to time it out: a repair reconcile would make.
	fntest.Eventually(t, 15*time.Second, "the offer window passes", func() bool {
		return env.Count(t, `SELECT count(*) FROM offers WHERE ride_id = $1 AND status = 'PENDING' AND expires_at < now()`, rideID) == 1 &&
			!env.KeyExists(t, "offer:d-1")
	})
	before := env.Snapshot(t)
	for name, h := range map[string]map[string]string{
		"no credential": nil,
		"basic":         {"Authorization": "Basic dXNlcjpwYXNz"},
		"wrong secret":  {"Authorization": "Bearer not-the-internal-secret-0123456789"},
	} {
		status, body := fntest.Do(t, env.Reconcile, http.MethodPost, "/", nil, h)
		if status != http.StatusUnauthorized || fntest.ErrorOf(t, body).Code != "unauthenticated" {
			t.Errorf("%s: %d %v, want 401 unauthenticated", name, status, body)
		}
	}
	if diff := before.Diff(env.Snapshot(t)); diff != "" {
		t.Fatalf("refused reconcile calls changed state: %s", diff)
	}
	status, body := fntest.Do(t, env.Reconcile, http.MethodPost, "/", nil, fntest.InternalHeaders())
	if status != http.StatusOK || body["offers_expired"] != 1.0 {
		t.Fatalf("reconcile with the credential: %d %v, want 200 with offers_expired 1", status, body)
	}

	unset := fntest.NewTimeoutEnv(t, func(c *config.Config) { c.InternalToken = "" })
	if status, body := fntest.Do(t, unset.Reconcile, http.MethodPost, "/", nil, fntest.InternalHeaders()); status != http.StatusServiceUnavailable {
		t.Errorf("no internal token configured: %d %v, want 503", status, body)
	}
}

// An administrator (role admin) may run reconcile on demand with his client token; a driver or rider
// token is refused with 403, and nothing runs.
func TestReconcileOnDemandByAnAdmin(t *testing.T) {
	t.Parallel()
	env := fntest.NewTimeoutEnv(t, nil)
	before := env.Snapshot(t)
	for _, role := range []auth.Role{auth.RoleDriver, auth.RoleRider} {
		status, body := fntest.Do(t, env.Reconcile, http.MethodPost, "/", nil, env.As(role, "someone"))
		if status != http.StatusForbidden || fntest.ErrorOf(t, body).Code != "permission_denied" {
			t.Errorf("%s token: %d %v, want 403 permission_denied", role, status, body)
		}
	}
	if diff := before.Diff(env.Snapshot(t)); diff != "" {
		t.Fatalf("refused reconcile calls changed state: %s", diff)
	}
	if status, body := fntest.Do(t, env.Reconcile, http.MethodGet, "/", nil, env.As(auth.RoleAdmin, "admin-1")); status != http.StatusOK {
		t.Errorf("admin token: %d %v, want 200", status, body)
	}
}
