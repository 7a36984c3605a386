package function_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/flagdown/flagdown/events"
	reconcile "github.com/flagdown/flagdown/functions/reconcile"
	"github.com/flagdown/flagdown/internal/testkit/fntest"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/outbox"
)

var (
	pickup  = dispatch.Point{Lat: 40.7549, Lng: -73.9840}
	dropoff = dispatch.Point{Lat: 40.7306, Lng: -73.9866}
)

// wait bounds every "eventually" here; it waits for windows and graces to pass, it measures nothing.
const wait = 30 * time.Second

// offered creates a ride for rider at pickup and matches it; it fails unless driver got the offer.
func offered(t *testing.T, env *fntest.TimeoutEnv, rider, driver string) string {
	t.Helper()
	rideID := env.CreateRide(t, rider, pickup, dropoff)
	if got, want := env.MatchRide(t, rideID), "offered"; got != want {
		t.Fatalf("match outcome = %q, want %q", got, want)
	}
	if got := env.OfferedDriver(t, rideID); got != driver {
		t.Fatalf("offered driver = %q, want %q", got, driver)
	}
	return rideID
}

// accepted is offered followed by driver's accept.
func accepted(t *testing.T, env *fntest.TimeoutEnv, rider, driver string) string {
	t.Helper()
	rideID := offered(t, env, rider, driver)
	if status, body := env.AcceptRide(t, rideID, driver); status != http.StatusOK {
		t.Fatalf("accept: %d %v", status, body)
	}
	return rideID
}

func run(t *testing.T, env *fntest.TimeoutEnv) reconcile.Report {
	t.Helper()
	rep, err := env.Reconcile.Run(t.Context())
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	return rep
}

