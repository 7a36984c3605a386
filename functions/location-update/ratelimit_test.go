package function_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/flagdown/flagdown/internal/testkit/fntest"
	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/config"
)

// A driver past his ping budget: a single ping answers 429 with Retry-After and changes nothing; in
// a service batch only his pings are refused (rejected rate_limited), the other drivers' are applied.
func TestPingsPastTheDriversBudget(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, func(c *config.Config) { c.RatePingsPerMin = 3 })
	p := fntest.Offset(midtown, 0, 0)
	ping := func(i int) fntest.JSON {
		return fntest.JSON{"driver_id": "d-1", "lat": p.Lat, "lng": p.Lng, "status": "available",
			"ts": time.Now().Add(time.Duration(i-10) * time.Second).UTC().Format(time.RFC3339Nano)}
	}
	for i := range 3 {
		if status, body := fntest.Do(t, env.Location, http.MethodPost, "/", ping(i), env.As(auth.RoleDriver, "d-1")); status != http.StatusOK {
			t.Fatalf("ping %d: %d %v, want 200", i+1, status, body)
		}
	}
	before := env.Snapshot(t)
	status, raw := fntest.DoRaw(t, env.Location, http.MethodPost, "/", ping(3), env.As(auth.RoleDriver, "d-1"))
	if status != http.StatusTooManyRequests {
		t.Fatalf("4th ping: status %d (%s), want 429", status, raw)
	}
	if diff := before.Diff(env.Snapshot(t)); diff != "" {
		t.Errorf("a refused ping changed state:\n%s", diff)
	}
	body4, _ := json.Marshal(ping(3))
	req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body4))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", env.As(auth.RoleDriver, "d-1")["Authorization"])
	rec := httptest.NewRecorder()
	env.Location.ServeHTTP(rec, req)
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" {
		t.Errorf("5th ping: status %d, Retry-After %q; want 429 with Retry-After", rec.Code, rec.Header().Get("Retry-After"))
	}

	q := fntest.Offset(midtown, 200, 0)
	status, body := fntest.Do(t, env.Location, http.MethodPost, "/", fntest.JSON{"pings": []fntest.JSON{
		ping(4), {"driver_id": "d-2", "lat": q.Lat, "lng": q.Lng, "status": "available"},
	}}, env.Service())
	if status != http.StatusOK {
		t.Fatalf("service batch: %d %v, want 200", status, body)
	}
	results, _ := body["results"].([]any)
	if len(results) != 2 {
		t.Fatalf("results = %v, want 2", body)
	}
	if r := results[0].(map[string]any); r["rejected"] != "rate_limited" || r["applied"] != false {
		t.Errorf("d-1 in the batch = %v, want rejected rate_limited", r)
	}
	if r := results[1].(map[string]any); r["applied"] != true {
		t.Errorf("d-2 in the batch = %v, want applied", r)
	}
	if env.GeoPos(t, "d-2") == nil {
		t.Errorf("d-2 is not in the available set")
	}
}
