package function_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/internal/testkit/fntest"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/dispatch"
)

var (
	pickup  = dispatch.Point{Lat: 40.7549, Lng: -73.9840}
	dropoff = dispatch.Point{Lat: 40.7306, Lng: -73.9866}
)

// wait is the generous bound of every "eventually" in this file: it waits for Redis to expire a
// key with a TTL of about a second, it measures nothing.
const wait = 15 * time.Second

// offered creates a ride for rider at at and matches it; it fails unless driver got the offer.
func offered(t *testing.T, env *fntest.TimeoutEnv, rider string, at dispatch.Point, driver string) string {
	t.Helper()
	rideID := env.CreateRide(t, rider, at, dropoff)
	if got, want := env.MatchRide(t, rideID), "offered"; got != want {
		t.Fatalf("match outcome = %q, want %q", got, want)
	}
	if got := env.OfferedDriver(t, rideID); got != driver {
		t.Fatalf("offered driver = %q, want %q", got, driver)
	}
	return rideID
}

// accepted is offered followed by driver's accept.
func accepted(t *testing.T, env *fntest.TimeoutEnv, rider string, at dispatch.Point, driver string) string {
	t.Helper()
	rideID := offered(t, env, rider, at, driver)
	if status, body := env.AcceptRide(t, rideID, driver); status != http.StatusOK {
		t.Fatalf("accept: %d %v", status, body)
	}
	return rideID
}

// withoutProcessed drops the processed_events count from a snapshot: a stale event is still
// recorded as processed, and that is all it may change.
func withoutProcessed(s fntest.State) fntest.State {
	delete(s.Rows, "processed_events")
	return s
}

