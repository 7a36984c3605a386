package function_test

import (
	"net/http"
	"testing"

	"github.com/flagdown/flagdown/internal/testkit/fntest"
	"github.com/flagdown/flagdown/shared/auth"
)

// TestReconcileOnDemandIsTheAdminsOnly: reconcile on demand is an admin's duty; an operator (ops,
// who views), the gateway aggregator (service) and drivers are refused with 403 and nothing runs.
func TestReconcileOnDemandIsTheAdminsOnly(t *testing.T) {
	t.Parallel()
	env := fntest.NewTimeoutEnv(t, nil)
	before := env.Snapshot(t)
	for _, role := range []auth.Role{auth.RoleOps, auth.Role("service"), auth.RoleDriver} {
		status, body := fntest.Do(t, env.Reconcile, http.MethodPost, "/", nil, env.As(role, "someone"))
		if status != http.StatusForbidden || fntest.ErrorOf(t, body).Code != "permission_denied" {
			t.Errorf("%s token: %d %v, want 403 permission_denied", role, status, body)
		}
	}
	if diff := before.Diff(env.Snapshot(t)); diff != "" {
		t.Fatalf("refused reconcile calls changed state: %s", diff)
	}
	if status, body := fntest.Do(t, env.Reconcile, http.MethodPost, "/", nil, env.As(auth.Role("admin"), "root")); status != http.StatusOK {
		t.Errorf("admin token: %d %v, want 200", status, body)
	}
}
