package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/shared/cloudevent"
	"github.com/flagdown/flagdown/shared/internalauth"
)

// TestInternalEndpointsThroughTheGateway: through the gateway, a client without the run's signing
// key (flagdown dev generated a key pair; the functions hold only its public key) cannot deliver an
// event to match or expiry-notification, nor run reconcile without the run's internal token; the
// cron's token runs reconcile and signs nothing. TestOfferTimeoutRematchesThroughThePlatform
// covers the signed path end to end (relay → match, expiry source → expiry-notification → relay).
func TestInternalEndpointsThroughTheGateway(t *testing.T) {
	p := startTestPlatform(t)
	c := p.deps.Config
	if len(c.InternalToken) < 32 || c.EventVerifyKeys == "" {
		t.Fatalf("flagdown dev did not generate a token and a key pair: token %d bytes, verify keys %q", len(c.InternalToken), c.EventVerifyKeys)
	}
	if c.EventSigningKey != "" {
		t.Fatal("the functions' configuration holds the run's private key")
	}
	call := func(path string, header http.Header, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, "http://"+p.Addr()+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header = header
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b struct {
			Error struct{ Code string } `json:"error"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&b)
		return resp.StatusCode, b.Error.Code
	}
	for fn, typ := range map[string]string{"match": events.RideRequested, "expiry-notification": events.RedisKeyExpired} {
		h := http.Header{}
		h.Set("Ce-Specversion", "1.0")
		h.Set("Ce-Id", "forged-1")
		h.Set("Ce-Type", typ)
		h.Set("Ce-Source", "/flagdown/order-create")
		h.Set("Ce-Subject", "ride-1")
		h.Set("Ce-Time", time.Now().UTC().Format(time.RFC3339Nano))
		h.Set("Content-Type", "application/json")
		// What a client can make: no key, the old HMAC form, a key of its own, the token as a key.
		attacker, err := internalauth.GenerateSigner(strings.Split(c.EventVerifyKeys, ":")[0])
		if err != nil {
			t.Fatal(err)
		}
		e, err := cloudevent.New("forged-1", typ, "/flagdown/order-create", "ride-1", json.RawMessage(`{"ride_id":"ride-1"}`), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if err := attacker.Sign(&e); err != nil {
			t.Fatal(err)
		}
		for name, sig := range map[string][2]string{
			"old HMAC form":      {"", "v1=" + strings.Repeat("ab", 32)},
			"the token as a key": {attacker.KeyID(), "v2=" + c.InternalToken},
			"a key of its own":   {attacker.KeyID(), e.Extensions()[internalauth.Extension].(string)},
		} {
			h.Set("Ce-Time", e.Time().Format(time.RFC3339Nano))
			h.Set("Ce-Flagdownkid", sig[0])
			h.Set("Ce-Flagdownsig", sig[1])
			if status, code := call("/function/"+fn, h.Clone(), `{"ride_id":"ride-1"}`); status != http.StatusUnauthorized || code != "unauthenticated" {
				t.Errorf("forged event to %s (%s): %d %s, want 401 unauthenticated", fn, name, status, code)
			}
		}
	}
	if status, code := call("/function/reconcile", http.Header{}, ""); status != http.StatusUnauthorized || code != "unauthenticated" {
		t.Errorf("reconcile without the credential: %d %s, want 401", status, code)
	}
	h := http.Header{}
	h.Set("Authorization", "Bearer "+c.InternalToken)
	if status, code := call("/function/reconcile", h, ""); status != http.StatusOK {
		t.Errorf("reconcile with the cron's credential: %d %s, want 200", status, code)
	}
}
