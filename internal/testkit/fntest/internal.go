package fntest

import (
	"net/http"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/internalauth"
)

// InternalHeaders returns the headers of an internal call that is not an event (the reconcile
// cron, the gateway's integrations): Authorization: Bearer testkit.InternalToken.
func InternalHeaders() map[string]string {
	return map[string]string{"Authorization": "Bearer " + testkit.InternalToken}
}

// Forgeries returns what a client without the signing key can send instead of the event ev
// describes, by name: no signature, a signature by a key outside the verification set (under
// another key id, and under the accepted one), a malformed signature, a signature of the old HMAC
// scheme, a valid signature of the same event with another subject (a captured signature
// replayed), and the signed event with its data altered.
func Forgeries(t testing.TB, ev Event) map[string]event.Event {
	t.Helper()
	base := BuildEvent(t, ev)
	out := map[string]event.Event{"no signature": base.Clone()}

	for name, kid := range map[string]string{"a key outside the verification set": "attacker", "another key under the accepted key id": testkit.EventSigner().KeyID()} {
		other, err := internalauth.GenerateSigner(kid)
		if err != nil {
			t.Fatal(err)
		}
		wrong := base.Clone()
		if err := other.Sign(&wrong); err != nil {
			t.Fatal(err)
		}
		out[name] = wrong
	}

	malformed := base.Clone()
	malformed.SetExtension(internalauth.KeyIDExtension, testkit.EventSigner().KeyID())
	malformed.SetExtension(internalauth.Extension, "v2=not-a-signature")
	out["malformed signature"] = malformed

	hmac := base.Clone()
	hmac.SetExtension(internalauth.Extension, "v1=0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")
	out["an HMAC signature of the old scheme"] = hmac

	elsewhere := base.Clone()
	elsewhere.SetSubject(base.Subject() + "-other")
	if err := testkit.EventSigner().Sign(&elsewhere); err != nil {
		t.Fatal(err)
	}
	replayed := base.Clone()
	replayed.SetTime(elsewhere.Time())
	replayed.SetExtension(internalauth.KeyIDExtension, elsewhere.Extensions()[internalauth.KeyIDExtension])
	replayed.SetExtension(internalauth.Extension, elsewhere.Extensions()[internalauth.Extension])
	out["signature of another subject"] = replayed

	altered := base.Clone()
	if err := testkit.EventSigner().Sign(&altered); err != nil {
		t.Fatal(err)
	}
	altered.DataEncoded = append(append([]byte(nil), altered.DataEncoded...), ' ')
	out["signed event with altered data"] = altered
	return out
}

// SendForgeries sends every Forgeries of ev to h and fails the test unless each is answered 401
// unauthenticated.
func SendForgeries(t testing.TB, h http.Handler, ev Event) {
	t.Helper()
	for name, ce := range Forgeries(t, ev) {
		status, body := SendCloudEvent(t, h, ce)
		if status != http.StatusUnauthorized {
			t.Errorf("%s: status %d, want 401: %v", name, status, body)
			continue
		}
		if e := ErrorOf(t, body); e.Code != "unauthenticated" || e.Field != internalauth.Extension {
			t.Errorf("%s: error %+v, want unauthenticated on %s", name, e, internalauth.Extension)
		}
	}
}

// SignForTest signs ce with testkit.EventSigner, as the relay signs what it publishes.
func SignForTest(ce *event.Event) error { return testkit.EventSigner().Sign(ce) }
