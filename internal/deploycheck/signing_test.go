package deploycheck_test

import (
	"crypto/ed25519"
	"encoding/base64"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/internal/deploycheck"
	"github.com/flagdown/flagdown/shared/cloudevent"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/internalauth"
)

// deployment is one workload's full configuration as the manifests give it: the plain settings of
// deploy/openfaas/env.yml and the secret files it mounts, with the values of one deployment.
type deployment struct {
	name   string
	cfg    *config.Config
	values []string // every secret value it can read
}

// deploymentSecrets are the secret files of one deployment: a publisher key pair (its public key
// as the verify keys), a token, and stand-ins for the connection URLs.
func deploymentSecrets(t *testing.T) map[string]string {
	t.Helper()
	s, err := internalauth.GenerateSigner("prod-1")
	if err != nil {
		t.Fatal(err)
	}
	return map[string]string{
		"database-url": "postgres://flagdown:pw@db:5432/flagdown", "redis-url": "redis://:pw@redis:6379/0",
		"nats-url": "nats://nats:4222", "flagdown-jwt-secret": "jwt-secret-0123456789abcdef0123456789abcdef",
		signingKeyFile: s.Secret(), verifyKeysFile: s.VerifyKey(), tokenFile: internalauth.GenerateToken(),
	}
}

// loadDeployment loads the configuration a workload mounting files gets, through shared/config's
// own loading (WithSecrets from the secrets directory, then the environment).
func loadDeployment(t *testing.T, r *repo, name string, files []string, secrets map[string]string) deployment {
	t.Helper()
	dir := t.TempDir()
	d := deployment{name: name}
	for _, f := range files {
		v, ok := secrets[f]
		if !ok {
			t.Fatalf("%s mounts %s, which this test does not know", name, f)
		}
		if err := os.WriteFile(filepath.Join(dir, f), []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		d.values = append(d.values, v)
	}
	environ := map[string]string{"FLAGDOWN_SECRETS_DIR": dir}
	for k, v := range r.envFile {
		environ[k] = v
	}
	environ, err := config.WithSecrets(environ)
	if err != nil {
		t.Fatal(err)
	}
	if d.cfg, err = config.FromEnv(environ); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return d
}

// forgeries are the events d can sign with what it holds: with its configured signing key, with
// every secret value it reads taken as a signing key (as is, under each accepted key id, its bytes
// as an Ed25519 seed), and with its verification keys' bytes as seeds.
func forgeries(t *testing.T, d deployment) []event.Event {
	t.Helper()
	var signers []*internalauth.Signer
	add := func(s *internalauth.Signer, err error) {
		if err == nil && s.Configured() {
			signers = append(signers, s)
		}
	}
	add(internalauth.ParseSigner(d.cfg.EventSigningKey))
	kids := []string{"prod-1", "dev", "default"}
	var material []string
	for _, v := range d.values {
		material = append(material, v)
		for _, entry := range strings.Split(v, ",") {
			if kid, key, ok := strings.Cut(entry, ":"); ok {
				kids = append(kids, kid)
				material = append(material, key)
			}
		}
	}
	for _, m := range material {
		add(internalauth.ParseSigner(m))
		raw := []byte(m)
		if b, err := base64.RawURLEncoding.DecodeString(m); err == nil {
			raw = b
		}
		for _, kid := range kids {
			add(internalauth.ParseSigner(kid + ":" + m))
			if len(raw) >= ed25519.SeedSize {
				add(internalauth.ParseSigner(kid + ":" + base64.RawURLEncoding.EncodeToString(raw[:ed25519.SeedSize])))
			}
		}
	}
	var out []event.Event
	for _, s := range signers {
		e, err := cloudevent.New("forged-"+d.name, events.RideCancelled, "/flagdown/ride", "9f1c1b7e-0000-4000-8000-000000000001",
			map[string]any{"ride_id": "9f1c1b7e-0000-4000-8000-000000000001", "rider_id": "r-1", "to": "CANCELLED", "version": 2147483647}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Sign(&e); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

// TestNoConsumerCanForgeEvents loads each function's full configuration (stack.yml's secrets, the
// Knative Services mount the same) and the reconcile CronJob's, and shows that nothing any of them
// holds signs an event another function accepts: consumers hold only public keys and the bearer
// token. The relay's and the expiry source's configurations, on both platforms, do sign accepted
// events (the test can fail).
func TestNoConsumerCanForgeEvents(t *testing.T) {
	r := load(t)
	secrets := deploymentSecrets(t)
	var consumers []deployment
	for _, n := range r.functions {
		consumers = append(consumers, loadDeployment(t, r, "function "+n, r.stack.Functions[n].Secrets, secrets))
	}
	publishers := map[string]deployment{}
	for dir, ms := range map[string][]deploycheck.Manifest{"deploy/openfaas": r.openfaas, "deploy/knative": r.knative} {
		for _, m := range ms {
			switch {
			case m.Kind() == "CronJob":
				consumers = append(consumers, loadDeployment(t, r, dir+" CronJob "+m.Name(), secretKeys(m), secrets))
			case m.Kind() == "Deployment" && (m.Name() == "flagdown-relay" || m.Name() == "flagdown-expiry-source"):
				publishers[dir+" "+m.Name()] = loadDeployment(t, r, dir+" "+m.Name(), secretKeys(m), secrets)
			}
		}
	}
	if len(publishers) != 4 {
		t.Fatalf("publishers found: %v, want the relay and the expiry source on both platforms", keysOf(publishers))
	}

	var verifiers []deployment
	for _, c := range consumers {
		if v, _ := internalauth.ParseVerifier(c.cfg.EventVerifyKeys, c.cfg.EventMaxAge); v.Configured() {
			verifiers = append(verifiers, c)
		}
	}
	if len(verifiers) < 3 {
		t.Fatalf("%d consumers verify events, want at least match, expiry-notification and notify", len(verifiers))
	}
	accepts := func(v deployment, e event.Event) bool {
		ver, err := internalauth.ParseVerifier(v.cfg.EventVerifyKeys, v.cfg.EventMaxAge)
		return err == nil && ver.Verify(e) == nil
	}
	for _, c := range consumers {
		if c.cfg.EventSigningKey != "" {
			t.Errorf("%s holds the event signing key", c.name)
		}
		for _, e := range forgeries(t, c) {
			for _, v := range verifiers {
				if accepts(v, e) {
					t.Errorf("%s signed an event (key id %v) that %s accepts", c.name, e.Extensions()[internalauth.KeyIDExtension], v.name)
				}
			}
		}
	}
	for name, p := range publishers {
		s, err := internalauth.ParseSigner(p.cfg.EventSigningKey)
		if err != nil || !s.Configured() {
			t.Errorf("%s: no signing key (%v)", name, err)
			continue
		}
		fs := forgeries(t, p)
		for _, v := range verifiers {
			if !accepts(v, fs[0]) {
				t.Errorf("%s signs events %s refuses", name, v.name)
			}
		}
	}
}

func keysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
