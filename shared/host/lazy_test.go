package host_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/host"
)

// TestLazyRetriesStartUp: while a dependency is down the OpenFaaS entry point answers 503
// unavailable, and once it is up the handler is built (the failure was not cached).
func TestLazyRetriesStartUp(t *testing.T) {
	redisURL, dbURL := testkit.RedisURL(), testkit.DatabaseURL()
	t.Setenv("REDIS_URL", "redis://127.0.0.1:1/0") // nothing listens on port 1
	t.Setenv("DATABASE_URL", dbURL)
	built := 0
	h := host.NewLazy(func(d *host.Deps) http.Handler {
		built++
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	})

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if got, want := rec.Code, http.StatusServiceUnavailable; got != want {
		t.Fatalf("status with Redis down = %d, want %d", got, want)
	}
	var body struct {
		Error struct{ Code string } `json:"error"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.Error.Code != "unavailable" {
		t.Fatalf("body %s: want error code unavailable", rec.Body)
	}

	t.Setenv("REDIS_URL", redisURL)
	for i := 0; i < 2; i++ {
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		if got, want := rec.Code, http.StatusTeapot; got != want {
			t.Fatalf("status with Redis up = %d, want %d", got, want)
		}
	}
	if built != 1 {
		t.Errorf("handler built %d times, want once per process", built)
	}
}
