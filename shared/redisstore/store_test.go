package redisstore_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// The tests read a few keys directly, by the layout documented in store.go (P hb:{id}, P driver:{id},
// P geo:available, P deadlines, P offer:{id}, P retry:{id}).

// storeFunc returns a new store with keys of its own; the tests taking one run against a single
// Redis (newStore) and a Redis Cluster (newClusterStore, cluster_test.go).
type storeFunc = func(t *testing.T) *redisstore.Store

// newStore returns a store over the Redis of REDIS_URL, under a prefix of its own.
func newStore(t *testing.T) *redisstore.Store {
	t.Helper()
	rdb, prefix := testkit.Redis(t)
	return redisstore.New(rdb, prefix, 30*time.Second, 55)
}

var (
	midtown = dispatch.Point{Lat: 40.75, Lng: -73.98}
	soho    = dispatch.Point{Lat: 40.723, Lng: -74.002}
	dropoff = dispatch.Point{Lat: 40.73, Lng: -73.99}
)

// ping applies one ping of driverID and returns its result.
func ping(t *testing.T, s *redisstore.Store, driverID string, p dispatch.Point, at time.Time, st dispatch.DriverStatus) redisstore.PingResult {
	t.Helper()
	res, err := s.ApplyPings(context.Background(), []redisstore.Ping{{DriverID: driverID, Position: p, At: at, Status: st}})
	if err != nil {
		t.Fatalf("ApplyPings(%s): %v", driverID, err)
	}
	return res[0]
}

// assign applies a and fails the test unless it returns want.
func assign(t *testing.T, s *redisstore.Store, a dispatch.Assignment, want redisstore.ApplyResult) {
	t.Helper()
	got, err := s.ApplyAssignment(context.Background(), a)
	if err != nil {
		t.Fatalf("ApplyAssignment(%+v): %v", a, err)
	}
	if got != want {
		t.Fatalf("ApplyAssignment(driver %s, epoch %d, ride %q) = %d, want %d", a.DriverID, a.Epoch, a.RideID, got, want)
	}
}

// state returns what Redis holds of driverID's assignment.
func state(t *testing.T, s *redisstore.Store, driverID string) redisstore.AssignmentState {
	t.Helper()
	st, err := s.AssignmentStates(context.Background(), []string{driverID})
	if err != nil {
		t.Fatalf("AssignmentStates(%s): %v", driverID, err)
	}
	return st[0]
}

func inGeo(t *testing.T, s *redisstore.Store, driverID string) bool {
	t.Helper()
	in, err := s.InAvailableSet(context.Background(), driverID)
	if err != nil {
		t.Fatalf("InAvailableSet(%s): %v", driverID, err)
	}
	return in
}

func onRide(t *testing.T, s *redisstore.Store, driverID string) bool {
	t.Helper()
	ids, err := s.OnRideDrivers(context.Background())
	if err != nil {
		t.Fatalf("OnRideDrivers: %v", err)
	}
	for _, id := range ids {
		if id == driverID {
			return true
		}
	}
	return false
}

// near reports whether p and q are within about a metre (Redis GEO precision is about 0.6 m).
func near(p, q dispatch.Point) bool {
	return math.Abs(p.Lat-q.Lat) < 1e-5 && math.Abs(p.Lng-q.Lng) < 1e-5
}

// redisNow reads Redis's clock (TIME).
func redisNow(t *testing.T, s *redisstore.Store) time.Time {
	t.Helper()
	now, err := s.Now(context.Background())
	if err != nil {
		t.Fatalf("Now: %v", err)
	}
	return now
}

func liveOffer(id, ride string) dispatch.LiveOffer {
	return dispatch.LiveOffer{OfferID: id, RideID: ride, Pickup: midtown, Dropoff: dropoff, DistanceM: 420.5,
		ExpiresAt: time.Date(2030, 1, 2, 3, 4, 5, 6000000, time.UTC)}
}

func TestOfferLock(t *testing.T) { testOfferLock(t, newStore) }

