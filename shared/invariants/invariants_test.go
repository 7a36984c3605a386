package invariants_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/internal/testkit/fntest"
	"github.com/flagdown/flagdown/shared/broker"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/invariants"
	"github.com/flagdown/flagdown/shared/lifecycle"
)

// The tests break state by the key layout documented in shared/redisstore/store.go (P driver:{id},
// P onride, P geo:available, P ridepos:{ride id}, P retry:{ride id}, P deadlines) and by direct SQL.

var (
	pickup  = dispatch.Point{Lat: 40.7549, Lng: -73.9840}
	dropoff = dispatch.Point{Lat: 40.7306, Lng: -73.9866}
)

// grace is the grace every check here judges with; the clean world is aged well past it.
const grace = 30 * time.Second

// world is a clean deployment built through the real function handlers.
type world struct {
	*fntest.Env
	// acc is ACCEPTED by d-acc; prog IN_PROGRESS with d-prog; offer REQUESTED with a live offer to
	// d-offer; done COMPLETED by d-done; far REQUESTED out of everyone's reach, waiting on its
	// retry timer. d-free is available without a ride.
	acc, prog, offer, done, far string
}

// newWorld builds the clean world, marks every outbox row published (as the relay would) and ages
// every ride and assignment by an hour, so that every check judges it as settled.
func newWorld(t *testing.T) *world {
	t.Helper()
	env := fntest.NewEnv(t, func(c *config.Config) {
		c.OfferWindow = 10 * time.Minute // the live offer stays live for the whole test
		c.RetryBase, c.RetryMaxWait = 10*time.Minute, 10*time.Minute
	})
	w := &world{Env: env}
	near := fntest.Offset(pickup, 100, 0)
	offered := func(rider, driver string) string {
		t.Helper()
		id := env.CreateRide(t, rider, pickup, dropoff)
		if got := env.MatchRide(t, id); got != "offered" {
			t.Fatalf("match of %s's ride = %q, want offered", rider, got)
		}
		if got := env.OfferedDriver(t, id); got != driver {
			t.Fatalf("offered driver = %q, want %q", got, driver)
		}
		return id
	}
	action := func(ride, what, driver string) {
		t.Helper()
		var status int
		var body fntest.JSON
		if what == "accept" {
			status, body = env.AcceptRide(t, ride, driver)
		} else {
			status, body = env.RideAction(t, ride, what, fntest.JSON{"driver_id": driver})
		}
		if status != http.StatusOK {
			t.Fatalf("%s %s by %s: %d %v", what, ride, driver, status, body)
		}
	}
	// One driver becomes available at a time, so each ride goes to the driver named.
	env.Ping(t, "d-acc", near)
	w.acc = offered("r-acc", "d-acc")
	action(w.acc, "accept", "d-acc")
	env.Ping(t, "d-prog", near)
	w.prog = offered("r-prog", "d-prog")
	action(w.prog, "accept", "d-prog")
	action(w.prog, "start", "d-prog")
	env.Ping(t, "d-offer", near)
	w.offer = offered("r-offer", "d-offer")
	env.Ping(t, "d-done", near)
	w.done = offered("r-done", "d-done")
	action(w.done, "accept", "d-done")
	action(w.done, "start", "d-done")
	action(w.done, "complete", "d-done")
	env.Ping(t, "d-free", near)
	w.far = env.CreateRide(t, "r-far", fntest.Offset(pickup, 0, 20_000), dropoff)
	if got := env.MatchRide(t, w.far); got != "no_driver" {
		t.Fatalf("match of the far ride = %q, want no_driver", got)
	}

	for id, want := range map[string]string{w.acc: "ACCEPTED", w.prog: "IN_PROGRESS", w.offer: "REQUESTED", w.done: "COMPLETED", w.far: "REQUESTED"} {
		if got := env.GetRide(t, id)["status"]; got != want {
			t.Fatalf("ride %s is %v, want %s", id, got, want)
		}
	}
	if !env.KeyExists(t, "retry:"+w.far) {
		t.Fatalf("the far ride has no retry timer")
	}
	env.Exec(t, `UPDATE outbox SET published_at = now()`)
	env.Exec(t, `UPDATE rides SET updated_at = now() - interval '1 hour'`)
	env.Exec(t, `UPDATE driver_assignments SET updated_at = now() - interval '1 hour'`)
	return w
}

