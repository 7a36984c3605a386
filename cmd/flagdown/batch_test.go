package main

import (
	"context"
	"io"
	"os"
	"testing"
	"time"

	"github.com/flagdown/flagdown/cmd/flagdown/internal/replay"
	"github.com/flagdown/flagdown/shared/config"
)

// TestBatchReplayEndToEnd replays a minute of the real trips through the real platform in batch
// mode: batch timers through the expiry source, expiry-notification and the broker to match, offers
// under the lock; rides get matched and every invariant holds.
func TestBatchReplayEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end replay")
	}
	p := startTestPlatform(t, func(c *config.Config) { c.MatchMode, c.BatchWindow = config.MatchBatch, 500*time.Millisecond })
	opts := platformReplayOptions(t, p)
	opts.Drivers, opts.Minutes, opts.Speedup, opts.Drain = 300, 1, 10, 2*time.Minute
	opts.MatchMode = replay.MatchModeBatch
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	out := io.Discard
	if testing.Verbose() {
		out = os.Stderr
	}
	sum, err := replay.Run(ctx, opts, out)
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if sum.MatchMode != replay.MatchModeBatch || sum.RidesRequested == 0 || sum.RidesMatched == 0 {
		t.Fatalf("mode %s: requested %d, matched %d; want batch, both > 0", sum.MatchMode, sum.RidesRequested, sum.RidesMatched)
	}
	if sum.MatchLatencyCount != sum.RidesRequested {
		t.Errorf("a match decision for %d of %d rides; want every one", sum.MatchLatencyCount, sum.RidesRequested)
	}
	if !sum.VerifyRan || sum.VerifyViolations != 0 {
		t.Errorf("invariants checked %v, violations %d %v; want checked, 0", sum.VerifyRan, sum.VerifyViolations, sum.VerifyExamples)
	}
	var windows int
	if err := p.deps.DB.Pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox WHERE type = 'io.flagdown.match.batch.due.v1'`).Scan(&windows); err != nil {
		t.Fatal(err)
	}
	if windows == 0 {
		t.Fatalf("no batch window closed")
	}
	t.Logf("batch: %d windows, %d rides, match rate %.2f, pickup mean %.0f m", windows, sum.RidesRequested, sum.MatchRate, sum.PickupDistanceMeanM)
}