func TestHeartbeatExpiry(t *testing.T) {
	t.Parallel()
	shortHeartbeat := func(c *config.Config) { c.HeartbeatTTL = time.Second }

	t.Run("an expired heartbeat takes the driver offline", func(t *testing.T) {
		t.Parallel()
		env := fntest.NewTimeoutEnv(t, shortHeartbeat)
		env.Ping(t, "d-1", fntest.Offset(pickup, 100, 0))
		if !env.InGeo(t, "d-1") {
			t.Fatalf("the driver is not in the available set after his ping")
		}
		fntest.Eventually(t, wait, "the heartbeat expires", func() bool { return !env.KeyExists(t, "hb:d-1") })

		if got, want := env.Expire(t, env.ExpiredEvent("hb:d-1")), "done"; got != want {
			t.Fatalf("outcome = %q, want %q", got, want)
		}
		if env.InGeo(t, "d-1") {
			t.Errorf("the driver is still in the available set")
		}
		if got, want := env.DriverField(t, "d-1", "status"), "offline"; got != want {
			t.Errorf("status = %q, want %q", got, want)
		}
		changes := env.OutboxData(t, "d-1", events.DriverStatusChanged)
		if len(changes) != 1 {
			t.Fatalf("driver.status.changed rows = %d, want 1", len(changes))
		}
		if c := changes[0]; c["from"] != "available" || c["to"] != "offline" || c["reason"] != "heartbeat_expired" {
			t.Errorf("driver.status.changed data = %v, want available → offline, reason heartbeat_expired", c)
		}
		if got := env.Count(t, `SELECT count(*) FROM outbox`); got != 1 {
			t.Errorf("outbox rows = %d, want 1", got)
		}
	})

	t.Run("a ping right after the expiry wins over the late event", func(t *testing.T) {
		t.Parallel()
		env := fntest.NewTimeoutEnv(t, shortHeartbeat)
		env.Ping(t, "d-1", fntest.Offset(pickup, 100, 0))
		fntest.Eventually(t, wait, "the heartbeat expires", func() bool { return !env.KeyExists(t, "hb:d-1") })
		env.Ping(t, "d-1", fntest.Offset(pickup, 110, 0))

		if got, want := env.Expire(t, env.ExpiredEvent("hb:d-1")), "stale"; got != want {
			t.Fatalf("outcome = %q, want %q", got, want)
		}
		if !env.InGeo(t, "d-1") {
			t.Errorf("the driver who pinged again left the available set")
		}
		if got, want := env.DriverField(t, "d-1", "status"), "available"; got != want {
			t.Errorf("status = %q, want %q", got, want)
		}
		if got := env.Count(t, `SELECT count(*) FROM outbox`); got != 0 {
			t.Errorf("outbox rows = %d, want 0", got)
		}
	})

	t.Run("the driver of an accepted ride goes offline: the ride is matched again without him", func(t *testing.T) {
		t.Parallel()
		env := fntest.NewTimeoutEnv(t, nil)
		env.Ping(t, "d-1", fntest.Offset(pickup, 100, 0))
		env.Ping(t, "d-2", fntest.Offset(pickup, 300, 0))
		rideID := accepted(t, env, "r-1", pickup, "d-1")
		env.ExpireHeartbeat(t, "d-1")

		if got, want := env.Expire(t, env.ExpiredEvent("hb:d-1")), "done"; got != want {
			t.Fatalf("outcome = %q, want %q", got, want)
		}
		view := env.GetRide(t, rideID)
		if got, want := view["status"], "REQUESTED"; got != want {
			t.Errorf("status = %v, want %v", got, want)
		}
		if view["driver_id"] != nil {
			t.Errorf("driver_id = %v, want none", view["driver_id"])
		}
		if note, _ := view["match_note"].(string); !strings.Contains(note, "offline") {
			t.Errorf("match_note = %q, want it to say the driver went offline", note)
		}
		if got := env.Count(t, `SELECT count(*) FROM rides WHERE id = $1 AND status = 'REQUESTED' AND driver_id IS NULL`, rideID); got != 1 {
			t.Errorf("rides REQUESTED without a driver = %d, want 1", got)
		}
		reopened := env.OutboxData(t, rideID, events.RideReopened)
		if len(reopened) != 1 {
			t.Fatalf("ride.reopened rows = %d, want 1", len(reopened))
		}
		r := reopened[0]
		if r["by"] != "system" || r["reason"] != "driver_offline" || r["driver_id"] != "d-1" || r["from"] != "ACCEPTED" || r["to"] != "REQUESTED" {
			t.Errorf("ride.reopened data = %v, want ACCEPTED → REQUESTED by system, reason driver_offline, driver d-1", r)
		}
		if got := env.CountOutbox(t, events.DriverStatusChanged, "d-1"); got != 1 {
			t.Errorf("driver.status.changed rows = %d, want 1", got)
		}

		// He comes back at once and is the nearest driver: the new match must still pass him over.
		env.Ping(t, "d-1", fntest.Offset(pickup, 90, 0))
		if got, want := env.MatchEvent(t, fntest.Event{Type: events.RideReopened, Subject: rideID, Data: r}), "offered"; got != want {
			t.Fatalf("match after reopen = %q, want %q", got, want)
		}
		if got, want := env.OfferedDriver(t, rideID), "d-2"; got != want {
			t.Errorf("offered driver after reopen = %q, want %q", got, want)
		}
		if got := env.Count(t, `SELECT count(*) FROM offers WHERE ride_id = $1 AND driver_id = 'd-1' AND status = 'PENDING'`, rideID); got != 0 {
			t.Errorf("pending offers of the reopened ride to d-1 = %d, want 0", got)
		}
		// The ride he lost is no longer his: back online, he is free for other rides.
		if got := env.DriverField(t, "d-1", "ride"); got != "" {
			t.Errorf("d-1's ride in Redis = %q, want none", got)
		}
		if got, want := env.DriverField(t, "d-1", "status"), "available"; got != want {
			t.Errorf("d-1's status after he came back = %q, want %q", got, want)
		}
		other := offered(t, env, "r-2", fntest.Offset(pickup, 50, 0), "d-1")
		if other == rideID {
			t.Fatalf("the same ride was created twice")
		}
	})

	t.Run("the driver of a ride in progress goes offline: one alert, the ride goes on", func(t *testing.T) {
		t.Parallel()
		env := fntest.NewTimeoutEnv(t, nil)
		env.Ping(t, "d-1", fntest.Offset(pickup, 100, 0))
		rideID := accepted(t, env, "r-1", pickup, "d-1")
		if status, body := env.RideAction(t, rideID, "start", fntest.JSON{"driver_id": "d-1"}); status != http.StatusOK {
			t.Fatalf("start: %d %v", status, body)
		}
		env.ExpireHeartbeat(t, "d-1")

		if got, want := env.Expire(t, env.ExpiredEvent("hb:d-1")), "done"; got != want {
			t.Fatalf("outcome = %q, want %q", got, want)
		}
		if got, want := env.GetRide(t, rideID)["status"], "IN_PROGRESS"; got != want {
			t.Errorf("status = %v, want %v", got, want)
		}
		alerts := env.OutboxData(t, rideID, events.RideDriverOffline)
		if len(alerts) != 1 {
			t.Fatalf("ride.driver.offline rows = %d, want 1", len(alerts))
		}
		if a := alerts[0]; a["driver_id"] != "d-1" || a["status"] != "IN_PROGRESS" {
			t.Errorf("ride.driver.offline data = %v", a)
		}
		if got := env.CountOutbox(t, events.RideReopened, rideID); got != 0 {
			t.Errorf("ride.reopened rows = %d, want 0", got)
		}

		// A second expiry of his heartbeat (a new event: say the sweep found the key gone again).
		before := withoutProcessed(env.Snapshot(t))
		if got, want := env.Expire(t, env.ExpiredEvent("hb:d-1")), "stale"; got != want {
			t.Fatalf("second expiry outcome = %q, want %q", got, want)
		}
		if diff := before.Diff(withoutProcessed(env.Snapshot(t))); diff != "" {
			t.Errorf("the second expiry changed state: %s", diff)
		}
		if got := env.CountOutbox(t, events.RideDriverOffline, rideID); got != 1 {
			t.Errorf("ride.driver.offline rows after the second expiry = %d, want 1", got)
		}
	})
}

