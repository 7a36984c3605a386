package redisstore_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/flagdown/flagdown/shared/dispatch"
)

func TestCountDemandCountsEachRideOnce(t *testing.T) {
	t.Parallel()
	s, ctx := newStore(t), context.Background()
	cell := dispatch.Geohash(midtown, dispatch.SurgeCellPrecision)
	box, _ := dispatch.GeohashBox(cell)
	for _, id := range []string{"ride-1", "ride-2", "ride-2", "ride-3"} {
		if err := s.CountDemand(ctx, cell, id, 5*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CountDemand(ctx, "dr5rsp", "ride-elsewhere", 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	rd, err := s.ReadSurge(ctx, true, cell, box, 5*time.Minute, 200, midtown, 8000)
	if err != nil {
		t.Fatal(err)
	}
	if rd.Load.Demand != 3 || rd.Load.Supply != 0 || rd.NearestM != -1 || rd.Prev != 0 || rd.PrevAtMs != 0 || rd.NowMs == 0 {
		t.Fatalf("ReadSurge = %+v, want demand 3 (ride-2 once, the other cell apart), no supply, no driver, no stored multiplier", rd)
	}
}

func TestReadSurgeSupplyIsTheCellsBox(t *testing.T) {
	t.Parallel()
	s, ctx := newStore(t), context.Background()
	cell := dispatch.Geohash(midtown, dispatch.SurgeCellPrecision)
	box, _ := dispatch.GeohashBox(cell)
	now := time.Now()
	inside := box.Center()
	outside := dispatch.Point{Lat: box.MaxLat + 0.002, Lng: inside.Lng} // about 220 m north of the cell
	ping(t, s, "d-in-1", inside, now, dispatch.DriverAvailable)
	ping(t, s, "d-in-2", dispatch.Point{Lat: inside.Lat + 0.001, Lng: inside.Lng + 0.002}, now, dispatch.DriverAvailable)
	ping(t, s, "d-out", outside, now, dispatch.DriverAvailable)
	rd, err := s.ReadSurge(ctx, true, cell, box, 5*time.Minute, 200, inside, 8000)
	if err != nil {
		t.Fatal(err)
	}
	if rd.Load.Supply != 2 {
		t.Errorf("supply %d, want the 2 drivers inside the cell", rd.Load.Supply)
	}
	if rd.NearestM < 0 || rd.NearestM > 1 {
		t.Errorf("nearest driver %v m, want the one at the pickup", rd.NearestM)
	}
	// The bound caps the count.
	if rd, _ := s.ReadSurge(ctx, true, cell, box, 5*time.Minute, 1, inside, 8000); rd.Load.Supply != 1 {
		t.Errorf("supply bound 1: %d", rd.Load.Supply)
	}
}

func TestStoreSurgeOneStepPerInterval(t *testing.T) {
	t.Parallel()
	s, ctx := newStore(t), context.Background()
	const cell = "dr5ru7"
	box, _ := dispatch.GeohashBox(cell)
	m, stored, err := s.StoreSurge(ctx, cell, 1.25, 0, time.Hour, time.Hour)
	if err != nil || !stored || m != 1.25 {
		t.Fatalf("first store: %v %v %v", m, stored, err)
	}
	// A racing update computed from "no data" loses and gets the stored value.
	if m, stored, _ := s.StoreSurge(ctx, cell, 1.25, 0, time.Hour, time.Hour); stored || m != 1.25 {
		t.Fatalf("racing store from no data: %v %v", m, stored)
	}
	rd, err := s.ReadSurge(ctx, true, cell, box, 5*time.Minute, 200, box.Center(), 8000)
	if err != nil || rd.Prev != 1.25 || rd.PrevAtMs == 0 {
		t.Fatalf("ReadSurge = %+v, %v", rd, err)
	}
	// The next update from the stored one, before the interval passed: refused.
	if m, stored, _ := s.StoreSurge(ctx, cell, 1.5, rd.PrevAtMs, time.Hour, time.Hour); stored || m != 1.25 {
		t.Fatalf("store within the interval: %v %v", m, stored)
	}
	// With an interval of 0 it is due, and compare-and-set on the stored time.
	if m, stored, _ := s.StoreSurge(ctx, cell, 1.5, rd.PrevAtMs+1, 0, time.Hour); stored || m != 1.25 {
		t.Fatalf("store from a stale read: %v %v", m, stored)
	}
	if m, stored, _ := s.StoreSurge(ctx, cell, 1.5, rd.PrevAtMs, 0, time.Hour); !stored || m != 1.5 {
		t.Fatalf("due store: %v %v", m, stored)
	}
}

func TestRecordMatchDelayIsAnEWMA(t *testing.T) {
	t.Parallel()
	s, ctx := newStore(t), context.Background()
	if d, err := s.MatchDelay(ctx); err != nil || d != 0 {
		t.Fatalf("before any accept: %v %v", d, err)
	}
	for _, x := range []float64{10, 20, 20} {
		if err := s.RecordMatchDelay(ctx, x); err != nil {
			t.Fatal(err)
		}
	}
	// 10, then 0.1×20 + 0.9×10 = 11, then 0.1×20 + 0.9×11 = 11.9.
	if d, _ := s.MatchDelay(ctx); math.Abs(d-11.9) > 1e-9 {
		t.Fatalf("EWMA %v, want 11.9", d)
	}
}

func TestQuoteRoundTrip(t *testing.T) {
	t.Parallel()
	s, ctx := newStore(t), context.Background()
	if b, err := s.Quote(ctx, "q-missing"); err != nil || b != nil {
		t.Fatalf("missing quote: %s %v", b, err)
	}
	if err := s.PutQuote(ctx, "q-1", []byte(`{"multiplier":1.5}`), time.Minute); err != nil {
		t.Fatal(err)
	}
	if b, err := s.Quote(ctx, "q-1"); err != nil || string(b) != `{"multiplier":1.5}` {
		t.Fatalf("quote: %s %v", b, err)
	}
}
