package function_test

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flagdown/flagdown/events"
	match "github.com/flagdown/flagdown/functions/match"
	"github.com/flagdown/flagdown/internal/testkit/fntest"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/invariants"
	"github.com/flagdown/flagdown/shared/lifecycle"
	"github.com/flagdown/flagdown/shared/matching"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// batchEnv is a platform in batch mode whose batch window is long enough that the tests close it
// themselves (as the expiry source would), and the grace wide enough for the config rules.
func batchEnv(t *testing.T, tune func(*config.Config)) *fntest.TimeoutEnv {
	t.Helper()
	return fntest.NewTimeoutEnv(t, func(c *config.Config) {
		c.MatchMode, c.BatchWindow, c.ReconcileGrace = config.MatchBatch, 30*time.Second, time.Minute
		if tune != nil {
			tune(c)
		}
	})
}

// closeWindow does what the expiry source and expiry-notification do when the batch timer expires:
// it deletes the timer, sends its expiry event (with its indexed deadline) to expiry-notification,
// and returns the match.batch.due event that wrote, ready to deliver to match.
func closeWindow(t *testing.T, env *fntest.TimeoutEnv) fntest.Event {
	t.Helper()
	ctx := context.Background()
	timer, deadline, err := env.D.Redis.BatchTimer(ctx, redisstore.CityBatch)
	if err != nil || deadline == 0 {
		t.Fatalf("batch timer %q deadline = %d, %v; want one indexed", timer, deadline, err)
	}
	name := strings.TrimPrefix(timer, env.D.Redis.Prefix())
	env.DeleteKey(t, name)
	env.DeleteKey(t, "batcharmed:"+redisstore.CityBatch) // expires with the timer
	ev := env.ExpiredEvent(name)
	data := ev.Data.(events.RedisKeyExpiredData)
	data.DeadlineMs = deadline
	ev.Data = data
	if got, want := env.Expire(t, ev), string(lifecycle.OutcomeDone); got != want {
		t.Fatalf("expiry of the batch timer: outcome %q, want %q", got, want)
	}
	return fntest.Event{
		ID: lifecycle.BatchDueEventID(redisstore.CityBatch, deadline), Source: "/flagdown/expiry-notification",
		Type: events.MatchBatchDue, Subject: redisstore.CityBatch,
		Data: events.MatchBatchDueData{Batch: redisstore.CityBatch, DeadlineMs: deadline},
	}
}

// checkInvariants fails t unless every invariant of flagdown verify holds, judged with no grace
// (the outbox has no relay here: its rows are marked published first).
func checkInvariants(t *testing.T, env *fntest.TimeoutEnv) {
	t.Helper()
	env.Exec(t, `UPDATE outbox SET published_at = now() WHERE published_at IS NULL`)
	rep, err := invariants.Check(context.Background(), env.D.DB, env.D.Redis, 0)
	if err != nil {
		t.Fatalf("invariants: %v", err)
	}
	for _, inv := range invariants.All {
		if n := rep.Count(inv.Name); n != 0 {
			t.Errorf("invariant %s = %d (%v)", inv.Name, n, rep.Examples(inv.Name))
		}
	}
}

// twoByTwo places rider A's pickup at the origin and rider B's 1 km east; driver d-mid 400 m east
// of A (600 m from B) and d-west 500 m west of A (1,500 m from B). Greedy, A first, gives A d-mid
// and B d-west: 1,900 m in all. The optimum gives A d-west and B d-mid: 1,100 m.
func twoByTwo(t *testing.T, env *fntest.TimeoutEnv) (a, b string) {
	t.Helper()
	env.Ping(t, "d-mid", fntest.Offset(pickup, 0, 400))
	env.Ping(t, "d-west", fntest.Offset(pickup, 0, -500))
	a = env.CreateRide(t, "r-a", pickup, dropoff)
	b = env.CreateRide(t, "r-b", fntest.Offset(pickup, 0, 1000), dropoff)
	return a, b
}