func testOfferLock(t *testing.T, newStore storeFunc) {
	t.Parallel()
	ctx := context.Background()

	t.Run("exclusive, released only by its holder, requeued", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ping(t, s, "d-1", midtown, time.Now(), dispatch.DriverAvailable)
		a := liveOffer("offer-a", "ride-a")
		if ok, err := s.LockOffer(ctx, "d-1", a, time.Minute); err != nil || !ok {
			t.Fatalf("first LockOffer = %v, %v; want true, nil", ok, err)
		}
		if ok, err := s.ConfirmOffer(ctx, "d-1", a.OfferID); err != nil || !ok {
			t.Fatalf("ConfirmOffer = %v, %v; want true, nil", ok, err)
		}
		if inGeo(t, s, "d-1") {
			t.Errorf("a locked driver is in the available set; want him out")
		}
		if ok, err := s.LockOffer(ctx, "d-1", liveOffer("offer-b", "ride-b"), time.Minute); err != nil || ok {
			t.Errorf("second LockOffer = %v, %v; want false, nil", ok, err)
		}
		if ok, err := s.ReleaseOffer(ctx, "d-1", "offer-b", true); err != nil || ok {
			t.Errorf("ReleaseOffer by a non-holder = %v, %v; want false, nil", ok, err)
		}
		got, err := s.OfferLock(ctx, "d-1")
		if err != nil || got == nil {
			t.Fatalf("OfferLock after a foreign release = %v, %v; want offer-a", got, err)
		}
		if got.OfferID != a.OfferID || got.RideID != a.RideID || got.Pickup != a.Pickup || got.Dropoff != a.Dropoff ||
			got.DistanceM != a.DistanceM || !got.ExpiresAt.Equal(a.ExpiresAt) {
			t.Errorf("OfferLock = %+v, want %+v", *got, a)
		}
		if inGeo(t, s, "d-1") {
			t.Errorf("a foreign release requeued the driver; want him out of the available set")
		}
		if res := ping(t, s, "d-1", midtown, time.Now().Add(time.Second), dispatch.DriverAvailable); res.Offer == nil || res.Offer.OfferID != "offer-a" {
			t.Errorf("ping answer offer = %+v, want offer-a", res.Offer)
		}
		if inGeo(t, s, "d-1") {
			t.Errorf("a ping put a driver holding an offer lock back in the available set")
		}
		if ok, err := s.ReleaseOffer(ctx, "d-1", "offer-a", true); err != nil || !ok {
			t.Errorf("ReleaseOffer by the holder = %v, %v; want true, nil", ok, err)
		}
		if got, err := s.OfferLock(ctx, "d-1"); err != nil || got != nil {
			t.Errorf("OfferLock after release = %+v, %v; want nil", got, err)
		}
		if !inGeo(t, s, "d-1") {
			t.Errorf("a released (requeue), available, alive driver is not back in the available set")
		}
		if n, _ := s.Client().ZScore(ctx, s.DeadlinesKey(), s.Prefix()+"offertimer:offer-a").Result(); n != 0 {
			t.Errorf("released offer's timer entry = %v, want removed", n)
		}
		if n, _ := s.Client().Exists(ctx, s.Prefix()+"offertimer:offer-a").Result(); n != 0 {
			t.Errorf("released offer's timer still exists")
		}
	})

	t.Run("release without requeue leaves him out", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ping(t, s, "d-1", midtown, time.Now(), dispatch.DriverAvailable)
		if ok, err := s.LockOffer(ctx, "d-1", liveOffer("offer-a", "ride-a"), time.Minute); err != nil || !ok {
			t.Fatalf("LockOffer = %v, %v; want true", ok, err)
		}
		if ok, err := s.ReleaseOffer(ctx, "d-1", "offer-a", false); err != nil || !ok {
			t.Fatalf("ReleaseOffer = %v, %v; want true", ok, err)
		}
		if inGeo(t, s, "d-1") {
			t.Errorf("release without requeue put the driver back in the available set")
		}
	})

	t.Run("requeue skips a driver whose heartbeat is gone", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ping(t, s, "d-1", midtown, time.Now(), dispatch.DriverAvailable)
		if ok, err := s.LockOffer(ctx, "d-1", liveOffer("offer-a", "ride-a"), time.Minute); err != nil || !ok {
			t.Fatalf("LockOffer = %v, %v; want true", ok, err)
		}
		s.Client().Del(ctx, s.Prefix()+"hb:d-1")
		if ok, err := s.ReleaseOffer(ctx, "d-1", "offer-a", true); err != nil || !ok {
			t.Fatalf("ReleaseOffer = %v, %v; want true", ok, err)
		}
		if inGeo(t, s, "d-1") {
			t.Errorf("requeue put a driver without heartbeat in the available set")
		}
	})
}

// LockOffer re-checks eligibility in the same atomic step as the lock.
func TestLockOfferRechecksEligibility(t *testing.T) { testLockOfferRechecksEligibility(t, newStore) }

func testLockOfferRechecksEligibility(t *testing.T, newStore storeFunc) {
	t.Parallel()
	ctx := context.Background()
	cases := []struct {
		name  string
		setup func(t *testing.T, s *redisstore.Store)
	}{
		{"heartbeat gone", func(t *testing.T, s *redisstore.Store) {
			s.Client().Del(ctx, s.Prefix()+"hb:d-1")
		}},
		{"status paused", func(t *testing.T, s *redisstore.Store) {
			ping(t, s, "d-1", midtown, time.Now().Add(time.Second), dispatch.DriverPaused)
		}},
		{"status offline", func(t *testing.T, s *redisstore.Store) {
			ping(t, s, "d-1", midtown, time.Now().Add(time.Second), dispatch.DriverOffline)
		}},
		{"on a ride", func(t *testing.T, s *redisstore.Store) {
			assign(t, s, dispatch.Assignment{DriverID: "d-1", Epoch: 1, RideID: "ride-1", RideStatus: dispatch.RideAccepted, RideVersion: 2},
				redisstore.AssignApplied)
		}},
		// Status and ride disagree (the hash holds a ride although its status says available): the ride
		// alone must make him ineligible.
		{"hash holds a ride, status available", func(t *testing.T, s *redisstore.Store) {
			s.Client().HSet(ctx, s.Prefix()+"driver:d-1", "ride", "ride-1", "status", "available")
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			ping(t, s, "d-1", midtown, time.Now(), dispatch.DriverAvailable)
			c.setup(t, s)
			if ok, err := s.LockOffer(ctx, "d-1", liveOffer("offer-a", "ride-a"), time.Minute); err != nil || ok {
				t.Errorf("LockOffer = %v, %v; want false, nil", ok, err)
			}
			if got, err := s.OfferLock(ctx, "d-1"); err != nil || got != nil {
				t.Errorf("OfferLock = %+v, %v; want nil", got, err)
			}
			if n, _ := s.Client().ZScore(ctx, s.DeadlinesKey(), s.Prefix()+"offertimer:offer-a").Result(); n != 0 {
				t.Errorf("timer of a refused lock = %v, want none", n)
			}
		})
	}
	t.Run("eligible driver", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ping(t, s, "d-1", midtown, time.Now(), dispatch.DriverAvailable)
		if ok, err := s.LockOffer(ctx, "d-1", liveOffer("offer-a", "ride-a"), time.Minute); err != nil || !ok {
			t.Errorf("LockOffer = %v, %v; want true, nil", ok, err)
		}
	})
}

