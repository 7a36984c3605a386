package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/flagdown/flagdown/events"
)

// TestInternalEndpointsThroughTheGateway: through the gateway, a client without the run's internal
// secret (flagdown dev generated one) cannot deliver an event to match or expiry-notification, nor
// run reconcile; the cron's credential runs reconcile. TestOfferTimeoutRematchesThroughThePlatform
// covers the signed path end to end (relay → match, expiry source → expiry-notification → relay).
func TestInternalEndpointsThroughTheGateway(t *testing.T) {
	p := startTestPlatform(t)
	if len(p.deps.Config.InternalSecret) < 32 {
		t.Fatalf("flagdown dev did not generate an internal secret: %q", p.deps.Config.InternalSecret)
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
		h.Set("Ce-Flagdownsig", "v1="+strings.Repeat("ab", 32))
		h.Set("Content-Type", "application/json")
		if status, code := call("/function/"+fn, h, `{"ride_id":"ride-1"}`); status != http.StatusUnauthorized || code != "unauthenticated" {
			t.Errorf("forged event to %s: %d %s, want 401 unauthenticated", fn, status, code)
		}
	}
	if status, code := call("/function/reconcile", http.Header{}, ""); status != http.StatusUnauthorized || code != "unauthenticated" {
		t.Errorf("reconcile without the credential: %d %s, want 401", status, code)
	}
	h := http.Header{}
	h.Set("Authorization", "Bearer "+p.deps.Config.InternalSecret)
	if status, code := call("/function/reconcile", h, ""); status != http.StatusOK {
		t.Errorf("reconcile with the cron's credential: %d %s, want 200", status, code)
	}
}