func offerDistance(t *testing.T, env *fntest.TimeoutEnv, rideID string) float64 {
	t.Helper()
	var d float64
	if err := env.D.DB.Pool.QueryRow(context.Background(),
		`SELECT distance_m FROM offers WHERE ride_id = $1 AND status = 'PENDING'`, rideID).Scan(&d); err != nil {
		t.Fatalf("pending offer of %s: %v", rideID, err)
	}
	return d
}

func TestBatchPicksTheLeastTotalPickupDistance(t *testing.T) {
	t.Parallel()

	// Greedy on the same world: each ride in turn takes its nearest driver.
	greedy := fntest.NewTimeoutEnv(t, nil)
	ga, gb := twoByTwo(t, greedy)
	for _, id := range []string{ga, gb} {
		if got, want := greedy.MatchRide(t, id), match.OutcomeOffered; got != want {
			t.Fatalf("greedy %s: %q, want %q", id, got, want)
		}
	}
	if a, b := greedy.OfferedDriver(t, ga), greedy.OfferedDriver(t, gb); a != "d-mid" || b != "d-west" {
		t.Fatalf("greedy gave A %s and B %s; the test's world is wrong", a, b)
	}
	greedyTotal := offerDistance(t, greedy, ga) + offerDistance(t, greedy, gb)

	env := batchEnv(t, nil)
	a, b := twoByTwo(t, env)
	for _, id := range []string{a, b} {
		if got, want := env.MatchRide(t, id), match.OutcomeJoined; got != want {
			t.Fatalf("batch %s: %q, want %q", id, got, want)
		}
		if env.OfferedDriver(t, id) != "" {
			t.Fatalf("ride %s offered before its window closed", id)
		}
	}
	waiting, armed, err := env.D.Redis.BatchWaiting(context.Background(), redisstore.CityBatch)
	if err != nil || !armed || len(waiting) != 2 {
		t.Fatalf("batch waiting %v armed %v (%v); want both rides and the timer", waiting, armed, err)
	}
	timer, _, _ := env.D.Redis.BatchTimer(context.Background(), redisstore.CityBatch)
	if ttl := env.KeyTTL(t, strings.TrimPrefix(timer, env.D.Redis.Prefix())); ttl <= 20*time.Second || ttl > 30*time.Second {
		t.Errorf("batch timer TTL %s, want about the 30 s window", ttl)
	}
	due := closeWindow(t, env)
	out := env.MatchEvent(t, due)
	if got, want := out, (matching.BatchReport{Rides: 2, Open: 2, Assigned: 2, Offered: 2, AssignedCostM: 0}).String(); got != want {
		t.Fatalf("batch outcome %q, want %q", got, want)
	}
	if a, b := env.OfferedDriver(t, a), env.OfferedDriver(t, b); a != "d-west" || b != "d-mid" {
		t.Fatalf("batch gave A %s and B %s, want d-west and d-mid", a, b)
	}
	batchTotal := offerDistance(t, env, a) + offerDistance(t, env, b)
	if batchTotal > 1110 || greedyTotal < 1890 {
		t.Fatalf("total pickup distance: batch %.0f m (want about 1,100), greedy %.0f m (want about 1,900)", batchTotal, greedyTotal)
	}
	if waiting, _, _ := env.D.Redis.BatchWaiting(context.Background(), redisstore.CityBatch); len(waiting) != 0 {
		t.Errorf("rides still waiting after the window: %v", waiting)
	}
	checkInvariants(t, env)
}