// ApplyAssignment is compare-and-set on the driver's epoch: Redis never goes backwards.
func TestApplyAssignmentCompareAndSet(t *testing.T) { testApplyAssignmentCompareAndSet(t, newStore) }

func testApplyAssignmentCompareAndSet(t *testing.T, newStore storeFunc) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	at := time.Now().Add(-time.Minute)
	ping(t, s, "d-1", midtown, at, dispatch.DriverAvailable)

	t.Run("on a ride", func(t *testing.T) {
		assign(t, s, dispatch.Assignment{DriverID: "d-1", Epoch: 2, RideID: "ride-1", RideStatus: dispatch.RideAccepted, RideVersion: 2},
			redisstore.AssignApplied)
		want := redisstore.AssignmentState{Exists: true, Status: dispatch.DriverNavigating, RideID: "ride-1", Epoch: 2, Alive: true}
		if got := state(t, s, "d-1"); got != want {
			t.Errorf("state = %+v, want %+v", got, want)
		}
		if !onRide(t, s, "d-1") {
			t.Errorf("driver on a ride is not in the on-ride set")
		}
	})

	t.Run("late older epoch is a no-op", func(t *testing.T) {
		assign(t, s, dispatch.Assignment{DriverID: "d-1", Epoch: 1, PrevRideID: "ride-0", RideVersion: 5, At: &soho}, redisstore.AssignNoop)
		want := redisstore.AssignmentState{Exists: true, Status: dispatch.DriverNavigating, RideID: "ride-1", Epoch: 2, Alive: true}
		if got := state(t, s, "d-1"); got != want {
			t.Errorf("state = %+v, want %+v", got, want)
		}
		if !onRide(t, s, "d-1") {
			t.Errorf("a late free took the driver out of the on-ride set")
		}
	})

	t.Run("newer free at the dropoff", func(t *testing.T) {
		assign(t, s, dispatch.Assignment{DriverID: "d-1", Epoch: 3, PrevRideID: "ride-1", RideVersion: 3, At: &dropoff},
			redisstore.AssignApplied)
		want := redisstore.AssignmentState{Exists: true, Status: dispatch.DriverAvailable, Epoch: 3, InAvailable: true, Alive: true}
		if got := state(t, s, "d-1"); got != want {
			t.Errorf("state = %+v, want %+v", got, want)
		}
		if p, err := s.GeoPosition(ctx, "d-1"); err != nil || p == nil || !near(*p, dropoff) {
			t.Errorf("GEO position = %v, %v; want the dropoff %v", p, err, dropoff)
		}
		if onRide(t, s, "d-1") {
			t.Errorf("a freed driver is still in the on-ride set")
		}
	})

	t.Run("duplicate is a no-op", func(t *testing.T) {
		// He drives on from the dropoff; a duplicate of epoch 3 must not move him back there.
		ping(t, s, "d-1", soho, at.Add(10*time.Minute), dispatch.DriverAvailable)
		assign(t, s, dispatch.Assignment{DriverID: "d-1", Epoch: 3, PrevRideID: "ride-1", RideVersion: 3, At: &dropoff},
			redisstore.AssignNoop)
		if p, err := s.GeoPosition(ctx, "d-1"); err != nil || p == nil || !near(*p, soho) {
			t.Errorf("GEO position after a duplicate = %v, %v; want %v (where he pinged)", p, err, soho)
		}
	})

	t.Run("on-ride driver in the GEO set is taken out at an equal epoch", func(t *testing.T) {
		a := dispatch.Assignment{DriverID: "d-1", Epoch: 4, RideID: "ride-2", RideStatus: dispatch.RideInProgress, RideVersion: 3}
		assign(t, s, a, redisstore.AssignApplied)
		if inGeo(t, s, "d-1") {
			t.Fatalf("driver on a ride in the available set right after assignment")
		}
		s.Client().GeoAdd(ctx, s.Prefix()+"geo:available", &redis.GeoLocation{Name: "d-1", Longitude: soho.Lng, Latitude: soho.Lat})
		assign(t, s, a, redisstore.AssignGeoFixed)
		if inGeo(t, s, "d-1") {
			t.Errorf("AssignGeoFixed left the driver in the available set")
		}
		if got := state(t, s, "d-1"); got.Epoch != 4 || got.RideID != "ride-2" || got.Status != dispatch.DriverBusy {
			t.Errorf("state = %+v, want epoch 4, ride-2, busy", got)
		}
		assign(t, s, a, redisstore.AssignNoop)
	})
}