func TestOfferLockExpiry(t *testing.T) {
	t.Parallel()

	t.Run("an offer left to expire is matched to the next driver and counts against him", func(t *testing.T) {
		t.Parallel()
		env := fntest.NewTimeoutEnv(t, func(c *config.Config) {
			c.OfferWindow = time.Second
			c.ScoreIdleBonusMPerMin = 0 // ranking by distance and misses only
		})
		env.Ping(t, "d-1-late", fntest.Offset(pickup, 100, 0))
		env.Ping(t, "d-2-next", fntest.Offset(pickup, -150, 0))
		rideID := offered(t, env, "r-1", pickup, "d-1-late")
		var offerID string
		if err := env.D.DB.Pool.QueryRow(t.Context(), `SELECT id::text FROM offers WHERE ride_id = $1`, rideID).Scan(&offerID); err != nil {
			t.Fatal(err)
		}
		fntest.Eventually(t, wait, "the offer lock expires", func() bool { return !env.KeyExists(t, "offer:d-1-late") })

		if got, want := env.Expire(t, env.ExpiredEvent("offer:d-1-late")), "done"; got != want {
			t.Fatalf("outcome = %q, want %q", got, want)
		}
		if got := env.Count(t, `SELECT count(*) FROM offers WHERE id = $1 AND status = 'EXPIRED' AND responded_at IS NOT NULL`, offerID); got != 1 {
			t.Errorf("the offer is not EXPIRED in PostgreSQL")
		}
		expired := env.OutboxData(t, rideID, events.RideOfferExpired)
		if len(expired) != 1 {
			t.Fatalf("ride.offer.expired rows = %d, want 1", len(expired))
		}
		if e := expired[0]; e["driver_id"] != "d-1-late" || e["offer_id"] != offerID {
			t.Errorf("ride.offer.expired data = %v, want driver d-1-late, offer %s", e, offerID)
		}
		if got, want := env.DriverField(t, "d-1-late", "missed"), "1"; got != want {
			t.Errorf("missed = %q, want %q", got, want)
		}
		if got, want := env.GetRide(t, rideID)["status"], "REQUESTED"; got != want {
			t.Errorf("ride status = %v, want %v", got, want)
		}

		// He is back in the available set (and still the nearest): the ride goes to the next driver.
		env.Ping(t, "d-1-late", fntest.Offset(pickup, 100, 0))
		if !env.InGeo(t, "d-1-late") {
			t.Fatalf("d-1-late is not available again after his ping")
		}
		if got, want := env.MatchEvent(t, fntest.Event{Type: events.RideOfferExpired, Subject: rideID, Data: expired[0]}), "offered"; got != want {
			t.Fatalf("match after the expiry = %q, want %q", got, want)
		}
		if got, want := env.OfferedDriver(t, rideID), "d-2-next"; got != want {
			t.Errorf("offered driver = %q, want %q", got, want)
		}

		// A later ride with d-1-late 300 m away and d-3-fresh 305 m away: without his miss d-1-late
		// would win (nearer, and first by id on a tie); with it (+250 m) d-3-fresh does.
		q := fntest.Offset(pickup, 100, 300)
		env.Ping(t, "d-3-fresh", fntest.Offset(q, 0, 305))
		other := offered(t, env, "r-2", q, "d-3-fresh")
		if got := env.Count(t, `SELECT count(*) FROM offers WHERE ride_id = $1`, other); got != 1 {
			t.Errorf("offers of the later ride = %d, want 1", got)
		}
	})

	t.Run("an offer accepted before the lock-expiry event arrives is left alone", func(t *testing.T) {
		t.Parallel()
		env := fntest.NewTimeoutEnv(t, nil)
		env.Ping(t, "d-1", fntest.Offset(pickup, 100, 0))
		rideID := accepted(t, env, "r-1", pickup, "d-1")

		before := withoutProcessed(env.Snapshot(t))
		if got, want := env.Expire(t, env.ExpiredEvent("offer:d-1")), "stale"; got != want {
			t.Fatalf("outcome = %q, want %q", got, want)
		}
		if diff := before.Diff(withoutProcessed(env.Snapshot(t))); diff != "" {
			t.Errorf("a stale offer expiry changed state: %s", diff)
		}
		if got, want := env.GetRide(t, rideID)["status"], "ACCEPTED"; got != want {
			t.Errorf("ride status = %v, want %v", got, want)
		}
		if got := env.DriverField(t, "d-1", "missed"); got != "" {
			t.Errorf("missed = %q, want none", got)
		}
	})
}