func TestBatchWindowRunsOnce(t *testing.T) {
	t.Parallel()
	env := batchEnv(t, nil)
	a, b := twoByTwo(t, env)
	env.MatchRide(t, a)
	env.MatchRide(t, b)
	timer, _, _ := env.D.Redis.BatchTimer(context.Background(), redisstore.CityBatch)
	expiredKey := timer
	due := closeWindow(t, env)

	// Two deliveries of the window's event at once, and a third later: one run.
	var wg sync.WaitGroup
	outs := make([]string, 2)
	for i := range outs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, body := fntest.SendEvent(t, env.Match, due)
			if status != http.StatusOK {
				t.Errorf("delivery %d: status %d: %v", i, status, body)
			}
			outs[i], _ = body["outcome"].(string)
		}()
	}
	wg.Wait()
	// The second delivery either finds the event processed (duplicate) or, racing the first, finds
	// its claim and resumes it (as after a crash). Racing runs never offer a ride twice and never
	// lose one: each ride is offered once, or (when the other run took its driver first) deferred
	// to the next window, where it waits. What racing runs do not keep is the window's optimal
	// pairing; an exclusive lease on the claim would (docs/matching.md "Batch matching", left).
	waiting, _, err := env.D.Redis.BatchWaiting(context.Background(), redisstore.CityBatch)
	if err != nil {
		t.Fatal(err)
	}
	offered := 0
	for _, ride := range []string{a, b} {
		switch n := env.Count(t, `SELECT count(*) FROM offers WHERE ride_id = $1`, ride); {
		case n == 1:
			offered++
		case n == 0 && slices.Contains(waiting, ride):
		default:
			t.Fatalf("ride %s has %d offers after concurrent runs (waiting %v): want 1, or 0 and waiting for the next window", ride, n, waiting)
		}
	}
	if offered == 0 {
		t.Fatalf("concurrent deliveries answered %q and offered nothing", outs)
	}
	if got := env.MatchEvent(t, due); got != match.OutcomeDuplicate {
		t.Fatalf("late delivery: %q, want %q", got, match.OutcomeDuplicate)
	}
	// The expiry itself seen again (a second expiry source copy's id is the same; another id too):
	// no second announcement.
	ev := env.ExpiredEvent(strings.TrimPrefix(expiredKey, env.D.Redis.Prefix()))
	data := ev.Data.(events.RedisKeyExpiredData)
	data.DeadlineMs = due.Data.(events.MatchBatchDueData).DeadlineMs
	ev.Data = data
	if got, want := env.Expire(t, ev), string(lifecycle.OutcomeStale); got != want {
		t.Fatalf("second expiry of the same window: %q, want %q", got, want)
	}
	if n := env.CountOutbox(t, events.MatchBatchDue, redisstore.CityBatch); n != 1 {
		t.Fatalf("%d match.batch.due events for one window, want 1", n)
	}
	if n := env.Count(t, `SELECT count(*) FROM offers`); n != 2 {
		t.Fatalf("%d offers after repeated runs of one window, want 2", n)
	}
	for _, id := range []string{a, b} {
		if got := env.GetRide(t, id)["match_attempts"]; got != 1.0 {
			t.Errorf("ride %s match_attempts = %v, want 1", id, got)
		}
	}
	// Past the claim's life in Redis the processed_events row still knows the event.
	env.DeleteKey(t, "batchrun:"+redisstore.CityBatch+":"+strconv.FormatInt(data.DeadlineMs, 10))
	env.Ping(t, "d-new", fntest.Offset(pickup, 0, 100))
	c := env.CreateRide(t, "r-c", pickup, dropoff)
	env.MatchRide(t, c) // waits in the next window
	if got := env.MatchEvent(t, due); got != match.OutcomeDuplicate {
		t.Fatalf("very late delivery: %q, want %q", got, match.OutcomeDuplicate)
	}
	if env.OfferedDriver(t, c) != "" {
		t.Fatalf("a late event of an old window offered a ride of the next one")
	}
	checkInvariants(t, env)
}