// A driver on a ride who goes offline and comes back resumes his status (busy), not available.
func TestDriverOnRideResumesHisStatusAfterGoingOffline(t *testing.T) {
	testDriverOnRideResumesHisStatusAfterGoingOffline(t, newStore)
}

func testDriverOnRideResumesHisStatusAfterGoingOffline(t *testing.T, newStore storeFunc) {
	t.Parallel()
	ctx := context.Background()
	at := time.Now()

	t.Run("offline after the assignment", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ping(t, s, "d1", midtown, at, dispatch.DriverAvailable)
		assign(t, s, dispatch.Assignment{DriverID: "d1", Epoch: 1, RideID: "ride-1", RideStatus: dispatch.RideInProgress, RideVersion: 3},
			redisstore.AssignApplied)
		s.Client().Del(ctx, s.Prefix()+"hb:d1") // the heartbeat expired
		prev, alive, err := s.MarkOffline(ctx, "d1")
		if err != nil || alive || prev != dispatch.DriverBusy {
			t.Fatalf("MarkOffline = %q, alive %v, %v; want busy, false", prev, alive, err)
		}
		if st := state(t, s, "d1").Status; st != dispatch.DriverOffline {
			t.Errorf("status after MarkOffline = %q, want offline", st)
		}
		if got := ping(t, s, "d1", midtown, at.Add(time.Second), dispatch.DriverAvailable).Status; got != dispatch.DriverBusy {
			t.Errorf("status after coming back = %q, want busy", got)
		}
		if inGeo(t, s, "d1") {
			t.Errorf("a driver on a ride is in the available set")
		}
	})

	t.Run("assigned while offline", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ping(t, s, "d1", midtown, at, dispatch.DriverAvailable)
		s.Client().Del(ctx, s.Prefix()+"hb:d1")
		if _, alive, err := s.MarkOffline(ctx, "d1"); err != nil || alive {
			t.Fatalf("MarkOffline: alive %v, %v", alive, err)
		}
		assign(t, s, dispatch.Assignment{DriverID: "d1", Epoch: 1, RideID: "ride-1", RideStatus: dispatch.RideInProgress, RideVersion: 3},
			redisstore.AssignApplied)
		if st := state(t, s, "d1").Status; st != dispatch.DriverOffline {
			t.Errorf("status of a driver assigned while offline = %q, want offline", st)
		}
		if got := ping(t, s, "d1", midtown, at.Add(time.Second), dispatch.DriverAvailable).Status; got != dispatch.DriverBusy {
			t.Errorf("status after coming back = %q, want busy", got)
		}
	})

	// His heartbeat expired while Redis was away (a stop longer than the TTL), so nothing decided
	// him offline; his assignment is applied when Redis is back (reconcile), then his ride
	// completes before his next ping lands. A heartbeat gone is not "offline": only a liveness
	// decision (lapse.lua) is. Seen in a chaos run (six 35 s Redis stops, TTL 30 s): 41 drivers
	// who never stopped pinging were answered "offline" right after completing a ride.
	t.Run("assigned after his heartbeat expired, undecided, then freed", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ping(t, s, "d1", midtown, at, dispatch.DriverAvailable)
		s.Client().Del(ctx, s.Prefix()+"hb:d1") // expired while Redis was stopped; no decision
		assign(t, s, dispatch.Assignment{DriverID: "d1", Epoch: 1, RideID: "ride-1", RideStatus: dispatch.RideInProgress, RideVersion: 3},
			redisstore.AssignApplied)
		if st := state(t, s, "d1").Status; st != dispatch.DriverBusy {
			t.Errorf("status of a driver on a ride whose heartbeat expired undecided = %q, want busy", st)
		}
		assign(t, s, dispatch.Assignment{DriverID: "d1", Epoch: 2, PrevRideID: "ride-1", RideVersion: 4}, redisstore.AssignApplied)
		if got := ping(t, s, "d1", midtown, at.Add(time.Second), "").Status; got == dispatch.DriverOffline {
			t.Errorf("his next ping after the ride = %q: taken offline without a liveness decision", got)
		}
		if !inGeo(t, s, "d1") {
			t.Errorf("a free driver pinging again is not in the available set")
		}
	})
}

// A ride's live position is written only by the driver it was handed to, by ride version.
func TestRidePositionOnlyShowsTheRidesDriver(t *testing.T) {
	testRidePositionOnlyShowsTheRidesDriver(t, newStore)
}

