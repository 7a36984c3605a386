package fntest

import (
	"net/http"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/internalauth"
)

// InternalHeaders returns the headers of an internal call that is not an event (the reconcile
// cron): Authorization: Bearer testkit.InternalSecret.
func InternalHeaders() map[string]string {
	return map[string]string{"Authorization": "Bearer " + testkit.InternalSecret}
}

// Forgeries returns what a client without the internal secret can send instead of the event ev
// describes, by name: no signature, a signature made with another secret, a malformed signature,
// and a valid signature of the same event with another subject (a captured signature replayed).
func Forgeries(t testing.TB, ev Event) map[string]event.Event {
	t.Helper()
	base := BuildEvent(t, ev)
	out := map[string]event.Event{"no signature": base.Clone()}

	other, err := internalauth.New("not-the-internal-secret-0123456789")
	if err != nil {
		t.Fatal(err)
	}
	wrong := base.Clone()
	if err := other.Sign(&wrong); err != nil {
		t.Fatal(err)
	}
	out["another secret"] = wrong

	malformed := base.Clone()
	malformed.SetExtension(internalauth.Extension, "v1=not-hex")
	out["malformed signature"] = malformed

	elsewhere := base.Clone()
	elsewhere.SetSubject(base.Subject() + "-other")
	sig, err := testkit.InternalKeys().Signature(elsewhere)
	if err != nil {
		t.Fatal(err)
	}
	replayed := base.Clone()
	replayed.SetExtension(internalauth.Extension, sig)
	out["signature of another subject"] = replayed
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

// SignForTest signs ce with testkit.InternalKeys, as the relay signs what it publishes.
func SignForTest(ce *event.Event) error { return testkit.InternalKeys().Sign(ce) }