func TestBatchRunResumesAHalfDoneWindow(t *testing.T) {
	t.Parallel()
	env := batchEnv(t, nil)
	a, b := twoByTwo(t, env)
	env.MatchRide(t, a)
	env.MatchRide(t, b)
	due := closeWindow(t, env)
	deadline := due.Data.(events.MatchBatchDueData).DeadlineMs
	// A run claimed the window and died before handling its rides.
	claim, err := env.D.Redis.ClaimBatch(context.Background(), redisstore.CityBatch, deadline)
	if err != nil || !claim.New || len(claim.RideIDs) != 2 {
		t.Fatalf("claim %+v, %v", claim, err)
	}
	if got, want := env.MatchEvent(t, due), (matching.BatchReport{Rides: 2, Open: 2, Assigned: 2, Offered: 2}).String(); got != want {
		t.Fatalf("redelivery: %q, want %q", got, want)
	}
	if env.OfferedDriver(t, a) != "d-west" || env.OfferedDriver(t, b) != "d-mid" {
		t.Fatalf("resumed window offered A %s, B %s", env.OfferedDriver(t, a), env.OfferedDriver(t, b))
	}
	if got := env.MatchEvent(t, due); got != match.OutcomeDuplicate {
		t.Fatalf("after the resumed run: %q, want %q", got, match.OutcomeDuplicate)
	}
}

func TestBatchLeftoverRidesRollIntoTheNextWindow(t *testing.T) {
	t.Parallel()
	env := batchEnv(t, nil)
	env.Ping(t, "d-only", fntest.Offset(pickup, 0, 400))
	a := env.CreateRide(t, "r-a", pickup, dropoff)
	b := env.CreateRide(t, "r-b", fntest.Offset(pickup, 0, 1000), dropoff)
	env.MatchRide(t, a)
	env.MatchRide(t, b)
	got := env.MatchEvent(t, closeWindow(t, env))
	if want := (matching.BatchReport{Rides: 2, Open: 2, Assigned: 1, Offered: 1, Deferred: 1}).String(); got != want {
		t.Fatalf("first window: %q, want %q", got, want)
	}
	// d-only is 400 m from A and 600 m from B: A (lower cost) gets him, B waits.
	if env.OfferedDriver(t, a) != "d-only" || env.OfferedDriver(t, b) != "" {
		t.Fatalf("first window offered A %q, B %q", env.OfferedDriver(t, a), env.OfferedDriver(t, b))
	}
	ride := env.GetRide(t, b)
	if ride["status"] != "REQUESTED" || ride["match_attempts"] != 0.0 {
		t.Fatalf("left-over ride: %v", ride)
	}
	waiting, armed, err := env.D.Redis.BatchWaiting(context.Background(), redisstore.CityBatch)
	if err != nil || !armed || len(waiting) != 1 || waiting[0] != b {
		t.Fatalf("next window: waiting %v armed %v (%v), want %s and an armed timer", waiting, armed, err, b)
	}
	if env.KeyExists(t, "retry:"+b) {
		t.Fatalf("a left-over ride got a retry timer: it waits for the next window instead")
	}
	checkInvariants(t, env)

	env.Ping(t, "d-near-b", fntest.Offset(pickup, 0, 1100))
	got = env.MatchEvent(t, closeWindow(t, env))
	if want := (matching.BatchReport{Rides: 1, Open: 1, Assigned: 1, Offered: 1}).String(); got != want {
		t.Fatalf("second window: %q, want %q", got, want)
	}
	if d := env.OfferedDriver(t, b); d != "d-near-b" {
		t.Fatalf("second window offered B %q, want d-near-b", d)
	}
	checkInvariants(t, env)
}