func TestRetryTimerExpiry(t *testing.T) {
	t.Parallel()

	t.Run("a requested ride is matched again", func(t *testing.T) {
		t.Parallel()
		env := fntest.NewTimeoutEnv(t, nil)
		rideID := env.CreateRide(t, "r-1", pickup, dropoff)
		if got, want := env.MatchRide(t, rideID), "no_driver"; got != want {
			t.Fatalf("match outcome = %q, want %q", got, want)
		}
		if got, want := env.Expire(t, env.ExpiredEvent("retry:"+rideID)), "done"; got != want {
			t.Fatalf("outcome = %q, want %q", got, want)
		}
		retries := env.OutboxData(t, rideID, events.RideRetry)
		if len(retries) != 1 {
			t.Fatalf("ride.retry rows = %d, want 1", len(retries))
		}
		if r := retries[0]; r["attempt"] != 1.0 || r["reason"] != "retry_timer" || r["ride_id"] != rideID {
			t.Errorf("ride.retry data = %v, want attempt 1, reason retry_timer", r)
		}
	})

	ended := map[string]func(t *testing.T, env *fntest.TimeoutEnv) string{
		"COMPLETED": func(t *testing.T, env *fntest.TimeoutEnv) string {
			env.Ping(t, "d-1", fntest.Offset(pickup, 100, 0))
			rideID := accepted(t, env, "r-1", pickup, "d-1")
			for _, action := range []string{"start", "complete"} {
				if status, body := env.RideAction(t, rideID, action, fntest.JSON{"driver_id": "d-1"}); status != http.StatusOK {
					t.Fatalf("%s: %d %v", action, status, body)
				}
			}
			return rideID
		},
		"CANCELLED": func(t *testing.T, env *fntest.TimeoutEnv) string {
			rideID := env.CreateRide(t, "r-1", pickup, dropoff)
			if status, body := env.RideAction(t, rideID, "cancel", fntest.JSON{"by": "rider", "rider_id": "r-1"}); status != http.StatusOK {
				t.Fatalf("cancel: %d %v", status, body)
			}
			return rideID
		},
	}
	for status, build := range ended {
		t.Run("a "+status+" ride is not", func(t *testing.T) {
			t.Parallel()
			env := fntest.NewTimeoutEnv(t, nil)
			rideID := build(t, env)
			before := withoutProcessed(env.Snapshot(t))
			if got, want := env.Expire(t, env.ExpiredEvent("retry:"+rideID)), "stale"; got != want {
				t.Fatalf("outcome = %q, want %q", got, want)
			}
			if diff := before.Diff(withoutProcessed(env.Snapshot(t))); diff != "" {
				t.Errorf("the retry of an ended ride changed state: %s", diff)
			}
			if got := env.GetRide(t, rideID)["status"]; got != status {
				t.Errorf("status = %v, want %v", got, status)
			}
		})
	}
}

