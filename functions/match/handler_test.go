package function_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/internal/testkit/fntest"
	"github.com/flagdown/flagdown/shared/dispatch"
)

var (
	pickup  = dispatch.Point{Lat: 40.7549, Lng: -73.9840}
	dropoff = dispatch.Point{Lat: 40.7306, Lng: -73.9866}
)

func TestTwoRidesMatchedAtOnceAgainstOneDriverOfferHimOnce(t *testing.T) {
	t.Parallel()
	for round := range 5 {
		t.Run(fmt.Sprintf("round %d", round), func(t *testing.T) {
			t.Parallel()
			env := fntest.NewEnv(t, nil)
			env.Ping(t, "d-only", fntest.Offset(pickup, 100, 0))
			rides := []string{
				env.CreateRide(t, "r-a", pickup, dropoff),
				env.CreateRide(t, "r-b", fntest.Offset(pickup, 0, 80), dropoff),
			}
			outcomes := make([]string, len(rides))
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i, id := range rides {
				wg.Go(func() {
					<-start
					outcomes[i] = env.MatchRide(t, id)
				})
			}
			close(start)
			wg.Wait()
			got := map[string]int{}
			for _, o := range outcomes {
				got[o]++
			}
			if got["offered"] != 1 || got["no_driver"] != 1 {
				t.Errorf("outcomes = %v, want one offered and one no_driver", outcomes)
			}
			if got, want := env.Count(t, `SELECT count(*) FROM offers WHERE driver_id = 'd-only' AND status = 'PENDING'`), 1; got != want {
				t.Errorf("pending offers for the driver = %d, want %d", got, want)
			}
			if got, want := env.Count(t, `SELECT count(*) FROM outbox WHERE type = $1`, events.RideOffered), 1; got != want {
				t.Errorf("ride.offered outbox rows = %d, want %d", got, want)
			}
		})
	}
}

func TestReplayingTheSameEventChangesNothing(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	env.Ping(t, "d-1", fntest.Offset(pickup, 100, 0))
	rideID := env.CreateRide(t, "r-1", pickup, dropoff)
	ev := fntest.Event{ID: "evt-replay", Source: "/flagdown/order-create", Subject: rideID}
	if got, want := env.MatchEvent(t, ev), "offered"; got != want {
		t.Fatalf("first delivery = %q, want %q", got, want)
	}
	before := env.Snapshot(t)
	if got, want := env.MatchEvent(t, ev), "duplicate"; got != want {
		t.Errorf("second delivery = %q, want %q", got, want)
	}
	if diff := before.Diff(env.Snapshot(t)); diff != "" {
		t.Errorf("the replay changed something: %s", diff)
	}
	// The same id from another source is another event: handled, but the ride already has a live offer.
	ev.Source = "/other"
	if got, want := env.MatchEvent(t, ev), "not_needed"; got != want {
		t.Errorf("same id, other source = %q, want %q", got, want)
	}
}