func TestBatchRulesOfRetryAndBudgetHold(t *testing.T) {
	t.Parallel()

	t.Run("a ride nobody is near gets a retry timer", func(t *testing.T) {
		t.Parallel()
		env := batchEnv(t, nil)
		a := env.CreateRide(t, "r-a", pickup, dropoff)
		env.MatchRide(t, a)
		got := env.MatchEvent(t, closeWindow(t, env))
		if want := (matching.BatchReport{Rides: 1, Open: 1, NoDriver: 1}).String(); got != want {
			t.Fatalf("window: %q, want %q", got, want)
		}
		if !env.KeyExists(t, "retry:"+a) || env.GetRide(t, a)["match_attempts"] != 1.0 {
			t.Fatalf("no retry timer or attempt counted: %v", env.GetRide(t, a))
		}
		// The retry puts it back into the batch.
		if got := env.MatchEvent(t, retryEvent(a, 1)); got != match.OutcomeJoined {
			t.Fatalf("retry: %q, want %q", got, match.OutcomeJoined)
		}
		checkInvariants(t, env)
	})

	t.Run("a left-over ride past the retry budget becomes unmatched", func(t *testing.T) {
		t.Parallel()
		env := batchEnv(t, func(c *config.Config) { c.RetryBudget = time.Millisecond })
		env.Ping(t, "d-only", fntest.Offset(pickup, 0, 400))
		a := env.CreateRide(t, "r-a", pickup, dropoff)
		b := env.CreateRide(t, "r-b", fntest.Offset(pickup, 0, 1000), dropoff)
		env.MatchRide(t, a)
		env.MatchRide(t, b)
		got := env.MatchEvent(t, closeWindow(t, env))
		if want := (matching.BatchReport{Rides: 2, Open: 2, Assigned: 1, Offered: 1, Unmatched: 1}).String(); got != want {
			t.Fatalf("window: %q, want %q", got, want)
		}
		if got := env.GetRide(t, b)["status"]; got != string(dispatch.RideUnmatched) {
			t.Fatalf("left-over ride past its budget is %v", got)
		}
		if n := env.CountOutbox(t, events.RideUnmatched, b); n != 1 {
			t.Fatalf("%d ride.unmatched events, want 1", n)
		}
	})
}

func TestBatchAssignedDriverLostFallsBack(t *testing.T) {
	t.Parallel()
	env := batchEnv(t, nil)
	env.Ping(t, "d-1", fntest.Offset(pickup, 0, 100))
	env.Ping(t, "d-2", fntest.Offset(pickup, 0, 300))
	a := env.CreateRide(t, "r-a", pickup, dropoff)
	env.MatchRide(t, a)
	due := closeWindow(t, env)
	// d-1 is nearer, so the assignment gives him the ride; but another offer holds his lock. (His
	// lock took him out of the available set: put him back, as if the search had run just before
	// the lock was taken.)
	ctx := context.Background()
	ok, err := env.D.Redis.LockOffer(ctx, "d-1", dispatch.LiveOffer{OfferID: "other", RideID: "other"}, time.Minute)
	if err != nil || !ok {
		t.Fatalf("lock d-1: %v %v", ok, err)
	}
	p := fntest.Offset(pickup, 0, 100)
	if err := env.D.Redis.Client().GeoAdd(ctx, env.Key("geo:available"),
		&redis.GeoLocation{Name: "d-1", Longitude: p.Lng, Latitude: p.Lat}).Err(); err != nil {
		t.Fatal(err)
	}
	got := env.MatchEvent(t, due)
	if want := (matching.BatchReport{Rides: 1, Open: 1, Assigned: 1, Offered: 1}).String(); got != want {
		t.Fatalf("window: %q, want %q", got, want)
	}
	if d := env.OfferedDriver(t, a); d != "d-2" {
		t.Fatalf("ride offered to %q, want d-2 (d-1's lock was lost)", d)
	}
	checkInvariants(t, env)
}