func testRidePositionOnlyShowsTheRidesDriver(t *testing.T, newStore storeFunc) {
	t.Parallel()
	ctx := context.Background()
	posA1 := dispatch.Point{Lat: 40.7501, Lng: -73.9801}
	posA2 := dispatch.Point{Lat: 40.7502, Lng: -73.9802}
	posB := dispatch.Point{Lat: 40.7601, Lng: -73.9701}
	posB2 := dispatch.Point{Lat: 40.7602, Lng: -73.9702}
	assignA := dispatch.Assignment{DriverID: "A", Epoch: 1, RideID: "R", RideStatus: dispatch.RideAccepted, RideVersion: 2}
	freeA := dispatch.Assignment{DriverID: "A", Epoch: 2, PrevRideID: "R", RideVersion: 3}
	assignB := dispatch.Assignment{DriverID: "B", Epoch: 1, RideID: "R", RideStatus: dispatch.RideAccepted, RideVersion: 4}

	setup := func(t *testing.T) (*redisstore.Store, time.Time) {
		s := newStore(t)
		at := time.Now().Add(-time.Minute)
		ping(t, s, "A", midtown, at, dispatch.DriverAvailable)
		ping(t, s, "B", posB, at, dispatch.DriverAvailable)
		return s, at
	}
	// check fails unless R shows B at want and shows nothing for A.
	check := func(t *testing.T, s *redisstore.Store, want dispatch.Point) {
		t.Helper()
		if p, err := s.RidePosition(ctx, "R", "B"); err != nil || p == nil || p.Lat != want.Lat || p.Lng != want.Lng {
			t.Errorf("RidePosition(R, B) = %+v, %v; want %v", p, err, want)
		}
		if p, err := s.RidePosition(ctx, "R", "A"); err != nil || p != nil {
			t.Errorf("RidePosition(R, A) = %+v, %v; want nil", p, err)
		}
		if d, err := s.RidePositionDriver(ctx, "R"); err != nil || d != "B" {
			t.Errorf("RidePositionDriver(R) = %q, %v; want B", d, err)
		}
	}

	t.Run("in order", func(t *testing.T) {
		t.Parallel()
		s, at := setup(t)
		assign(t, s, assignA, redisstore.AssignApplied)
		ping(t, s, "A", posA1, at.Add(time.Second), "")
		if p, err := s.RidePosition(ctx, "R", "A"); err != nil || p == nil || p.Lat != posA1.Lat || p.Lng != posA1.Lng {
			t.Fatalf("RidePosition(R, A) while A drives R = %+v, %v; want %v", p, err, posA1)
		}
		assign(t, s, freeA, redisstore.AssignApplied)
		if p, err := s.RidePosition(ctx, "R", "A"); err != nil || p != nil {
			t.Errorf("RidePosition(R, A) after A was freed = %+v, %v; want nil", p, err)
		}
		assign(t, s, assignB, redisstore.AssignApplied)
		check(t, s, posB)
		ping(t, s, "A", posA2, at.Add(2*time.Second), "")
		check(t, s, posB)
		ping(t, s, "B", posB2, at.Add(2*time.Second), "")
		check(t, s, posB2)
	})

	t.Run("A's free applied late", func(t *testing.T) {
		t.Parallel()
		s, at := setup(t)
		assign(t, s, assignA, redisstore.AssignApplied)
		ping(t, s, "A", posA1, at.Add(time.Second), "")
		assign(t, s, assignB, redisstore.AssignApplied)
		check(t, s, posB)
		// A's hash still holds R: his pings must not write it.
		if got := state(t, s, "A"); got.RideID != "R" {
			t.Fatalf("A's ride = %q, want R (his free is not applied yet)", got.RideID)
		}
		ping(t, s, "A", posA2, at.Add(2*time.Second), "")
		check(t, s, posB)
		// The late free of A must not tombstone B's position.
		assign(t, s, freeA, redisstore.AssignApplied)
		check(t, s, posB)
		ping(t, s, "B", posB2, at.Add(2*time.Second), "")
		check(t, s, posB2)
	})

	t.Run("A's assignment applied late", func(t *testing.T) {
		t.Parallel()
		s, at := setup(t)
		assign(t, s, assignB, redisstore.AssignApplied)
		// A's assignment passes A's own epoch check (he holds epoch 0) but its ride version (2) is
		// older than the one that handed R to B (4).
		assign(t, s, assignA, redisstore.AssignApplied)
		check(t, s, posB)
		ping(t, s, "A", posA1, at.Add(time.Second), "")
		check(t, s, posB)
		assign(t, s, freeA, redisstore.AssignApplied)
		check(t, s, posB)
		ping(t, s, "A", posA2, at.Add(2*time.Second), "")
		check(t, s, posB)
		ping(t, s, "B", posB2, at.Add(2*time.Second), "")
		check(t, s, posB2)
	})

	t.Run("new driver without a position does not show the old one's", func(t *testing.T) {
		t.Parallel()
		s, at := setup(t)
		assign(t, s, assignA, redisstore.AssignApplied)
		ping(t, s, "A", posA1, at.Add(time.Second), "")
		assign(t, s, freeA, redisstore.AssignApplied)
		// C has no position in Redis yet (his hash expired, say); R is handed to him.
		assign(t, s, dispatch.Assignment{DriverID: "C", Epoch: 1, RideID: "R", RideStatus: dispatch.RideAccepted, RideVersion: 4},
			redisstore.AssignApplied)
		if p, err := s.RidePosition(ctx, "R", "C"); err != nil || p != nil {
			t.Errorf("RidePosition(R, C) before C pinged = %+v, %v; want nil (not A's position)", p, err)
		}
		ping(t, s, "C", posB, at.Add(2*time.Second), "")
		if p, err := s.RidePosition(ctx, "R", "C"); err != nil || p == nil || p.Lat != posB.Lat || p.Lng != posB.Lng {
			t.Errorf("RidePosition(R, C) after C pinged = %+v, %v; want %v", p, err, posB)
		}
	})
}