// TestReconcileRepairsWhatLostExpiriesLeftBehind builds the world the expiry source leaves when it
// is stopped (nobody acts on expired keys) and a relay that was down, and checks that one run
// repairs each thing, counts it, and that the next run finds nothing left.
func TestReconcileRepairsWhatLostExpiriesLeftBehind(t *testing.T) {
	t.Parallel()
	// The grace must exceed the time from the first run to the second (a relay publishes in
	// between): the rides the first run touched must not look idle again.
	const grace = 3 * time.Second
	env := fntest.NewTimeoutEnv(t, func(c *config.Config) {
		c.OfferWindow = time.Second
		c.ReconcileGrace = grace
	})
	ctx := t.Context()
	rdb := env.D.Redis.Client()

	// An ACCEPTED ride whose driver Redis shows available again (state lost or overwritten).
	env.Ping(t, "d-avail", fntest.Offset(pickup, 100, 0))
	rideAvail := accepted(t, env, "r-avail", "d-avail")
	// An ACCEPTED ride whose driver's heartbeat expired unnoticed.
	env.Ping(t, "d-lost", fntest.Offset(pickup, 120, 0))
	rideLost := accepted(t, env, "r-lost", "d-lost")
	// A PENDING offer whose window passed unnoticed.
	env.Ping(t, "d-slow", fntest.Offset(pickup, 140, 0))
	rideSlow := offered(t, env, "r-slow", "d-slow")
	var slowOffer string
	if err := env.D.DB.Pool.QueryRow(ctx, `SELECT id::text FROM offers WHERE ride_id = $1`, rideSlow).Scan(&slowOffer); err != nil {
		t.Fatal(err)
	}
	// A REQUESTED ride nothing works on: its ride.requested (or retry timer) was lost.
	rideIdle := env.CreateRide(t, "r-idle", pickup, dropoff)
	env.Exec(t, `UPDATE rides SET updated_at = now() - interval '1 minute' WHERE id = $1`, rideIdle)
	// Drivers whose heartbeats expired while they were available.
	ghosts := []string{"d-ghost-1", "d-ghost-2"}
	for i, d := range ghosts {
		env.Ping(t, d, fntest.Offset(pickup, -3000-100*float64(i), 0))
		env.ExpireHeartbeat(t, d)
	}
	// An event a relay never published.
	env.InsertOutboxRow(t, events.RideRequested, "planted", time.Minute)
	// Break d-avail and d-lost now that no more matching happens.
	p := fntest.Offset(pickup, 100, 0)
	if err := rdb.GeoAdd(ctx, env.Key("geo:available"), &redis.GeoLocation{Name: "d-avail", Longitude: p.Lng, Latitude: p.Lat}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, env.Key("driver:d-avail"), "status", "available").Err(); err != nil {
		t.Fatal(err)
	}
	env.ExpireHeartbeat(t, "d-lost")

	fntest.Eventually(t, wait, "d-slow's offer is overdue by more than the grace", func() bool {
		return env.Count(t, `SELECT count(*) FROM offers WHERE id = $1 AND expires_at < now() - $2 * interval '1 millisecond'`,
			slowOffer, grace.Milliseconds()) == 1
	})
	oldUnpublished := env.Count(t, `SELECT count(*) FROM outbox WHERE published_at IS NULL AND created_at < now() - $1 * interval '1 millisecond'`, grace.Milliseconds())
	if oldUnpublished < 1 {
		t.Fatalf("no old unpublished outbox rows to repair")
	}

	rep := run(t, env)
	want := reconcile.Report{OffersExpired: 1, RidesRetried: 1, DriversOffline: len(ghosts), AssignmentsRepaired: 1,
		ActiveDriversOffline: 1, OutboxUnpublished: oldUnpublished}
	if rep != want {
		t.Errorf("first run = %+v, want %+v", rep, want)
	}

	t.Run("ghost drivers are offline", func(t *testing.T) {
		for _, d := range ghosts {
			if env.InGeo(t, d) {
				t.Errorf("%s is still in the available set", d)
			}
			if got, want := env.DriverField(t, d, "status"), "offline"; got != want {
				t.Errorf("%s status = %q, want %q", d, got, want)
			}
			changes := env.OutboxData(t, d, events.DriverStatusChanged)
			if len(changes) != 1 || changes[0]["reason"] != "reconcile" || changes[0]["to"] != "offline" {
				t.Errorf("%s driver.status.changed = %v, want one, to offline, reason reconcile", d, changes)
			}
		}
	})
	t.Run("the overdue offer expired", func(t *testing.T) {
		if got := env.Count(t, `SELECT count(*) FROM offers WHERE id = $1 AND status = 'EXPIRED'`, slowOffer); got != 1 {
			t.Errorf("d-slow's offer is not EXPIRED")
		}
		expired := env.OutboxData(t, rideSlow, events.RideOfferExpired)
		if len(expired) != 1 || expired[0]["driver_id"] != "d-slow" || expired[0]["offer_id"] != slowOffer {
			t.Errorf("ride.offer.expired = %v, want one for d-slow's offer", expired)
		}
		if got, want := env.DriverField(t, "d-slow", "missed"), "1"; got != want {
			t.Errorf("d-slow missed = %q, want %q", got, want)
		}
		if got, want := env.GetRide(t, rideSlow)["status"], "REQUESTED"; got != want {
			t.Errorf("ride status = %v, want %v", got, want)
		}
	})
	t.Run("the idle ride is retried", func(t *testing.T) {
		retries := env.OutboxData(t, rideIdle, events.RideRetry)
		if len(retries) != 1 || retries[0]["reason"] != "reconcile" || retries[0]["attempt"] != 0.0 {
			t.Errorf("ride.retry = %v, want one, reason reconcile, attempt 0", retries)
		}
		if got := env.Count(t, `SELECT count(*) FROM rides WHERE id = $1 AND updated_at > now() - interval '1 minute'`, rideIdle); got != 1 {
			t.Errorf("the retried ride was not touched")
		}
	})
	t.Run("the driver shown available is back on his ride", func(t *testing.T) {
		if env.InGeo(t, "d-avail") {
			t.Errorf("d-avail is still in the available set")
		}
		if got, want := env.DriverField(t, "d-avail", "status"), "navigating"; got != want {
			t.Errorf("d-avail status = %q, want %q", got, want)
		}
		if got := env.DriverField(t, "d-avail", "ride"); got != rideAvail {
			t.Errorf("d-avail ride = %q, want %q", got, rideAvail)
		}
		if got, want := env.GetRide(t, rideAvail)["status"], "ACCEPTED"; got != want {
			t.Errorf("ride status = %v, want %v", got, want)
		}
	})
	t.Run("the ride of the driver without heartbeat is matched again", func(t *testing.T) {
		if got := env.Count(t, `SELECT count(*) FROM rides WHERE id = $1 AND status = 'REQUESTED' AND driver_id IS NULL`, rideLost); got != 1 {
			t.Errorf("d-lost's ride is not REQUESTED without a driver")
		}
		reopened := env.OutboxData(t, rideLost, events.RideReopened)
		if len(reopened) != 1 || reopened[0]["reason"] != "driver_offline" || reopened[0]["by"] != "system" {
			t.Errorf("ride.reopened = %v, want one, by system, reason driver_offline", reopened)
		}
		if got, want := env.DriverField(t, "d-lost", "status"), "offline"; got != want {
			t.Errorf("d-lost status = %q, want %q", got, want)
		}
		if got := env.DriverField(t, "d-lost", "ride"); got != "" {
			t.Errorf("d-lost ride = %q, want none", got)
		}
	})

	// The relays, woken, publish what was left behind; the next run finds nothing to repair.
	env.StartRelay(t)
	fntest.Eventually(t, wait, "the relay publishes the outbox", func() bool { return env.Unpublished(t) == 0 })
	before := env.Snapshot(t)
	if rep := run(t, env); rep.Total() != 0 {
		t.Errorf("second run = %+v, want no repair", rep)
	}
	if diff := before.Diff(env.Snapshot(t)); diff != "" {
		t.Errorf("the second run changed state: %s", diff)
	}
}