func TestBatchExcludesDriversWhoDeclined(t *testing.T) {
	t.Parallel()
	env := batchEnv(t, nil)
	env.Ping(t, "d-near", fntest.Offset(pickup, 0, 100))
	env.Ping(t, "d-far", fntest.Offset(pickup, 0, 900))
	a := env.CreateRide(t, "r-a", pickup, dropoff)
	env.MatchRide(t, a)
	env.MatchEvent(t, closeWindow(t, env))
	if d := env.OfferedDriver(t, a); d != "d-near" {
		t.Fatalf("first window offered %q, want d-near", d)
	}
	if status, body := env.RideAction(t, a, "decline", fntest.JSON{"driver_id": "d-near"}); status != http.StatusOK {
		t.Fatalf("decline: %d %v", status, body)
	}
	// The decline's event puts the ride back into the batch; d-near is available again but excluded.
	if got := env.MatchEvent(t, fntest.Event{Type: events.RideOfferDeclined, Subject: a,
		Data: events.RideOfferDeclinedData{RideID: a, DriverID: "d-near"}}); got != match.OutcomeJoined {
		t.Fatalf("decline event: %q, want %q", got, match.OutcomeJoined)
	}
	if !env.InGeo(t, "d-near") {
		t.Fatalf("the decliner is not available again: the test would not show his exclusion")
	}
	env.MatchEvent(t, closeWindow(t, env))
	if d := env.OfferedDriver(t, a); d != "d-far" {
		t.Fatalf("second window offered %q, want d-far (d-near declined)", d)
	}
	checkInvariants(t, env)
}

// crowdedCorner places four riders within 100 m east or west of the origin, three drivers 150–300 m
// from each of them (every rider's search stops at 250 or 500 m with these three: FLAGDOWN_MIN_CANDIDATES
// is 3) and one driver 1,500 m north, whom only a search widened to 2,000 m finds. Greedy, one ride
// after another, offers every ride: the fourth finds the three near drivers locked and widens to the
// far one.
func crowdedCorner(t *testing.T, env *fntest.TimeoutEnv) []string {
	t.Helper()
	env.Ping(t, "d-near-1", fntest.Offset(pickup, 0, 150))
	env.Ping(t, "d-near-2", fntest.Offset(pickup, 0, -200))
	env.Ping(t, "d-near-3", fntest.Offset(pickup, 150, 150))
	env.Ping(t, "d-far", fntest.Offset(pickup, 1500, 0))
	var rides []string
	for k, dx := range []float64{0, 50, -50, 100} {
		rides = append(rides, env.CreateRide(t, "r-"+strconv.Itoa(k), fntest.Offset(pickup, 0, dx), dropoff))
	}
	return rides
}

func TestBatchRidesLeftOverWidenPastTheWindowsDrivers(t *testing.T) {
	t.Parallel()

	greedy := fntest.NewTimeoutEnv(t, nil)
	for _, id := range crowdedCorner(t, greedy) {
		if got, want := greedy.MatchRide(t, id), match.OutcomeOffered; got != want {
			t.Fatalf("greedy %s: %q, want %q (the test's world is wrong)", id, got, want)
		}
	}

	// Batch must serve as many: the ride the first assignment leaves over lost the near drivers to
	// the other rides of the window, so it searches past them and gets d-far in the same window
	// instead of waiting for the next one while he is free.
	env := batchEnv(t, nil)
	rides := crowdedCorner(t, env)
	for _, id := range rides {
		env.MatchRide(t, id)
	}
	got := env.MatchEvent(t, closeWindow(t, env))
	if want := (matching.BatchReport{Rides: 4, Open: 4, Assigned: 4, Offered: 4}).String(); got != want {
		t.Fatalf("window: %q, want %q", got, want)
	}
	drivers := map[string]string{}
	for _, id := range rides {
		d := env.OfferedDriver(t, id)
		if d == "" || drivers[d] != "" {
			t.Fatalf("ride %s offered %q (offers so far %v): want a driver of its own", id, d, drivers)
		}
		drivers[d] = id
		if got := env.GetRide(t, id)["match_attempts"]; got != 1.0 {
			t.Errorf("ride %s match_attempts = %v, want 1", id, got)
		}
	}
	if drivers["d-far"] == "" {
		t.Fatalf("d-far offered no ride: %v", drivers)
	}
	if waiting, _, _ := env.D.Redis.BatchWaiting(context.Background(), redisstore.CityBatch); len(waiting) != 0 {
		t.Errorf("rides still waiting after the window: %v", waiting)
	}
	checkInvariants(t, env)
}