// A ping not newer than the last accepted one only proves the driver alive.
func TestStalePingOnlyRefreshesTheHeartbeat(t *testing.T) {
	testStalePingOnlyRefreshesTheHeartbeat(t, newStore)
}

func testStalePingOnlyRefreshesTheHeartbeat(t *testing.T, newStore storeFunc) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range []struct {
		name string
		age  time.Duration
	}{{"same ts", 0}, {"older ts", 5 * time.Second}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			rdb, hb, dk := s.Client(), s.Prefix()+"hb:d-1", s.Prefix()+"driver:d-1"
			at := time.Now().Add(-time.Minute)
			ping(t, s, "d-1", midtown, at, dispatch.DriverAvailable)
			before := rdb.HGetAll(ctx, dk).Val()
			// Age the heartbeat, its deadline entry and the hash (its expiry and field xp, which says
			// when the last ping made it expire), as if time had passed.
			rdb.PExpire(ctx, hb, time.Second)
			rdb.ZAdd(ctx, s.DeadlinesKey(), redis.Z{Score: 1, Member: hb})
			rdb.PExpire(ctx, dk, time.Minute)
			rdb.HSet(ctx, dk, "xp", time.Now().Add(time.Minute).UnixMilli())

			res := ping(t, s, "d-1", soho, at.Add(-c.age), dispatch.DriverPaused)
			if res.Applied || res.Rejected != "stale" || res.Status != dispatch.DriverAvailable {
				t.Errorf("stale ping result = %+v; want not applied, rejected stale, status available", res)
			}
			if ttl := rdb.PTTL(ctx, hb).Val(); ttl < 25*time.Second {
				t.Errorf("heartbeat PTTL after a stale ping = %v, want about 30s", ttl)
			}
			if ttl := rdb.PTTL(ctx, dk).Val(); ttl < 23*time.Hour {
				t.Errorf("driver hash PTTL after a stale ping = %v, want about 24h", ttl)
			}
			// The earlier index entry of a living heartbeat stays: the expiry source's sweeper moves
			// it to the key's expire time when it comes due and finds the key alive.
			if score := rdb.ZScore(ctx, s.DeadlinesKey(), hb).Val(); score != 1 {
				t.Errorf("heartbeat deadline entry after a stale ping = %.0f, want the earlier entry 1 kept", score)
			}
			// A heartbeat that is gone (expired) is re-created with its own deadline as its entry,
			// whatever entry the last one left (here a deferral later than the new deadline).
			rdb.Del(ctx, hb)
			rdb.ZAdd(ctx, s.DeadlinesKey(), redis.Z{Score: float64(time.Now().Add(time.Hour).UnixMilli()), Member: hb})
			ping(t, s, "d-1", soho, at.Add(-c.age), dispatch.DriverPaused)
			if score, at := rdb.ZScore(ctx, s.DeadlinesKey(), hb).Val(), rdb.PExpireTime(ctx, hb).Val(); int64(score) != at.Milliseconds() {
				t.Errorf("heartbeat deadline entry after a stale ping re-creating it = %.0f, want its expire time %d", score, at.Milliseconds())
			}
			after := rdb.HGetAll(ctx, dk).Val()
			for _, f := range []string{"lat", "lng", "ts", "status", "since"} {
				if after[f] != before[f] {
					t.Errorf("driver field %s after a stale ping = %q, want %q", f, after[f], before[f])
				}
			}
			if p, err := s.GeoPosition(ctx, "d-1"); err != nil || p == nil || !near(*p, midtown) {
				t.Errorf("GEO position after a stale ping = %v, %v; want %v", p, err, midtown)
			}
		})
	}
}

// Deadlines are Redis's clock + TTL, never the ping's own time or the host's.
func TestDeadlinesUseRedisClock(t *testing.T) { testDeadlinesUseRedisClock(t, newStore) }

