package app_test

import (
	"testing"

	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/app"
	"github.com/flagdown/flagdown/shared/host"
)

// TestProcessSharesHost: the process Deps with push wrap the process host dependencies, so a
// process builds its pools once whichever of app and host asks first, and both answer the same
// value on every call; without FLAGDOWN_PUSH_ENDPOINT the pusher is off.
func TestProcessSharesHost(t *testing.T) {
	t.Setenv("REDIS_URL", testkit.RedisURL())
	t.Setenv("DATABASE_URL", testkit.DatabaseURL())
	t.Setenv("FLAGDOWN_PUSH_ENDPOINT", "")
	h, err := host.Process(t.Context())
	if err != nil {
		t.Fatalf("host.Process: %v", err)
	}
	a, err := app.Process(t.Context())
	if err != nil {
		t.Fatalf("app.Process: %v", err)
	}
	if a.Deps != h {
		t.Error("app.Process built its own host dependencies, want host.Process's")
	}
	if again, _ := app.Process(t.Context()); again != a {
		t.Error("app.Process built the Deps twice, want once per process")
	}
	if a.Push().Enabled() {
		t.Error("pusher on without FLAGDOWN_PUSH_ENDPOINT")
	}
}
