package function_test

import (
	"net/http"
	"testing"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/internal/testkit/fntest"
)

// TestForgedEventsAreRefused: events without a signature of flagdown's publishers (none, another
// key's, a malformed one, a valid signature taken from the same event for another ride, or the signed event with altered data) get
// 401 and change nothing — no processed_events row, no offer, no outbox row, no Redis key — so the
// real event with the same id is processed afterwards. Eight forged retries cannot make the ride
// UNMATCHED.
func TestForgedEventsAreRefused(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	env.Ping(t, "d-1", fntest.Offset(pickup, 100, 0))
	rideID := env.CreateRide(t, "r-1", pickup, dropoff)
	before := env.Snapshot(t)

	requested := fntest.Event{ID: "evt-requested-" + rideID, Source: "/flagdown/order-create", Type: events.RideRequested, Subject: rideID}
	fntest.SendForgeries(t, env.Match, requested)
	for range 8 {
		fntest.SendForgeries(t, env.Match, fntest.Event{ID: "evt-retry-" + rideID, Source: "/flagdown/expiry-notification", Type: events.RideRetry, Subject: rideID})
	}
	if diff := before.Diff(env.Snapshot(t)); diff != "" {
		t.Fatalf("forged events changed state: %s", diff)
	}
	if n := env.Count(t, `SELECT count(*) FROM processed_events`); n != 0 {
		t.Fatalf("processed_events rows = %d after forged events, want 0", n)
	}

	if got, want := env.MatchEvent(t, requested), "offered"; got != want {
		t.Fatalf("the signed event with the forged id: outcome %q, want %q", got, want)
	}
	if got := env.OfferedDriver(t, rideID); got != "d-1" {
		t.Errorf("offered driver = %q, want d-1", got)
	}
	if n := env.Count(t, `SELECT count(*) FROM processed_events`); n != 1 {
		t.Errorf("processed_events rows = %d after the signed event, want 1", n)
	}
	if got := env.GetRide(t, rideID)["status"]; got != "REQUESTED" {
		t.Errorf("ride status = %v, want REQUESTED", got)
	}
}

// TestEventsInStructuredModeAreVerifiedToo: the signature is an extension attribute, so a
// structured-mode event (how JetStream stores it) carries it as a member of the envelope.
func TestEventsInStructuredModeAreVerifiedToo(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	env.Ping(t, "d-1", fntest.Offset(pickup, 100, 0))
	rideID := env.CreateRide(t, "r-1", pickup, dropoff)
	ev := fntest.Event{Source: "/flagdown/order-create", Subject: rideID}
	unsigned := fntest.BuildEvent(t, ev)
	if status, body := fntest.Do(t, env.Match, http.MethodPost, "/", unsigned, map[string]string{"Content-Type": "application/cloudevents+json"}); status != http.StatusUnauthorized {
		t.Fatalf("unsigned structured event: %d %v, want 401", status, body)
	}
	signed := unsigned.Clone()
	if err := fntest.SignForTest(&signed); err != nil {
		t.Fatal(err)
	}
	status, body := fntest.Do(t, env.Match, http.MethodPost, "/", signed, map[string]string{"Content-Type": "application/cloudevents+json"})
	if status != http.StatusOK || body["outcome"] != "offered" {
		t.Fatalf("signed structured event: %d %v, want 200 offered", status, body)
	}
}