func testDeadlinesUseRedisClock(t *testing.T, newStore storeFunc) {
	t.Parallel()
	ctx := context.Background()
	checkDeadline := func(t *testing.T, s *redisstore.Store, member string, ttl time.Duration, before, after time.Time) {
		t.Helper()
		score, err := s.Client().ZScore(ctx, s.DeadlinesKey(), member).Result()
		if err != nil {
			t.Fatalf("deadline of %s: %v", member, err)
		}
		lo, hi := before.Add(ttl-time.Second).UnixMilli(), after.Add(ttl+time.Second).UnixMilli()
		if int64(score) < lo || int64(score) > hi {
			t.Errorf("deadline of %s = %.0f, want Redis TIME + %v in [%d, %d]", member, score, ttl, lo, hi)
		}
	}

	t.Run("ping", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		before := redisNow(t, s)
		// The fix is ten minutes old: its deadline still counts from Redis's now.
		ping(t, s, "d-1", midtown, time.Now().Add(-10*time.Minute), dispatch.DriverAvailable)
		checkDeadline(t, s, s.Prefix()+"hb:d-1", s.HeartbeatTTL, before, redisNow(t, s))
	})
	t.Run("LockOffer", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ping(t, s, "d-1", midtown, time.Now().Add(-10*time.Minute), dispatch.DriverAvailable)
		before := redisNow(t, s)
		if ok, err := s.LockOffer(ctx, "d-1", liveOffer("offer-a", "ride-a"), 15*time.Second); err != nil || !ok {
			t.Fatalf("LockOffer = %v, %v; want true", ok, err)
		}
		checkDeadline(t, s, s.Prefix()+"offertimer:offer-a", 15*time.Second, before, redisNow(t, s))
	})
	t.Run("SetRetryTimer", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		before := redisNow(t, s)
		if err := s.SetRetryTimer(ctx, "ride-1", "3", 2*time.Minute); err != nil {
			t.Fatal(err)
		}
		checkDeadline(t, s, s.Prefix()+"retry:ride-1", 2*time.Minute, before, redisNow(t, s))
	})
}

func TestDriverHashExpiresDriverStateTTLAfterPing(t *testing.T) {
	testDriverHashExpiresDriverStateTTLAfterPing(t, newStore)
}

func testDriverHashExpiresDriverStateTTLAfterPing(t *testing.T, newStore storeFunc) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	s.DriverStateTTL = time.Hour
	ping(t, s, "d-1", midtown, time.Now(), dispatch.DriverAvailable)
	ttl := s.Client().PTTL(ctx, s.Prefix()+"driver:d-1").Val()
	if ttl > time.Hour || ttl < time.Hour-10*time.Second {
		t.Errorf("driver hash PTTL after a ping = %v, want about %v", ttl, time.Hour)
	}
	t.Run("assignment of a new hash", func(t *testing.T) {
		assign(t, s, dispatch.Assignment{DriverID: "d-2", Epoch: 1, RideID: "ride-2", RideStatus: dispatch.RideAccepted, RideVersion: 2},
			redisstore.AssignApplied)
		ttl := s.Client().PTTL(ctx, s.Prefix()+"driver:d-2").Val()
		if ttl > time.Hour || ttl < time.Hour-10*time.Second {
			t.Errorf("driver hash PTTL after an assignment = %v, want about %v", ttl, time.Hour)
		}
	})
}

// Apply applies every kind of effect and counts applied and stale assignments.
func TestApplyEffects(t *testing.T) { testApplyEffects(t, newStore) }