func TestMatchOutcomes(t *testing.T) {
	t.Parallel()

	t.Run("the nearest of several drivers gets the offer", func(t *testing.T) {
		t.Parallel()
		env := fntest.NewEnv(t, nil)
		for _, d := range []struct {
			id     string
			dy, dx float64
		}{{"d-far", 1500, 0}, {"d-700", 0, -700}, {"d-near", -120, 0}, {"d-300", 300, 0}, {"d-450", 0, 450}} {
			env.Ping(t, d.id, fntest.Offset(pickup, d.dy, d.dx))
		}
		rideID := env.CreateRide(t, "r-1", pickup, dropoff)
		if got, want := env.MatchRide(t, rideID), "offered"; got != want {
			t.Fatalf("outcome = %q, want %q", got, want)
		}
		if got, want := env.OfferedDriver(t, rideID), "d-near"; got != want {
			t.Errorf("offered driver = %q, want %q", got, want)
		}
		if env.GeoPos(t, "d-near") != nil {
			t.Errorf("the offered driver is still in the available set")
		}
		view := env.GetRide(t, rideID)
		if got, want := view["match_attempts"], 1.0; got != want {
			t.Errorf("match_attempts = %v, want %v", got, want)
		}
		if view["first_offered_at"] == nil {
			t.Errorf("first_offered_at is not set")
		}
	})

	t.Run("no driver in reach records the attempt and its reason", func(t *testing.T) {
		t.Parallel()
		env := fntest.NewEnv(t, nil)
		env.Ping(t, "d-far", fntest.Offset(pickup, 20_000, 0)) // beyond the largest radius
		rideID := env.CreateRide(t, "r-1", pickup, dropoff)
		if got, want := env.MatchRide(t, rideID), "no_driver"; got != want {
			t.Fatalf("outcome = %q, want %q", got, want)
		}
		view := env.GetRide(t, rideID)
		if got, want := view["status"], "REQUESTED"; got != want {
			t.Errorf("status = %v, want %v", got, want)
		}
		if note, _ := view["match_note"].(string); !strings.Contains(note, "no available driver") {
			t.Errorf("match_note = %q, want it to say no driver was available", note)
		}
	})

	t.Run("a ride with a live offer is not matched again", func(t *testing.T) {
		t.Parallel()
		env := fntest.NewEnv(t, nil)
		env.Ping(t, "d-1", fntest.Offset(pickup, 100, 0))
		env.Ping(t, "d-2", fntest.Offset(pickup, 200, 0))
		rideID := env.CreateRide(t, "r-1", pickup, dropoff)
		env.MatchRide(t, rideID)
		if got, want := env.MatchRide(t, rideID), "not_needed"; got != want {
			t.Errorf("outcome = %q, want %q", got, want)
		}
		if got, want := env.Count(t, `SELECT count(*) FROM offers`), 1; got != want {
			t.Errorf("offers = %d, want %d", got, want)
		}
	})

	t.Run("a cancelled ride is not matched", func(t *testing.T) {
		t.Parallel()
		env := fntest.NewEnv(t, nil)
		env.Ping(t, "d-1", fntest.Offset(pickup, 100, 0))
		rideID := env.CreateRide(t, "r-1", pickup, dropoff)
		if status, body := env.RideAction(t, rideID, "cancel", fntest.JSON{"by": "rider", "rider_id": "r-1"}); status != http.StatusOK {
			t.Fatalf("cancel: %d %v", status, body)
		}
		if got, want := env.MatchRide(t, rideID), "not_needed"; got != want {
			t.Errorf("outcome = %q, want %q", got, want)
		}
	})
}

func TestMatchRejectsWhatIsNotARideEvent(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	rideID := env.CreateRide(t, "r-1", pickup, dropoff)

	t.Run("a plain JSON request", func(t *testing.T) {
		status, body := fntest.Do(t, env.Match, http.MethodPost, "/", fntest.JSON{"ride_id": rideID}, nil)
		if got, want := status, http.StatusBadRequest; got != want {
			t.Fatalf("status = %d, want %d (%v)", got, want, body)
		}
		if got, want := fntest.ErrorOf(t, body).Field, "specversion"; got != want {
			t.Errorf("field = %q, want %q", got, want)
		}
	})
	t.Run("GET", func(t *testing.T) {
		status, body := fntest.Do(t, env.Match, http.MethodGet, "/", nil, nil)
		if got, want := status, http.StatusMethodNotAllowed; got != want {
			t.Errorf("status = %d, want %d (%v)", got, want, body)
		}
	})

	tests := []struct {
		name       string
		ev         fntest.Event
		wantStatus int
		wantField  string
	}{
		{"an unknown type", fntest.Event{Type: "com.example.pizza.ordered.v1", Subject: rideID}, 400, "type"},
		{"a flagdown type match is not triggered by", fntest.Event{Type: events.RideAccepted, Subject: rideID}, 400, "type"},
		{"no subject", fntest.Event{Subject: ""}, 400, "subject"},
		{"an unknown ride", fntest.Event{Subject: "00000000-0000-4000-8000-000000000000"}, 404, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := env.Snapshot(t)
			status, body := fntest.SendEvent(t, env.Match, tc.ev)
			if got, want := status, tc.wantStatus; got != want {
				t.Fatalf("status = %d, want %d (%v)", got, want, body)
			}
			if got, want := fntest.ErrorOf(t, body).Field, tc.wantField; got != want {
				t.Errorf("field = %q, want %q", got, want)
			}
			if diff := before.Diff(env.Snapshot(t)); diff != "" {
				t.Errorf("a rejected event wrote something: %s", diff)
			}
		})
	}
}