func TestTheSameExpiryDeliveredTwiceHasOneEffect(t *testing.T) {
	t.Parallel()
	kinds := []struct {
		name string
		// setup breaks the world and returns the expired key's name.
		setup func(t *testing.T, env *fntest.TimeoutEnv) string
	}{
		{"heartbeat", func(t *testing.T, env *fntest.TimeoutEnv) string {
			env.Ping(t, "d-1", fntest.Offset(pickup, 100, 0))
			env.Ping(t, "d-2", fntest.Offset(pickup, 300, 0))
			accepted(t, env, "r-1", pickup, "d-1")
			env.ExpireHeartbeat(t, "d-1")
			return "hb:d-1"
		}},
		{"offer lock", func(t *testing.T, env *fntest.TimeoutEnv) string {
			env.Ping(t, "d-1", fntest.Offset(pickup, 100, 0))
			offered(t, env, "r-1", pickup, "d-1")
			fntest.Eventually(t, wait, "the offer lock expires", func() bool { return !env.KeyExists(t, "offer:d-1") })
			return "offer:d-1"
		}},
		{"retry timer", func(t *testing.T, env *fntest.TimeoutEnv) string {
			rideID := env.CreateRide(t, "r-1", pickup, dropoff)
			env.MatchRide(t, rideID)
			return "retry:" + rideID
		}},
	}
	for _, k := range kinds {
		t.Run(k.name+" in sequence", func(t *testing.T) {
			t.Parallel()
			env := fntest.NewTimeoutEnv(t, func(c *config.Config) { c.OfferWindow = time.Second })
			ev := env.ExpiredEvent(k.setup(t, env))
			if got, want := env.Expire(t, ev), "done"; got != want {
				t.Fatalf("first delivery: outcome = %q, want %q", got, want)
			}
			before := env.Snapshot(t)
			missed := env.DriverField(t, "d-1", "missed")
			if got, want := env.Expire(t, ev), "duplicate"; got != want {
				t.Fatalf("second delivery: outcome = %q, want %q", got, want)
			}
			if diff := before.Diff(env.Snapshot(t)); diff != "" {
				t.Errorf("the second delivery changed state: %s", diff)
			}
			if got := env.DriverField(t, "d-1", "missed"); got != missed {
				t.Errorf("missed = %q after the second delivery, want %q", got, missed)
			}
		})
		t.Run(k.name+" concurrently", func(t *testing.T) {
			t.Parallel()
			env := fntest.NewTimeoutEnv(t, func(c *config.Config) { c.OfferWindow = time.Second })
			ev := env.ExpiredEvent(k.setup(t, env))
			outboxBefore := env.Count(t, `SELECT count(*) FROM outbox`)
			const n = 6
			outcomes := make([]string, n)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					<-start
					status, body := fntest.SendEvent(t, env.Expiry, ev)
					if status != http.StatusOK {
						t.Errorf("delivery %d: status %d: %v", i, status, body)
					}
					outcomes[i], _ = body["outcome"].(string)
				})
			}
			close(start)
			wg.Wait()
			got := map[string]int{}
			for _, o := range outcomes {
				got[o]++
			}
			if got["done"] != 1 || got["duplicate"] != n-1 {
				t.Errorf("outcomes = %v, want one done and %d duplicate", outcomes, n-1)
			}
			written := env.Count(t, `SELECT count(*) FROM outbox`) - outboxBefore
			want := map[string]int{"heartbeat": 2, "offer lock": 1, "retry timer": 1}[k.name] // status change + reopen
			if written != want {
				t.Errorf("outbox rows written = %d, want %d", written, want)
			}
			if k.name == "offer lock" {
				if got, want := env.DriverField(t, "d-1", "missed"), "1"; got != want {
					t.Errorf("missed = %q, want %q", got, want)
				}
			}
		})
	}
}