func testApplyEffects(t *testing.T, newStore storeFunc) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	at := time.Now().Add(-time.Minute)
	for _, id := range []string{"d-1", "d-2", "d-3", "d-4", "d-5", "d-6"} {
		ping(t, s, id, midtown, at, dispatch.DriverAvailable)
	}
	assign(t, s, dispatch.Assignment{DriverID: "d-2", Epoch: 5, RideID: "ride-2", RideStatus: dispatch.RideInProgress, RideVersion: 4},
		redisstore.AssignApplied)
	if ok, err := s.LockOffer(ctx, "d-3", liveOffer("offer-3", "ride-3"), time.Minute); err != nil || !ok {
		t.Fatalf("LockOffer(d-3) = %v, %v; want true", ok, err)
	}
	if err := s.SetRetryTimer(ctx, "ride-8", "1", time.Minute); err != nil {
		t.Fatal(err)
	}
	s.Client().Del(ctx, s.Prefix()+"hb:d-5")

	rep, err := s.Apply(ctx, dispatch.Effects{
		Assignments: []dispatch.Assignment{
			{DriverID: "d-1", Epoch: 1, RideID: "ride-1", RideStatus: dispatch.RideAccepted, RideVersion: 2},
			{DriverID: "d-2", Epoch: 4, RideID: "ride-9", RideStatus: dispatch.RideAccepted, RideVersion: 2}, // stale
		},
		ReleaseOffers:    []dispatch.OfferRelease{{DriverID: "d-3", OfferID: "offer-3", Requeue: true}},
		RetryTimers:      []dispatch.RetryTimer{{RideID: "ride-9", Attempt: 2, Wait: time.Minute}},
		ClearRetryTimers: []string{"ride-8"},
		Misses:           []string{"d-4"},
		Offline:          []string{"d-5", "d-6"},
	})
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if want := (redisstore.ApplyReport{Applied: 1, Stale: 1}); rep != want {
		t.Errorf("Apply report = %+v, want %+v", rep, want)
	}

	t.Run("assignments", func(t *testing.T) {
		if got := state(t, s, "d-1"); got.RideID != "ride-1" || got.Epoch != 1 || got.Status != dispatch.DriverNavigating || got.InAvailable {
			t.Errorf("d-1 = %+v, want ride-1, epoch 1, navigating, out of the available set", got)
		}
		if got := state(t, s, "d-2"); got.RideID != "ride-2" || got.Epoch != 5 || got.Status != dispatch.DriverBusy {
			t.Errorf("d-2 = %+v, want unchanged ride-2, epoch 5, busy", got)
		}
	})
	t.Run("release", func(t *testing.T) {
		if got, err := s.OfferLock(ctx, "d-3"); err != nil || got != nil {
			t.Errorf("d-3 offer lock = %+v, %v; want released", got, err)
		}
		if !inGeo(t, s, "d-3") {
			t.Errorf("d-3 is not requeued in the available set")
		}
	})
	t.Run("timers", func(t *testing.T) {
		_, timers, err := s.RetryTimers(ctx, []string{"ride-9", "ride-8"})
		if err != nil || !timers[0].Armed {
			t.Errorf("ride-9 retry timer = %+v, %v; want armed", timers, err)
		}
		if v := s.Client().Get(ctx, s.Prefix()+"retry:ride-9").Val(); v != "2" {
			t.Errorf("ride-9 retry timer value = %q, want the attempt 2", v)
		}
		if err == nil && timers[1].Armed {
			t.Errorf("ride-8 retry timer = %+v; want cleared", timers[1])
		}
		if _, err := s.Client().ZScore(ctx, s.DeadlinesKey(), s.Prefix()+"retry:ride-8").Result(); err == nil {
			t.Errorf("ride-8 retry deadline still indexed; want removed")
		}
	})
	t.Run("misses", func(t *testing.T) {
		infos, err := s.DriverInfos(ctx, []string{"d-4", "d-6"})
		if err != nil {
			t.Fatal(err)
		}
		if infos[0].Missed != 1 || infos[0].MissedAt.IsZero() {
			t.Errorf("d-4 missed = %d at %v, want 1 now", infos[0].Missed, infos[0].MissedAt)
		}
		if infos[1].Missed != 0 {
			t.Errorf("d-6 missed = %d, want 0", infos[1].Missed)
		}
	})
	t.Run("offline", func(t *testing.T) {
		if got := state(t, s, "d-5"); got.Status != dispatch.DriverOffline || got.InAvailable {
			t.Errorf("d-5 = %+v, want offline, out of the available set", got)
		}
		if got := state(t, s, "d-6"); got.Status != dispatch.DriverAvailable || !got.InAvailable {
			t.Errorf("d-6 (heartbeat alive) = %+v, want still available, in the available set", got)
		}
	})
}

// A ride's rider is due a position push at most once per PositionPushInterval, only for positions
// of the ride's own driver, and never with the interval at 0.
func TestPositionPushDueOncePerInterval(t *testing.T) {
	testPositionPushDueOncePerInterval(t, newStore)
}

func testPositionPushDueOncePerInterval(t *testing.T, newStore storeFunc) {
	t.Parallel()
	s := newStore(t)
	s.PositionPushInterval = 400 * time.Millisecond
	at := time.Now().Add(-time.Minute)
	ping(t, s, "A", midtown, at, dispatch.DriverAvailable)
	ping(t, s, "B", soho, at, dispatch.DriverAvailable)
	assign(t, s, dispatch.Assignment{DriverID: "A", Epoch: 1, RideID: "R", RideStatus: dispatch.RideAccepted, RideVersion: 2}, redisstore.AssignApplied)
	step := func(i int) dispatch.Point {
		return dispatch.Point{Lat: midtown.Lat + float64(i)*1e-5, Lng: midtown.Lng}
	}
	if got := ping(t, s, "A", step(1), at.Add(1*time.Second), "").PushRide; got != "R" {
		t.Fatalf("first position on the ride: PushRide = %q, want R", got)
	}
	if got := ping(t, s, "A", step(2), at.Add(2*time.Second), "").PushRide; got != "" {
		t.Errorf("second position within the interval: PushRide = %q, want none", got)
	}
	if got := ping(t, s, "A", step(2), at.Add(2*time.Second), "").PushRide; got != "" {
		t.Errorf("stale ping: PushRide = %q, want none", got)
	}
	if got := ping(t, s, "B", soho, at.Add(3*time.Second), "").PushRide; got != "" {
		t.Errorf("a driver not on the ride: PushRide = %q, want none", got)
	}
	// Redis's clock decides: wait past the interval.
	deadline := time.Now().Add(5 * time.Second)
	for i := 3; ; i++ {
		time.Sleep(100 * time.Millisecond)
		if ping(t, s, "A", step(i), at.Add(time.Duration(i)*time.Second), "").PushRide == "R" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no position push due again after the interval passed")
		}
	}
	s.PositionPushInterval = 0
	time.Sleep(500 * time.Millisecond)
	if got := ping(t, s, "A", step(100), at.Add(100*time.Second), "").PushRide; got != "" {
		t.Errorf("interval 0: PushRide = %q, want none", got)
	}
}