// redis runs one Redis command on the test's slice (names of keys are given in full, see Key).
func (w *world) redis(t *testing.T, args ...any) {
	t.Helper()
	if err := w.D.Redis.Client().Do(context.Background(), args...).Err(); err != nil && !errors.Is(err, redis.Nil) {
		t.Fatalf("redis %v: %v", args, err)
	}
}

func (w *world) check(t *testing.T, g time.Duration) invariants.Report {
	t.Helper()
	rep, err := invariants.Check(context.Background(), w.D.DB, w.D.Redis, g)
	if err != nil {
		t.Fatalf("check: %v", err)
	}
	if len(rep.Results) != len(invariants.All) {
		t.Fatalf("report has %d results, want one per invariant (%d)", len(rep.Results), len(invariants.All))
	}
	return rep
}

// expect fails t unless every invariant counts as want says (absent: 0) and each example in
// examples is among the examples of its invariant.
func expect(t *testing.T, rep invariants.Report, want map[invariants.Name]int, examples map[invariants.Name]string) {
	t.Helper()
	for _, inv := range invariants.All {
		got := rep.Count(inv.Name)
		if got != want[inv.Name] {
			t.Errorf("%s = %d (examples %v), want %d", inv.Name, got, rep.Examples(inv.Name), want[inv.Name])
		}
		if n := len(rep.Examples(inv.Name)); n != min(got, invariants.MaxExamples) {
			t.Errorf("%s: %d examples for a count of %d", inv.Name, n, got)
		}
	}
	for n, id := range examples {
		if !slices.Contains(rep.Examples(n), id) {
			t.Errorf("%s examples %v lack %s", n, rep.Examples(n), id)
		}
	}
	total := 0
	for _, c := range want {
		total += c
	}
	if rep.Violations() != total {
		t.Errorf("violations = %d, want %d", rep.Violations(), total)
	}
}

// TestCleanWorldHoldsEveryInvariant: a world built only through the functions, every part of it
// older than the grace, breaks nothing.
func TestCleanWorldHoldsEveryInvariant(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	expect(t, w.check(t, grace), nil, nil)
	// With no grace at all the settled world still holds (nothing is on its way).
	expect(t, w.check(t, 0), nil, nil)
}

