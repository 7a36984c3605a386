package function_test

import (
	"net/http"
	"testing"

	"github.com/flagdown/flagdown/internal/testkit/fntest"
	"github.com/flagdown/flagdown/shared/auth"
)

// TestPingAccess: a driver pings only as himself (driver_id left out or his own), a batch only of
// his own pings; the gateway aggregator (service) may send a batch for many drivers; riders and callers without a token may not
// ping. A refused ping writes nothing.
func TestPingAccess(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	ping := func(driver string) fntest.JSON {
		p := fntest.JSON{"lat": midtown.Lat, "lng": midtown.Lng, "status": "available"}
		if driver != "" {
			p["driver_id"] = driver
		}
		return p
	}
	d1 := env.As(auth.RoleDriver, "d-1")
	if status, body := fntest.Do(t, env.Location, http.MethodPost, "/", ping(""), d1); status != http.StatusOK || body["driver_id"] != "d-1" {
		t.Fatalf("d-1 pings without driver_id: %d %v, want 200 for d-1", status, body)
	}
	if status, body := fntest.Do(t, env.Location, http.MethodPost, "/", fntest.JSON{"pings": []fntest.JSON{ping("d-1"), ping("")}}, d1); status != http.StatusOK {
		t.Fatalf("d-1 sends a batch of his own pings: %d %v", status, body)
	}
	if status, body := fntest.Do(t, env.Location, http.MethodPost, "/", fntest.JSON{"pings": []fntest.JSON{ping("d-2"), ping("d-3")}}, env.Service()); status != http.StatusOK {
		t.Fatalf("service batch for d-2, d-3: %d %v", status, body)
	}
	deny := []struct {
		name   string
		body   any
		h      map[string]string
		status int
		field  string
	}{
		{"d-1 pings as d-2", ping("d-2"), d1, 403, "driver_id"},
		{"d-1 slips d-2 into a batch", fntest.JSON{"pings": []fntest.JSON{ping("d-1"), ping("d-2")}}, d1, 403, "pings[1].driver_id"},
		{"a rider pings", ping("d-1"), env.As(auth.RoleRider, "d-1"), 403, "role"},
		{"no token", ping("d-1"), nil, 401, "Authorization"},
		{"a token signed with another secret", ping("d-1"), map[string]string{"Authorization": "Bearer " + forged(t, "d-1")}, 401, "Authorization"},
	}
	for _, tc := range deny {
		before := env.Snapshot(t)
		status, body := fntest.Do(t, env.Location, http.MethodPost, "/", tc.body, tc.h)
		if status != tc.status || fntest.ErrorOf(t, body).Field != tc.field {
			t.Errorf("%s: %d %v, want %d naming %s", tc.name, status, body, tc.status, tc.field)
		}
		if diff := before.Diff(env.Snapshot(t)); diff != "" {
			t.Errorf("%s: a refused ping changed %s", tc.name, diff)
		}
	}
}

func forged(t *testing.T, sub string) string {
	t.Helper()
	tok, err := auth.Mint([]byte("not-the-secret-not-the-secret-xx"), "flagdown", "flagdown", auth.Identity{Subject: sub, Role: auth.RoleDriver}, 3600e9)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestPingNeverCarriesAnotherDriversOffer: d-1 holds an offer; d-2's own ping answers without it,
// and d-2 cannot ping as d-1 to see it.
func TestPingNeverCarriesAnotherDriversOffer(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	env.Ping(t, "d-1", midtown)
	rideID := env.CreateRide(t, "r-1", fntest.Offset(midtown, 50, 0), fntest.Offset(midtown, 2000, 0))
	if got := env.MatchRide(t, rideID); got != "offered" {
		t.Fatalf("match: %s", got)
	}
	if body := env.Ping(t, "d-1", midtown); body["offer"] == nil {
		t.Fatalf("d-1's own ping lacks his offer: %v", body)
	}
	if body := env.Ping(t, "d-2", fntest.Offset(midtown, 10, 0)); body["offer"] != nil {
		t.Errorf("d-2's ping carries an offer: %v", body)
	}
	status, body := fntest.Do(t, env.Location, http.MethodPost, "/", fntest.JSON{"driver_id": "d-1", "lat": midtown.Lat, "lng": midtown.Lng},
		env.As(auth.RoleDriver, "d-2"))
	if status != http.StatusForbidden || body["offer"] != nil {
		t.Errorf("d-2 pinging as d-1: %d %v, want 403 without the offer", status, body)
	}
}
