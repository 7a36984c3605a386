package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/flagdown/flagdown/shared/dispatch"
)

// TestOfferShownOnlyOnceRecorded: an offer lock taken while match's transaction is still open is
// not an offer yet (the transaction may fail, or its commit be lost): neither a ping answer nor
// OfferLock (the push sync) shows it, though it already keeps the driver from every other offer.
// Once the offer is recorded in PostgreSQL match confirms it, and then both show it.
func TestOfferShownOnlyOnceRecorded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	ping(t, s, "d-1", midtown, time.Now(), dispatch.DriverAvailable)
	if ok, err := s.LockOffer(ctx, "d-1", liveOffer("offer-a", "ride-a"), time.Minute); err != nil || !ok {
		t.Fatalf("LockOffer = %v, %v; want true, nil", ok, err)
	}
	if res := ping(t, s, "d-1", midtown, time.Now().Add(time.Second), dispatch.DriverAvailable); res.Offer != nil {
		t.Errorf("ping answer during the match transaction shows offer %s; want none until it is recorded", res.Offer.OfferID)
	}
	if o, err := s.OfferLock(ctx, "d-1"); err != nil || o != nil {
		t.Errorf("OfferLock during the match transaction = %+v, %v; want nil, nil", o, err)
	}
	if ok, err := s.LockOffer(ctx, "d-1", liveOffer("offer-b", "ride-b"), time.Minute); err != nil || ok {
		t.Errorf("a second LockOffer while the first is unconfirmed = %v, %v; want false, nil", ok, err)
	}
	if inGeo(t, s, "d-1") {
		t.Errorf("a driver holding an unconfirmed offer lock is in the available set")
	}
}