// TestEachInvariantCatchesItsBreak breaks one thing per subtest, each in a clean world of its own,
// and checks that exactly the invariant about it counts it.
func TestEachInvariantCatchesItsBreak(t *testing.T) {
	t.Parallel()
	type want = map[invariants.Name]int
	type ex = map[invariants.Name]string
	cases := []struct {
		name    string
		corrupt func(t *testing.T, w *world) (want, ex)
	}{
		{"driver_ride_mismatch/redis_names_another_ride", func(t *testing.T, w *world) (want, ex) {
			w.redis(t, "HSET", w.Key("driver:d-acc"), "ride", w.done)
			return want{invariants.DriverRideMismatch: 1}, ex{invariants.DriverRideMismatch: "d-acc"}
		}},
		{"driver_ride_mismatch/redis_on_a_ride_postgres_free", func(t *testing.T, w *world) (want, ex) {
			w.redis(t, "HSET", w.Key("driver:d-free"), "ride", w.acc)
			w.redis(t, "SADD", w.Key("onride"), "d-free")
			return want{invariants.DriverRideMismatch: 1}, ex{invariants.DriverRideMismatch: "d-free"}
		}},
		{"driver_ride_mismatch/postgres_on_a_ride_redis_free", func(t *testing.T, w *world) (want, ex) {
			w.redis(t, "HSET", w.Key("driver:d-prog"), "ride", "")
			w.redis(t, "SREM", w.Key("onride"), "d-prog")
			return want{invariants.DriverRideMismatch: 1}, ex{invariants.DriverRideMismatch: "d-prog"}
		}},
		{"available_while_on_ride", func(t *testing.T, w *world) (want, ex) {
			w.redis(t, "GEOADD", w.Key("geo:available"), pickup.Lng, pickup.Lat, "d-acc")
			return want{invariants.AvailableWhileOnRide: 1}, ex{invariants.AvailableWhileOnRide: "d-acc"}
		}},
		{"driver_two_active_rides", func(t *testing.T, w *world) (want, ex) {
			w.Exec(t, `DROP INDEX rides_one_active_per_driver`)
			w.Exec(t, `UPDATE rides SET status = 'ACCEPTED', driver_id = 'd-acc' WHERE id = $1`, w.done)
			// His row names one of the two rides, so the other is an active ride it does not name:
			// a second active ride cannot exist without breaking assignment_row_mismatch too.
			return want{invariants.DriverTwoActiveRides: 1, invariants.AssignmentRowMismatch: 1},
				ex{invariants.DriverTwoActiveRides: "d-acc", invariants.AssignmentRowMismatch: "d-acc"}
		}},
		{"assignment_row_mismatch", func(t *testing.T, w *world) (want, ex) {
			w.Exec(t, `UPDATE driver_assignments SET ride_status = 'IN_PROGRESS' WHERE driver_id = 'd-acc'`)
			return want{invariants.AssignmentRowMismatch: 1}, ex{invariants.AssignmentRowMismatch: "d-acc"}
		}},
		{"ride_two_pending_offers", func(t *testing.T, w *world) (want, ex) {
			w.Exec(t, `DROP INDEX offers_one_pending_per_ride`)
			w.Exec(t, `INSERT INTO offers (id, ride_id, driver_id, status, distance_m, score, expires_at)
				VALUES (gen_random_uuid(), $1, 'd-free', 'PENDING', 100, 100, now() + interval '10 minutes')`, w.offer)
			return want{invariants.RideTwoPendingOffers: 1}, ex{invariants.RideTwoPendingOffers: w.offer}
		}},
		{"driver_two_pending_offers", func(t *testing.T, w *world) (want, ex) {
			w.Exec(t, `DROP INDEX IF EXISTS offers_one_pending_per_driver`)
			w.Exec(t, `INSERT INTO offers (id, ride_id, driver_id, status, distance_m, score, expires_at)
				VALUES (gen_random_uuid(), $1, 'd-offer', 'PENDING', 100, 100, now() + interval '10 minutes')`, w.far)
			n := invariants.Name("driver_two_pending_offers")
			return want{n: 1}, ex{n: "d-offer"}
		}},
		{"pending_offer_while_on_ride", func(t *testing.T, w *world) (want, ex) {
			// The trigger of migration 00009 refuses this offer; the check must still find one
			// that got in (a database restored from before the trigger, a manual insert).
			w.Exec(t, `DROP TRIGGER IF EXISTS offers_driver_not_on_ride ON offers`)
			w.Exec(t, `INSERT INTO offers (id, ride_id, driver_id, status, distance_m, score, expires_at)
				VALUES (gen_random_uuid(), $1, 'd-acc', 'PENDING', 100, 100, now() + interval '10 minutes')`, w.far)
			return want{invariants.Name("pending_offer_while_on_ride"): 1}, nil
		}},
		{"pending_offer_overdue", func(t *testing.T, w *world) (want, ex) {
			w.Exec(t, `UPDATE offers SET created_at = now() - interval '2 hours', expires_at = now() - interval '1 hour'
				WHERE ride_id = $1 AND status = 'PENDING'`, w.offer)
			return want{invariants.PendingOfferOverdue: 1}, nil
		}},
		{"requested_ride_idle/offer_gone", func(t *testing.T, w *world) (want, ex) {
			w.Exec(t, `UPDATE offers SET status = 'EXPIRED', responded_at = now() WHERE ride_id = $1`, w.offer)
			return want{invariants.RequestedRideIdle: 1}, ex{invariants.RequestedRideIdle: w.offer}
		}},
		{"requested_ride_idle/timer_gone", func(t *testing.T, w *world) (want, ex) {
			w.redis(t, "DEL", w.Key("retry:"+w.far))
			w.redis(t, "ZREM", w.D.Redis.DeadlinesKey(), w.Key("retry:"+w.far))
			return want{invariants.RequestedRideIdle: 1}, ex{invariants.RequestedRideIdle: w.far}
		}},
		{"requested_ride_idle/timer_fired_long_ago", func(t *testing.T, w *world) (want, ex) {
			// The key expired and its deadline is still indexed, an hour old: the expiry was never
			// published (a timer that fired within the grace is checked in TestGraceIsHonoured).
			w.redis(t, "DEL", w.Key("retry:"+w.far))
			w.redis(t, "ZADD", w.D.Redis.DeadlinesKey(), time.Now().Add(-time.Hour).UnixMilli(), w.Key("retry:"+w.far))
			return want{invariants.RequestedRideIdle: 1}, ex{invariants.RequestedRideIdle: w.far}
		}},
		{"outbox_backlog", func(t *testing.T, w *world) (want, ex) {
			w.Exec(t, `UPDATE outbox SET published_at = NULL, created_at = now() - interval '1 hour'
				WHERE id = (SELECT max(id) FROM outbox)`)
			return want{invariants.OutboxBacklog: 1}, nil
		}},
		{"ride_position_wrong_driver", func(t *testing.T, w *world) (want, ex) {
			w.redis(t, "HSET", w.Key("ridepos:"+w.prog), "driver", "d-free")
			return want{invariants.RidePositionWrongDriver: 1}, ex{invariants.RidePositionWrongDriver: w.prog}
		}},
		{"fence_ahead/driver", func(t *testing.T, w *world) (want, ex) {
			// PostgreSQL lost the transactions whose tokens Redis applied for d-acc.
			w.redis(t, "SET", w.Key("fence:d-acc"), 1_000_000)
			return want{invariants.FenceAhead: 1}, ex{invariants.FenceAhead: "d-acc"}
		}},
		{"fence_ahead/sequence", func(t *testing.T, w *world) (want, ex) {
			w.redis(t, "SET", w.Key("fence:max"), 1_000_000_000)
			return want{invariants.FenceAhead: 1}, ex{invariants.FenceAhead: "assignment_token"}
		}},
		{"fence_behind", func(t *testing.T, w *world) (want, ex) {
			// The change that gave d-prog his token never reached Redis.
			w.Exec(t, `UPDATE driver_assignments SET epoch = epoch + 100 WHERE driver_id = 'd-prog'`)
			return want{invariants.FenceBehind: 1}, ex{invariants.FenceBehind: "d-prog"}
		}},
		{"offer_lock_not_pending/answered_long_ago", func(t *testing.T, w *world) (want, ex) {
			// The offer expired an hour ago and its lock was never released; the ride, with no
			// PENDING offer and no retry timer, is idle too.
			w.Exec(t, `UPDATE offers SET status = 'EXPIRED', responded_at = now() - interval '1 hour' WHERE ride_id = $1`, w.offer)
			return want{invariants.OfferLockNotPending: 1, invariants.RequestedRideIdle: 1}, ex{invariants.RequestedRideIdle: w.offer}
		}},
		{"offer_lock_not_pending/no_such_offer", func(t *testing.T, w *world) (want, ex) {
			ghost := "6a1f7e55-9d3c-4c1e-8f00-000000000017"
			w.redis(t, "SET", w.Key("offer:d-free"),
				`{"offer_id":"`+ghost+`","expires_at":"`+time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)+`"}`)
			return want{invariants.OfferLockNotPending: 1}, ex{invariants.OfferLockNotPending: ghost}
		}},
		{"pending_offer_no_lock", func(t *testing.T, w *world) (want, ex) {
			w.Exec(t, `UPDATE offers SET created_at = now() - interval '1 minute' WHERE ride_id = $1`, w.offer)
			w.redis(t, "DEL", w.Key("offer:d-offer"))
			return want{invariants.PendingOfferNoLock: 1}, nil
		}},
		{"pickup_overdue", func(t *testing.T, w *world) (want, ex) {
			w.Exec(t, `UPDATE rides SET accepted_at = now() - interval '2 hours' WHERE id = $1`, w.acc)
			return want{invariants.PickupOverdue: 1}, ex{invariants.PickupOverdue: w.acc}
		}},
		{"trip_overdue_no_alert", func(t *testing.T, w *world) (want, ex) {
			w.Exec(t, `UPDATE rides SET started_at = now() - interval '5 hours' WHERE id = $1`, w.prog)
			return want{invariants.TripOverdueNoAlert: 1}, ex{invariants.TripOverdueNoAlert: w.prog}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			expect(t, w.check(t, grace), nil, nil) // clean before the break
			counts, examples := c.corrupt(t, w)
			expect(t, w.check(t, grace), counts, examples)
		})
	}
}

