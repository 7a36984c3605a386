package function_test

import (
	"testing"
	"time"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/internal/testkit/fntest"
	"github.com/flagdown/flagdown/shared/config"
)

// TestForgedExpiriesAreRefused: a forged expiry (no signature, another secret's, malformed, or a
// valid signature of another key's expiry) gets 401 and records nothing, so the real expiry with
// the same deterministic id still takes effect afterwards.
func TestForgedExpiriesAreRefused(t *testing.T) {
	t.Parallel()
	env := fntest.NewTimeoutEnv(t, func(c *config.Config) { c.OfferWindow = 3 * time.Second })
	env.Ping(t, "d-1", fntest.Offset(pickup, 100, 0))
	rideID := offered(t, env, "r-1", pickup, "d-1")
	processed := env.Count(t, `SELECT count(*) FROM processed_events`)
	before := env.Snapshot(t)

	real := env.ExpiredEvent("offer:d-1")
	real.ID = "exp-deterministic-" + rideID
	fntest.SendForgeries(t, env.Expiry, real)
	fntest.SendForgeries(t, env.Expiry, env.ExpiredEvent("hb:d-1"))
	if diff := before.Diff(env.Snapshot(t)); diff != "" {
		t.Fatalf("forged expiries changed state: %s", diff)
	}
	if n := env.Count(t, `SELECT count(*) FROM processed_events`); n != processed {
		t.Fatalf("processed_events rows = %d after forged expiries, want %d", n, processed)
	}
	if n := env.CountOutbox(t, events.RideOfferExpired, rideID); n != 0 {
		t.Fatalf("ride.offer.expired rows = %d after forged expiries, want 0", n)
	}

	fntest.Eventually(t, wait, "the offer lock expires", func() bool { return !env.KeyExists(t, "offer:d-1") })
	if got, want := env.Expire(t, real), "done"; got != want {
		t.Fatalf("the signed expiry with the forged id: outcome %q, want %q", got, want)
	}
	if n := env.CountOutbox(t, events.RideOfferExpired, rideID); n != 1 {
		t.Errorf("ride.offer.expired rows = %d after the signed expiry, want 1", n)
	}
}