func TestReconcileWakesTheRelaysForAnOldUnpublishedRow(t *testing.T) {
	t.Parallel()
	env := fntest.NewTimeoutEnv(t, func(c *config.Config) { c.ReconcileGrace = time.Second })
	ctx := t.Context()
	env.InsertOutboxRow(t, events.RideRequested, "planted", time.Minute)
	env.InsertOutboxRow(t, events.RideRequested, "recent", 0) // within the grace: not counted

	conn, err := pgx.Connect(ctx, env.D.DB.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background()) //nolint:errcheck // test connection
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{outbox.Channel}.Sanitize()); err != nil {
		t.Fatal(err)
	}

	if got, want := run(t, env), (reconcile.Report{OutboxUnpublished: 1}); got != want {
		t.Errorf("run = %+v, want %+v", got, want)
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		n, err := conn.WaitForNotification(wctx)
		if err != nil {
			t.Fatalf("no notification for schema %s: %v", env.D.DB.Schema, err)
		}
		if n.Payload == env.D.DB.Schema {
			break
		}
	}

	env.StartRelay(t)
	fntest.Eventually(t, wait, "the relay publishes the outbox", func() bool { return env.Unpublished(t) == 0 })
	if rep := run(t, env); rep.Total() != 0 {
		t.Errorf("run after the relay = %+v, want no repair", rep)
	}
}

func TestReconcileOfAHealthyWorldRepairsNothing(t *testing.T) {
	t.Parallel()
	const grace = time.Second
	env := fntest.NewTimeoutEnv(t, func(c *config.Config) {
		c.ReconcileGrace = grace
		c.RetryBase, c.RetryMaxWait = time.Minute, time.Minute
	})
	env.StartRelay(t)

	env.Ping(t, "d-onride", fntest.Offset(pickup, 100, 0))
	onRide := accepted(t, env, "r-onride", "d-onride")
	env.Ping(t, "d-busy", fntest.Offset(pickup, 100, 0))
	inProgress := accepted(t, env, "r-busy", "d-busy")
	if status, body := env.RideAction(t, inProgress, "start", fntest.JSON{"driver_id": "d-busy"}); status != http.StatusOK {
		t.Fatalf("start: %d %v", status, body)
	}
	env.Ping(t, "d-offered", fntest.Offset(pickup, 100, 0))
	offered(t, env, "r-offered", "d-offered")
	env.Ping(t, "d-free", fntest.Offset(pickup, 100, 0))
	// A ride out of everyone's reach waits on its retry timer.
	far := env.CreateRide(t, "r-far", fntest.Offset(pickup, 0, 20_000), dropoff)
	if got, want := env.MatchRide(t, far), "no_driver"; got != want {
		t.Fatalf("match of the far ride = %q, want %q", got, want)
	}
	// Drivers keep pinging (a position update on a ride included).
	env.Ping(t, "d-onride", fntest.Offset(pickup, 90, 0))

	fntest.Eventually(t, wait, "everything is older than the grace and published", func() bool {
		return env.Count(t, `SELECT count(*) FROM rides WHERE updated_at > now() - $1 * interval '1 millisecond'`, grace.Milliseconds()) == 0 &&
			env.Unpublished(t) == 0
	})

	// A deployment's first run records Redis's generation (P generation), and only that.
	if rep := run(t, env); rep.Total() != 0 || rep.RedisRebuilt != 0 {
		t.Fatalf("first run: %+v, want nothing repaired or rebuilt", rep)
	}
	before := env.Snapshot(t)
	for _, method := range []string{http.MethodPost, http.MethodGet} {
		status, body := fntest.Do(t, env.Reconcile, method, "/", nil, fntest.InternalHeaders())
		if status != http.StatusOK {
			t.Fatalf("%s: status %d: %v", method, status, body)
		}
		for _, k := range []string{"offers_expired", "rides_retried", "drivers_offline", "assignments_repaired", "active_drivers_offline", "outbox_unpublished",
			"offer_locks_released", "offers_restored", "retry_timers_rearmed", "redis_rebuilt", "pickups_overdue", "trips_overdue",
			"pruned_processed_events", "pruned_outbox", "pruned_offers"} {
			if v, ok := body[k]; !ok || v != 0.0 {
				t.Errorf("%s: %s = %v, want 0", method, k, v)
			}
		}
		if len(body) != 15 {
			t.Errorf("%s: report %v has %d fields, want 15 (9 repairs, the rebuild, 2 ride deadlines, 3 pruned counts)", method, body, len(body))
		}
	}
	if diff := before.Diff(env.Snapshot(t)); diff != "" {
		t.Errorf("reconcile of a healthy world changed state: %s", diff)
	}
	if got, want := env.GetRide(t, onRide)["status"], "ACCEPTED"; got != want {
		t.Errorf("status = %v, want %v", got, want)
	}
}
