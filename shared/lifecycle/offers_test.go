package lifecycle_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/flagdown/flagdown/internal/testkit/fntest"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// insertPendingOffer writes a PENDING offer of rideID to driverID straight into PostgreSQL, as a
// buggy or racing writer would, and returns the error PostgreSQL answers.
func insertPendingOffer(t *testing.T, env *fntest.TimeoutEnv, rideID, driverID string) error {
	t.Helper()
	_, err := env.D.DB.Pool.Exec(t.Context(), `INSERT INTO offers (id, ride_id, driver_id, status, distance_m, score, expires_at)
		VALUES (gen_random_uuid(), $1, $2, 'PENDING', 100, 1, now() + interval '1 minute')`, rideID, driverID)
	return err
}

// A driver has at most one PENDING offer, whatever the code does: PostgreSQL refuses a second.
func TestPostgreSQLRefusesASecondPendingOfferOfADriver(t *testing.T) {
	t.Parallel()
	env := fntest.NewTimeoutEnv(t, nil)
	env.Ping(t, "d-1", fntest.Offset(pickup, 100, 0))
	offered(t, env, "r-1", "d-1")
	second := env.CreateRide(t, "r-2", pickup, dropoff)
	if err := insertPendingOffer(t, env, second, "d-1"); err == nil {
		t.Errorf("a second PENDING offer of d-1 was accepted by PostgreSQL")
	}
	if n := env.Count(t, `SELECT count(*) FROM offers WHERE driver_id = 'd-1' AND status = 'PENDING'`); n != 1 {
		t.Errorf("PENDING offers of d-1 = %d, want 1", n)
	}
}

// A driver on a ride (ACCEPTED or IN_PROGRESS) holds no PENDING offer: PostgreSQL refuses one.
func TestPostgreSQLRefusesAPendingOfferToADriverOnARide(t *testing.T) {
	t.Parallel()
	env := fntest.NewTimeoutEnv(t, nil)
	env.Ping(t, "d-1", fntest.Offset(pickup, 100, 0))
	first := offered(t, env, "r-1", "d-1")
	if status, body := env.AcceptRide(t, first, "d-1"); status != http.StatusOK {
		t.Fatalf("accept: %d %v", status, body)
	}
	for _, step := range []string{"accepted", "start"} {
		if step == "start" {
			if status, body := env.RideAction(t, first, "start", fntest.JSON{"driver_id": "d-1"}); status != http.StatusOK {
				t.Fatalf("start: %d %v", status, body)
			}
		}
		ride := env.CreateRide(t, "r-"+step, pickup, dropoff)
		if err := insertPendingOffer(t, env, ride, "d-1"); err == nil {
			t.Errorf("%s: a PENDING offer to d-1, on a ride, was accepted by PostgreSQL", step)
		}
	}
	if n := env.Count(t, `SELECT count(*) FROM offers WHERE driver_id = 'd-1' AND status = 'PENDING'`); n != 0 {
		t.Errorf("PENDING offers of d-1 on a ride = %d, want 0", n)
	}
}

// Redis lost a driver's offer lock while his offer is still PENDING in PostgreSQL (its window
// closed, its timeout not handled yet): the matcher must not offer him a second ride. The match
// answers no_driver (he is not free) rather than failing on PostgreSQL's guard.
func TestADriverWithAPendingOfferIsNotOfferedAnother(t *testing.T) {
	t.Parallel()
	env := fntest.NewTimeoutEnv(t, nil)
	env.Ping(t, "d-1", fntest.Offset(pickup, 100, 0))
	first := offered(t, env, "r-1", "d-1")
	env.Exec(t, `UPDATE offers SET created_at = now() - interval '1 minute', expires_at = now() - interval '1 second' WHERE ride_id = $1`, first)
	env.DeleteKey(t, "offer:d-1")
	env.Ping(t, "d-1", fntest.Offset(pickup, 101, 0))
	if !env.InGeo(t, "d-1") {
		t.Fatalf("setup: d-1 should look available once Redis lost his offer lock")
	}
	second := env.CreateRide(t, "r-2", pickup, dropoff)
	if got, want := env.MatchRide(t, second), "no_driver"; got != want {
		t.Errorf("match of a second ride = %q, want %q (d-1 holds a PENDING offer)", got, want)
	}
	if n := env.Count(t, `SELECT count(*) FROM offers WHERE driver_id = 'd-1' AND status = 'PENDING'`); n != 1 {
		t.Errorf("PENDING offers of d-1 = %d, want 1", n)
	}
}

// An offer's timeout is its own: when Redis expired a driver's offer lock and a match takes his
// lock again (for a new offer) before the expiry source looked the old key up, the old offer's
// timer must still fire and time it out. It used to be one key per driver, P offer:{driver}: the
// new lock overwrote its indexed deadline, so the old offer stayed PENDING until reconcile.
func TestAnOfferTimeoutSurvivesANewLockOfTheSameDriver(t *testing.T) {
	t.Parallel()
	env := fntest.NewTimeoutEnv(t, nil)
	ctx := t.Context()
	env.Ping(t, "d-1", fntest.Offset(pickup, 100, 0))
	first := offered(t, env, "r-1", "d-1")
	var offerID string
	if err := env.D.DB.Pool.QueryRow(ctx, `SELECT id FROM offers WHERE ride_id = $1`, first).Scan(&offerID); err != nil {
		t.Fatal(err)
	}
	// Its window closed and Redis deleted the lock; the expiry source has not looked at it yet.
	env.Exec(t, `UPDATE offers SET created_at = now() - interval '1 minute', expires_at = now() - interval '1 second' WHERE id = $1`, offerID)
	env.DeleteKey(t, "offer:d-1")
	env.Ping(t, "d-1", fntest.Offset(pickup, 101, 0))
	second := env.CreateRide(t, "r-2", pickup, dropoff)
	env.MatchRide(t, second) // takes d-1's offer lock again (and, as he holds an offer, gives it back)

	// Every offer timer indexed fires now, as its deadline comes.
	rdb := env.D.Redis.Client()
	keys, err := rdb.ZRange(ctx, env.D.Redis.DeadlinesKey(), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range keys {
		kind, _, ok := redisstore.ParseTimedKey(env.D.Redis.Prefix(), key)
		if !ok || kind == redisstore.KindHeartbeat {
			continue
		}
		name := strings.TrimPrefix(key, env.D.Redis.Prefix())
		env.DeleteKey(t, name)
		env.Expire(t, env.ExpiredEvent(name))
	}
	var status string
	if err := env.D.DB.Pool.QueryRow(ctx, `SELECT status FROM offers WHERE id = $1`, offerID).Scan(&status); err != nil {
		t.Fatal(err)
	}
	if status != "EXPIRED" {
		t.Errorf("offer of r-1 after its timer fired = %s, want EXPIRED (deadlines indexed: %v)", status, keys)
	}
}