// TestGraceIsHonoured: what is wrong for less than the grace is on its way, not a violation; the
// same state judged with no grace is one.
func TestGraceIsHonoured(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	// d-acc's assignment changed just now and Redis has not followed yet.
	w.redis(t, "HSET", w.Key("driver:d-acc"), "ride", w.done)
	w.Exec(t, `UPDATE driver_assignments SET updated_at = now() WHERE driver_id = 'd-acc'`)
	// The live offer's window closed a second ago; its timeout is being handled.
	w.Exec(t, `UPDATE offers SET created_at = now() - interval '1 minute', expires_at = now() - interval '1 second'
		WHERE ride_id = $1 AND status = 'PENDING'`, w.offer)
	// The far ride's timer fired just now; the expiry source has not published it yet.
	w.redis(t, "DEL", w.Key("retry:"+w.far))
	w.redis(t, "ZADD", w.D.Redis.DeadlinesKey(), time.Now().UnixMilli(), w.Key("retry:"+w.far))
	// An event written just now waits for the relay.
	w.InsertOutboxRow(t, "io.flagdown.ride.retry.v1", w.far, 0)

	expect(t, w.check(t, grace), nil, nil)
	expect(t, w.check(t, 0), map[invariants.Name]int{
		invariants.DriverRideMismatch: 1, invariants.PendingOfferOverdue: 1,
		invariants.RequestedRideIdle: 1, invariants.OutboxBacklog: 1,
	}, map[invariants.Name]string{invariants.DriverRideMismatch: "d-acc", invariants.RequestedRideIdle: w.far})
}

