package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/redisstore"
)

var hailRules = dispatch.HailRules{Window: time.Minute, RadiusM: 300, PingMaxAge: 25 * time.Second, GPSSlackM: 50,
	CodeMaxWrong: 3, CodeLockout: 10 * time.Minute}

func hail(t *testing.T, s *redisstore.Store, side dispatch.HailSide, id string, p dispatch.Point, code string) redisstore.HailResult {
	t.Helper()
	press := dispatch.HailPress{Side: side, ID: id, Position: p, Code: code}
	if side == dispatch.HailRider {
		press.Dropoff = &dropoff
	}
	res, err := s.Hail(context.Background(), press, hailRules, dispatch.HailHold)
	if err != nil {
		t.Fatalf("Hail(%s %s): %v", side, id, err)
	}
	return res
}

// TestHailHoldKeepsOffersAway: a pairing holds its driver: out of the available set (his pings do
// not put him back), and match's offer lock refuses him until the hold is released; released, a free driver is available again.
func TestHailHoldKeepsOffersAway(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	ping(t, s, "d-1", midtown, time.Now(), dispatch.DriverAvailable)
	if res := hail(t, s, dispatch.HailRider, "r-1", midtown, ""); res.Outcome != redisstore.HailWaiting || res.ExpiresIn != time.Minute {
		t.Fatalf("rider press = %+v, want waiting for 1m", res)
	}
	res := hail(t, s, dispatch.HailDriver, "d-1", midtown, "")
	if res.Outcome != redisstore.HailPaired || res.CounterpartID != "r-1" || res.Counterpart.Dropoff == nil || *res.Counterpart.Dropoff != dropoff {
		t.Fatalf("driver press = %+v, want paired with r-1 and his dropoff", res)
	}
	if in, _ := s.InAvailableSet(ctx, "d-1"); in {
		t.Errorf("a held driver is in the available set")
	}
	if ok, err := s.LockOffer(ctx, "d-1", liveOffer("offer-a", "ride-a"), time.Minute); err != nil || ok {
		t.Fatalf("LockOffer during the hold = %v, %v; want refused", ok, err)
	}
	// His pings keep him out of it: every writer applies the one available-set rule (available.lua).
	ping(t, s, "d-1", midtown, time.Now().Add(time.Second), dispatch.DriverAvailable)
	if in, _ := s.InAvailableSet(ctx, "d-1"); in {
		t.Errorf("a held driver's ping put him back in the available set")
	}
	// Another press of the held driver is refused too.
	if res := hail(t, s, dispatch.HailDriver, "d-1", midtown, ""); res.Outcome != redisstore.HailUnavailable || res.DriverState != "pairing" {
		t.Errorf("press of a held driver = %+v, want unavailable (pairing)", res)
	}
	if held, err := s.ReleaseHailHold(ctx, "d-1"); err != nil || !held {
		t.Fatalf("ReleaseHailHold = %v, %v", held, err)
	}
	if in, _ := s.InAvailableSet(ctx, "d-1"); !in {
		t.Errorf("a released free driver is not back in the available set")
	}
	if ok, err := s.LockOffer(ctx, "d-1", liveOffer("offer-a", "ride-a"), time.Minute); err != nil || !ok {
		t.Fatalf("LockOffer after the hold = %v, %v; want locked", ok, err)
	}
	// With an offer lock he can no longer hail, and a rider's press does not pair with him.
	if res := hail(t, s, dispatch.HailDriver, "d-1", midtown, ""); res.Outcome != redisstore.HailUnavailable || res.DriverState != "offer" {
		t.Errorf("press of an offered driver = %+v, want unavailable (offer)", res)
	}
}

// TestHailRestore: a taken entry put back pairs again; a waiting driver who was offered a ride
// meanwhile is dropped instead of paired.
func TestHailRestore(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	ping(t, s, "d-1", midtown, time.Now(), dispatch.DriverAvailable)
	ping(t, s, "d-2", soho, time.Now(), dispatch.DriverAvailable)
	hail(t, s, dispatch.HailRider, "r-1", midtown, "AB12")
	res := hail(t, s, dispatch.HailDriver, "d-1", midtown, "AB12")
	if res.Outcome != redisstore.HailPaired {
		t.Fatalf("press = %+v, want paired", res)
	}
	if ok, err := s.RestoreHail(ctx, dispatch.HailRider, res.CounterpartID, res.Counterpart, res.CounterpartExpiry); err != nil || !ok {
		t.Fatalf("RestoreHail = %v, %v", ok, err)
	}
	if ok, _ := s.HailWaiting(ctx, dispatch.HailRider, "r-1"); !ok {
		t.Fatalf("r-1 does not wait after the restore")
	}
	if ok, _ := s.RestoreHail(ctx, dispatch.HailRider, "r-1", res.Counterpart, time.Now().Add(-time.Second)); ok {
		t.Errorf("an expired entry was restored")
	}
	// d-2 waits, then takes an offer: a rider's press near him drops his entry and waits.
	hail(t, s, dispatch.HailDriver, "d-2", soho, "")
	if ok, err := s.LockOffer(ctx, "d-2", liveOffer("offer-b", "ride-b"), time.Minute); err != nil || !ok {
		t.Fatalf("LockOffer(d-2) = %v, %v", ok, err)
	}
	if res := hail(t, s, dispatch.HailRider, "r-2", soho, ""); res.Outcome != redisstore.HailWaiting {
		t.Errorf("press near an offered driver = %+v, want waiting", res)
	}
	if ok, _ := s.HailWaiting(ctx, dispatch.HailDriver, "d-2"); ok {
		t.Errorf("an offered driver still waits")
	}
}
