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
	if ok, err := s.ConfirmOffer(ctx, "d-1", "offer-b"); err != nil || ok {
		t.Errorf("ConfirmOffer of an offer the lock does not hold = %v, %v; want false, nil", ok, err)
	}
	if ok, err := s.ConfirmOffer(ctx, "d-1", "offer-a"); err != nil || !ok {
		t.Fatalf("ConfirmOffer = %v, %v; want true, nil", ok, err)
	}
	if res := ping(t, s, "d-1", midtown, time.Now().Add(2*time.Second), dispatch.DriverAvailable); res.Offer == nil || res.Offer.OfferID != "offer-a" {
		t.Errorf("ping answer after the offer was recorded = %+v; want offer-a", res.Offer)
	}
	if o, err := s.OfferLock(ctx, "d-1"); err != nil || o == nil || o.OfferID != "offer-a" {
		t.Errorf("OfferLock after the offer was recorded = %+v, %v; want offer-a", o, err)
	}
	if ok, err := s.ReleaseOffer(ctx, "d-1", "offer-a", true); err != nil || !ok {
		t.Errorf("ReleaseOffer by the holder = %v, %v; want true, nil", ok, err)
	}

	// An unconfirmed lock is released by its holder like a confirmed one (a failed transaction).
	if ok, err := s.LockOffer(ctx, "d-1", liveOffer("offer-c", "ride-c"), time.Minute); err != nil || !ok {
		t.Fatalf("LockOffer(offer-c) = %v, %v; want true, nil", ok, err)
	}
	if ok, err := s.ReleaseOffer(ctx, "d-1", "offer-c", true); err != nil || !ok {
		t.Errorf("ReleaseOffer of an unconfirmed lock by its holder = %v, %v; want true, nil", ok, err)
	}
	if !inGeo(t, s, "d-1") {
		t.Errorf("the released driver is not back in the available set")
	}
}
