package deploycheck_test

import (
	"slices"
	"testing"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/internal/deploycheck"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/internalauth"
)

// TestInternalFunctionsAreClosed: every event-triggered function and reconcile gets the internal
// secret (it verifies every call with it) and is a cluster-local Knative Service; the relay and
// the expiry source get the secret on both platforms (they sign with it); client-facing functions
// do not get it.
func TestInternalFunctionsAreClosed(t *testing.T) {
	r := load(t)
	secret := config.SecretFileName(internalauth.Variable)
	services := r.byKind(r.knative, "Service")
	for _, n := range r.functions {
		internal := n == "reconcile" || len(events.TypesFor(n)) > 0
		if got := slices.Contains(r.stack.Functions[n].Secrets, secret); got != internal {
			t.Errorf("stack.yml %s: has secret %s = %v, want %v (internal function: %v)", n, secret, got, internal, internal)
		}
		vis := deploycheck.Str(services[n].Object, "metadata", "labels", "networking.knative.dev/visibility")
		if internal && vis != "cluster-local" {
			t.Errorf("deploy/knative Service %s: visibility %q, want cluster-local (internal function)", n, vis)
		}
		if !internal && vis == "cluster-local" {
			t.Errorf("deploy/knative Service %s: cluster-local, but clients call it", n)
		}
	}
	for dir, ms := range map[string][]deploycheck.Manifest{"deploy/knative": r.knative, "deploy/openfaas": r.openfaas} {
		deployments := r.byKind(ms, "Deployment")
		for _, name := range []string{"flagdown-relay", "flagdown-expiry-source"} {
			m, ok := deployments[name]
			if !ok {
				continue // TestLongRunningParts reports it
			}
			if !slices.Contains(secretKeys(m), secret) {
				t.Errorf("%s %s: secret keys %v lack %s (it signs every event)", dir, name, secretKeys(m), secret)
			}
		}
	}
}
