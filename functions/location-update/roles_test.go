package function_test

import (
	"net/http"
	"testing"

	"github.com/flagdown/flagdown/internal/testkit/fntest"
	"github.com/flagdown/flagdown/shared/auth"
)

// TestPingBatchesAreTheServiceRoles: the gateway aggregator's batches (pings of many drivers, each
// naming its driver_id) are the service role's; an operator (ops) views and may not ping as any
// driver (take him offline, invent drivers), alone or in a batch. A refused call writes nothing.
func TestPingBatchesAreTheServiceRoles(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	ping := func(driver, status string) fntest.JSON {
		p := fntest.JSON{"lat": midtown.Lat, "lng": midtown.Lng, "status": status}
		if driver != "" {
			p["driver_id"] = driver
		}
		return p
	}
	service := env.As(auth.Role("service"), "gateway-aggregator")
	if status, body := fntest.Do(t, env.Location, http.MethodPost, "/", fntest.JSON{"pings": []fntest.JSON{ping("d-2", "available"), ping("d-3", "available")}}, service); status != http.StatusOK {
		t.Fatalf("service batch for d-2, d-3: %d %v, want 200", status, body)
	}
	deny := []struct {
		name   string
		body   any
		h      map[string]string
		status int
		field  string
	}{
		{"ops takes d-2 offline", ping("d-2", "offline"), env.Ops(), 403, "role"},
		{"ops invents a driver", ping("d-invented", "available"), env.Ops(), 403, "role"},
		{"ops sends a batch", fntest.JSON{"pings": []fntest.JSON{ping("d-2", "offline"), ping("d-3", "offline")}}, env.Ops(), 403, "role"},
		{"service ping without driver_id", ping("", "available"), service, 400, "driver_id"},
		{"admin pings", ping("d-2", "offline"), env.As(auth.Role("admin"), "root"), 403, "role"},
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