// TestReportOutputs: the table names every invariant with its count and examples, the JSON has one
// invariant_<name> count per invariant and the examples of the violated ones.
func TestReportOutputs(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.redis(t, "HSET", w.Key("ridepos:"+w.prog), "driver", "d-free")
	rep := w.check(t, grace)

	var buf bytes.Buffer
	if err := rep.Table(&buf); err != nil {
		t.Fatal(err)
	}
	table := buf.String()
	for _, inv := range invariants.All {
		if !strings.Contains(table, string(inv.Name)) {
			t.Errorf("table lacks %s:\n%s", inv.Name, table)
		}
	}
	if !regexp.MustCompile(`(?m)^ride_position_wrong_driver +1 +`+w.prog+`$`).MatchString(table) || !strings.Contains(table, "1 violations") {
		t.Errorf("table does not show the violation:\n%s", table)
	}

	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, inv := range invariants.All {
		want := 0.0
		if inv.Name == invariants.RidePositionWrongDriver {
			want = 1
		}
		if m[inv.Name.Key()] != want {
			t.Errorf("%s = %v, want %v in %s", inv.Name.Key(), m[inv.Name.Key()], want, b)
		}
	}
	ex, _ := m["examples"].(map[string]any)
	if got, _ := ex["ride_position_wrong_driver"].([]any); len(got) != 1 || got[0] != w.prog || len(ex) != 1 {
		t.Errorf("examples = %v, want only ride_position_wrong_driver: [%s]", m["examples"], w.prog)
	}
	if m["violations"] != 1.0 || m["grace_s"] != grace.Seconds() {
		t.Errorf("violations %v, grace_s %v", m["violations"], m["grace_s"])
	}
	if c := rep.Counts(); len(c) != len(invariants.All) || c["invariant_ride_position_wrong_driver"] != 1 {
		t.Errorf("counts = %v", c)
	}
}

// TestNamesAreStableAndDocumented: every invariant has a distinct snake_case name, a unit and a
// meaning.
func TestNamesAreStableAndDocumented(t *testing.T) {
	seen := map[invariants.Name]bool{}
	for _, inv := range invariants.All {
		if seen[inv.Name] || inv.Counts == "" || inv.Meaning == "" || strings.Trim(string(inv.Name), "abcdefghijklmnopqrstuvwxyz_") != "" {
			t.Errorf("invariant %+v", inv)
		}
		seen[inv.Name] = true
	}
	if len(seen) != 19 {
		t.Errorf("%d invariants, want 19", len(seen))
	}
}