func TestKeysThatAreNotTimersAreIgnored(t *testing.T) {
	t.Parallel()
	env := fntest.NewTimeoutEnv(t, nil)
	env.Ping(t, "d-1", fntest.Offset(pickup, 100, 0))
	for _, key := range []string{
		"t:another:hb:d-1",    // another deployment's prefix
		"hb:d-1",              // no prefix at all
		env.Key("driver:d-1"), // a flagdown key whose expiry means nothing
		env.Key("geo:available"),
		env.Key("deadlines"),
		env.Key("hb:"), // no driver id
		env.Key("ridepos:x"),
	} {
		t.Run(key, func(t *testing.T) {
			before := env.Snapshot(t)
			ev := fntest.Event{Type: events.RedisKeyExpired, Subject: key, Data: events.RedisKeyExpiredData{Key: key}}
			if got, want := env.Expire(t, ev), "ignored"; got != want {
				t.Errorf("outcome = %q, want %q", got, want)
			}
			if diff := before.Diff(env.Snapshot(t)); diff != "" {
				t.Errorf("an ignored key changed state: %s", diff)
			}
		})
	}
}

func TestExpiryNotificationRejects(t *testing.T) {
	t.Parallel()
	env := fntest.NewTimeoutEnv(t, nil)
	env.Ping(t, "d-1", fntest.Offset(pickup, 100, 0))
	env.ExpireHeartbeat(t, "d-1")
	key := env.Key("hb:d-1")

	tests := []struct {
		name      string
		ev        fntest.Event
		wantField string
	}{
		{"data.key differs from the subject", fntest.Event{Type: events.RedisKeyExpired, Subject: key,
			Data: events.RedisKeyExpiredData{Key: env.Key("hb:d-2")}}, "data.key"},
		{"data.key missing", fntest.Event{Type: events.RedisKeyExpired, Subject: key, Data: fntest.JSON{"kind": "heartbeat"}}, "data.key"},
		{"unknown data field", fntest.Event{Type: events.RedisKeyExpired, Subject: key, Data: fntest.JSON{"key": key, "ttl": 3}}, "data"},
		{"data that is not an object", fntest.Event{Type: events.RedisKeyExpired, Subject: key, Data: []string{key}}, "data"},
		{"a ride event", fntest.Event{Type: events.RideRequested, Subject: key, Data: events.RedisKeyExpiredData{Key: key}}, "type"},
		{"the retry event", fntest.Event{Type: events.RideRetry, Subject: key, Data: events.RedisKeyExpiredData{Key: key}}, "type"},
		{"a foreign type", fntest.Event{Type: "com.example.key.expired.v1", Subject: key, Data: events.RedisKeyExpiredData{Key: key}}, "type"},
		{"no subject", fntest.Event{Type: events.RedisKeyExpired, Subject: "", Data: events.RedisKeyExpiredData{Key: key}}, "subject"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := env.Snapshot(t)
			status, body := fntest.SendEvent(t, env.Expiry, tc.ev)
			if got, want := status, http.StatusBadRequest; got != want {
				t.Fatalf("status = %d, want %d (%v)", got, want, body)
			}
			if got, want := fntest.ErrorOf(t, body).Field, tc.wantField; got != want {
				t.Errorf("field = %q, want %q", got, want)
			}
			if diff := before.Diff(env.Snapshot(t)); diff != "" {
				t.Errorf("a rejected event changed state: %s", diff)
			}
		})
	}
	if !env.KeyExists(t, "driver:d-1") || env.DriverField(t, "d-1", "status") != "available" {
		t.Errorf("the driver was touched by rejected events")
	}
}
