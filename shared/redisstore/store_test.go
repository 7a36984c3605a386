package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/redisstore"
)

func newStore(t *testing.T) *redisstore.Store {
	t.Helper()
	rdb, prefix := testkit.Redis(t)
	return redisstore.New(rdb, prefix, 30*time.Second, 55)
}

func TestOfferLockIsExclusiveAndReleasedOnlyByItsHolder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	if _, err := s.ApplyPings(ctx, []redisstore.Ping{{DriverID: "d-1", Position: dispatch.Point{Lat: 40.75, Lng: -73.98},
		At: time.Now(), Status: dispatch.DriverAvailable}}); err != nil {
		t.Fatal(err)
	}
	ok, err := s.LockOffer(ctx, "d-1", "offer-a", time.Minute)
	if err != nil || !ok {
		t.Fatalf("first LockOffer = %v, %v; want true", ok, err)
	}
	if in, _ := s.InAvailableSet(ctx, "d-1"); in {
		t.Errorf("a locked driver is still in the available set")
	}
	if ok, err := s.LockOffer(ctx, "d-1", "offer-b", time.Minute); err != nil || ok {
		t.Errorf("second LockOffer = %v, %v; want false", ok, err)
	}
	if ok, err := s.ReleaseOffer(ctx, "d-1", "offer-b", true); err != nil || ok {
		t.Errorf("ReleaseOffer by a non-holder = %v, %v; want false", ok, err)
	}
	if v, _ := s.OfferLock(ctx, "d-1"); v != "offer-a" {
		t.Errorf("lock value = %q, want offer-a", v)
	}
	if ok, err := s.ReleaseOffer(ctx, "d-1", "offer-a", true); err != nil || !ok {
		t.Errorf("ReleaseOffer by the holder = %v, %v; want true", ok, err)
	}
	if in, _ := s.InAvailableSet(ctx, "d-1"); !in {
		t.Errorf("a released, available driver is not back in the available set")
	}
}

func TestAssignAndFreeDriver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	at := time.Now().Add(-time.Minute)
	ping := func(p dispatch.Point, at time.Time) redisstore.PingResult {
		t.Helper()
		res, err := s.ApplyPings(ctx, []redisstore.Ping{{DriverID: "d-1", Position: p, At: at, Status: dispatch.DriverAvailable}})
		if err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
	ping(dispatch.Point{Lat: 40.75, Lng: -73.98}, at)
	if err := s.AssignRide(ctx, "d-1", "ride-1", ""); err != nil {
		t.Fatal(err)
	}
	if got := ping(dispatch.Point{Lat: 40.7501, Lng: -73.98}, at.Add(time.Second)); got.Status != dispatch.DriverNavigating || !got.Applied {
		t.Errorf("ping on a ride = %+v, want applied and navigating", got)
	}
	if in, _ := s.InAvailableSet(ctx, "d-1"); in {
		t.Errorf("a driver on a ride is in the available set")
	}
	pos, err := s.RidePosition(ctx, "ride-1")
	if err != nil || pos == nil || pos.Lat != 40.7501 || pos.Lng != -73.98 {
		t.Errorf("ride position = %+v, %v; want 40.7501,-73.98", pos, err)
	}
	drop := dispatch.Point{Lat: 40.73, Lng: -73.99}
	if err := s.FreeDriver(ctx, "d-1", "ride-1", &drop); err != nil {
		t.Fatal(err)
	}
	if p, _ := s.GeoPosition(ctx, "d-1"); p == nil || p.Lat < 40.72999 || p.Lat > 40.73001 || p.Lng < -73.99001 || p.Lng > -73.98999 {
		t.Errorf("position after free = %v, want the dropoff %v", p, drop)
	}
	if pos, _ := s.RidePosition(ctx, "ride-1"); pos != nil {
		t.Errorf("ride position after free = %+v, want none", pos)
	}
}

// A driver on a ride in progress who goes offline and comes back is busy again, not navigating.
func TestDriverOnRideResumesHisStatusAfterGoingOffline(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	at := time.Now()
	ping := func(at time.Time) redisstore.PingResult {
		res, err := s.ApplyPings(ctx, []redisstore.Ping{{DriverID: "d1", Position: dispatch.Point{Lat: 40.75, Lng: -73.98}, At: at, Status: dispatch.DriverAvailable}})
		if err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
	ping(at)
	if err := s.AssignRide(ctx, "d1", "ride-1", ""); err != nil {
		t.Fatal(err)
	}
	if err := s.SetOnRide(ctx, "d1"); err != nil {
		t.Fatal(err)
	}
	s.Client().Del(ctx, s.Prefix()+"hb:d1") // the heartbeat expired
	prev, alive, err := s.MarkOffline(ctx, "d1")
	if err != nil || alive || prev != dispatch.DriverBusy {
		t.Fatalf("MarkOffline = %q, alive %v, %v; want busy, false", prev, alive, err)
	}
	if got := ping(at.Add(time.Second)).Status; got != dispatch.DriverBusy {
		t.Errorf("status after coming back = %q, want busy", got)
	}
	if in, _ := s.InAvailableSet(ctx, "d1"); in {
		t.Errorf("a driver on a ride is in the available set")
	}
}