// The ride timeouts are judged against their outcome and their settings: a trip past the ceiling
// whose ride.overdue alert was raised holds, and a ride past the pickup deadline holds when the
// deadline is off.
func TestRideTimeoutsWithTheirOutcomeHold(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := context.Background()
	w.Exec(t, `UPDATE rides SET started_at = now() - interval '5 hours' WHERE id = $1`, w.prog)
	w.Exec(t, `UPDATE rides SET accepted_at = now() - interval '2 hours' WHERE id = $1`, w.acc)
	expect(t, w.check(t, grace), map[invariants.Name]int{invariants.TripOverdueNoAlert: 1, invariants.PickupOverdue: 1}, nil)

	if out, err := w.D.Lifecycle("invariants-test").TripOverdue(ctx, w.prog); err != nil || out != lifecycle.OutcomeDone {
		t.Fatalf("TripOverdue = %v, %v; want done", out, err)
	}
	w.Exec(t, `UPDATE outbox SET published_at = now()`)
	rep, err := invariants.CheckWith(ctx, w.D.DB, w.D.Redis, invariants.Options{Grace: grace, TripCeiling: invariants.DefaultTripCeiling})
	if err != nil {
		t.Fatal(err)
	}
	expect(t, rep, nil, nil)
}

// The defaults Check judges with are the platform's (shared/config).
func TestCheckDefaultsAreTheConfigDefaults(t *testing.T) {
	for field, want := range map[string]time.Duration{"PickupDeadline": invariants.DefaultPickupDeadline, "TripCeiling": invariants.DefaultTripCeiling} {
		f, ok := reflect.TypeOf(config.Config{}).FieldByName(field)
		if !ok {
			t.Fatalf("config.Config has no field %s", field)
		}
		got, err := time.ParseDuration(f.Tag.Get("envDefault"))
		if err != nil || got != want {
			t.Errorf("default of %s = %v (%v), invariants uses %v", field, got, err, want)
		}
	}
}

// The broker's invariants: not checked without a broker; with one, a clean broker holds, and an
// event in the dead-letter stream and a consumer more than MaxConsumerLag events behind count.
func TestBrokerInvariants(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := context.Background()
	rep := w.check(t, grace)
	if want := []invariants.Name{invariants.DeadLetteredEvents, invariants.ConsumerLag}; !slices.Equal(rep.NotChecked, want) {
		t.Errorf("not checked without a broker = %v, want %v", rep.NotChecked, want)
	}
	var table bytes.Buffer
	if err := rep.Table(&table); err != nil || !strings.Contains(table.String(), "not checked: no broker reachable") {
		t.Errorf("table without a broker (%v):\n%s", err, table.String())
	}

	id := testkit.ID()
	b, err := broker.Connect(ctx, testkit.NATS(t), "T_"+strings.ToUpper(id), "t"+id+".events")
	if err != nil {
		t.Fatalf("broker: %v", err)
	}
	t.Cleanup(func() {
		_ = b.JetStream().DeleteStream(context.Background(), b.Stream())
		_ = b.JetStream().DeleteStream(context.Background(), b.DLQStream())
		b.Close()
	})
	check := func() invariants.Report {
		t.Helper()
		rep, err := invariants.CheckWith(ctx, w.D.DB, w.D.Redis, invariants.Options{Grace: grace, Broker: b, MaxConsumerLag: 2})
		if err != nil {
			t.Fatalf("check: %v", err)
		}
		if len(rep.NotChecked) != 0 {
			t.Errorf("not checked with a broker = %v", rep.NotChecked)
		}
		return rep
	}
	expect(t, check(), nil, nil)

	js := b.JetStream()
	if _, err := js.CreateOrUpdateConsumer(ctx, b.Stream(), jetstream.ConsumerConfig{Durable: "trigger-behind", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := js.Publish(ctx, b.Subject("io.flagdown.test.v1"), []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	expect(t, check(), nil, nil) // 2 behind: within the bound
	if _, err := js.Publish(ctx, b.Subject("io.flagdown.test.v1"), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	dead := b.DLQSubject("io.flagdown.ride.requested.v1")
	if _, err := js.Publish(ctx, dead, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	expect(t, check(), map[invariants.Name]int{invariants.DeadLetteredEvents: 1, invariants.ConsumerLag: 1},
		map[invariants.Name]string{invariants.DeadLetteredEvents: dead, invariants.ConsumerLag: "trigger-behind"})
}
