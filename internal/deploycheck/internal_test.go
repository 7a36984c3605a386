package deploycheck_test

import (
	"slices"
	"testing"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/internal/deploycheck"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/internalauth"
)

// Secret files of the internal credentials (shared/internalauth).
var (
	signingKeyFile = config.SecretFileName(internalauth.SigningKeyVariable)
	verifyKeysFile = config.SecretFileName(internalauth.VerifyKeysVariable)
	tokenFile      = config.SecretFileName(internalauth.TokenVariable)
)

// internalSecrets are the internal credential files a function must get: the public keys when
// events trigger it, the bearer token when internal calls that are not events reach it (reconcile's
// cron, notify's gateway integrations). No function gets the signing key.
func internalSecrets(function string) []string {
	var out []string
	if len(events.TypesFor(function)) > 0 {
		out = append(out, verifyKeysFile)
	}
	if function == "reconcile" || function == "notify" {
		out = append(out, tokenFile)
	}
	return out
}

// TestInternalFunctionsAreClosed: every event-triggered function gets the public keys and
// reconcile and notify the bearer token, and those are cluster-local Knative Services; no function
// gets the signing key, and client-facing functions get none of the three; the relay and the
// expiry source get the signing key and nothing else of the three, on both platforms.
func TestInternalFunctionsAreClosed(t *testing.T) {
	r := load(t)
	services := r.byKind(r.knative, "Service")
	for _, n := range r.functions {
		want := internalSecrets(n)
		var got []string
		for _, s := range r.stack.Functions[n].Secrets {
			if s == signingKeyFile || s == verifyKeysFile || s == tokenFile {
				got = append(got, s)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("stack.yml %s: internal secrets %v, want %v", n, got, want)
		}
		internal := len(want) > 0
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
			keys := secretKeys(m)
			if !slices.Contains(keys, signingKeyFile) {
				t.Errorf("%s %s: secret keys %v lack %s (it signs every event)", dir, name, keys, signingKeyFile)
			}
			if slices.Contains(keys, tokenFile) || slices.Contains(keys, verifyKeysFile) {
				t.Errorf("%s %s: secret keys %v: a publisher needs only %s", dir, name, keys, signingKeyFile)
			}
		}
		for _, m := range ms {
			if n := m.Name(); n != "flagdown-relay" && n != "flagdown-expiry-source" && slices.Contains(secretKeys(m), signingKeyFile) {
				t.Errorf("%s %s %s: mounts %s; only the relay and the expiry source may sign events", dir, m.Kind(), n, signingKeyFile)
			}
		}
	}
}
