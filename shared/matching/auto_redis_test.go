package matching

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/dispatch"
)

// TestDecideAutoOverRedis: over the real Redis, a lone ride (one driver near) is offered at once
// and leaves its area without state; a crowded area (six recent requests) with three drivers joins
// the window, even though the recent time to match is long (300 s: scarce supply is where a window
// shortens the pickup most); within the window a second ride follows the stored mode even though drivers arrived;
// after the window but within the dwell the area stays in batch; after the dwell, ample supply sends
// it back to greedy.
func TestDecideAutoOverRedis(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.m.p.Mode, w.m.p.BatchWindow = config.MatchAuto, 2*time.Second
	ctx := context.Background()
	now := time.Now()
	w.m.now = func() time.Time { return now }

	lone := &dispatch.Ride{ID: "r-lone", Pickup: origin}
	w.driver(t, "d-1", 300, 0)
	if join, err := w.m.decideAuto(ctx, lone); err != nil || join {
		t.Fatalf("lone ride: join %v, %v; want offered at once", join, err)
	}
	cell := dispatch.Geohash(origin, dispatch.SurgeCellPrecision)
	if n, err := w.s.Client().Exists(ctx, w.prefix+"matchmode:"+cell).Result(); err != nil || n != 0 {
		t.Fatalf("lone ride left area state (%d keys, %v); want none", n, err)
	}

	w.driver(t, "d-2", -400, 0)
	w.driver(t, "d-3", 0, 900)
	for k := range 6 {
		if err := w.s.CountDemand(ctx, cell, fmt.Sprintf("r-%d", k), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	for range 50 { // the EWMA at about 300 s
		if err := w.s.RecordMatchDelay(ctx, 300); err != nil {
			t.Fatal(err)
		}
	}
	crowded := &dispatch.Ride{ID: "r-0", Pickup: origin}
	if join, err := w.m.decideAuto(ctx, crowded); err != nil || !join {
		t.Fatalf("3 drivers for 6 requests, time to match 300 s: join %v, %v; want the window", join, err)
	}
	for k := range 20 { // supply arrives: ample from now on
		w.driver(t, fmt.Sprintf("d-more-%d", k), float64(100*k), -200)
	}
	if join, err := w.m.decideAuto(ctx, &dispatch.Ride{ID: "r-1", Pickup: origin}); err != nil || !join {
		t.Fatalf("same window: join %v, %v; want the window's decision (batch)", join, err)
	}
	now = now.Add(3 * time.Second) // next window, within the 20 s dwell
	if join, err := w.m.decideAuto(ctx, &dispatch.Ride{ID: "r-2", Pickup: origin}); err != nil || !join {
		t.Fatalf("within the dwell: join %v, %v; want batch kept", join, err)
	}
	now = now.Add(30 * time.Second)
	if join, err := w.m.decideAuto(ctx, &dispatch.Ride{ID: "r-3", Pickup: origin}); err != nil || join {
		t.Fatalf("23 drivers for 6 requests after the dwell: join %v, %v; want greedy", join, err)
	}
}
