package main

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/flagdown/flagdown/cmd/flagdown/internal/chaos"
	"github.com/flagdown/flagdown/internal/testkit"
)

// TestChaosShort is the short chaos run of `make test`: about a minute of real trips through the
// flagdown binary's platform while every fault kind is injected at least once (platform SIGKILL,
// clock offset, expiry source SIGKILL, Redis pub/sub kill, Redis restarts with and without its data,
// relay crash between publish and mark, duplicated and reordered events), then the settle and the
// checks: no ride lost or stuck, every invariant 0. `make chaos` is the long form.
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos run")
	}
	redisServer, err := chaos.FindRedisServer()
	if err != nil {
		t.Skipf("skipping the chaos run: %v", err)
	}
	root := testkit.RepoRoot(t)
	bin := filepath.Join(t.TempDir(), "flagdown")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, "./cmd/flagdown")...)
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	o := chaos.DefaultOptions()
	o.Binary, o.RedisServer, o.DatabaseURL = bin, redisServer, testkit.DatabaseURL()
	o.TripsPath = filepath.Join(root, "testdata", "trips.csv")
	o.Minutes, o.Drivers, o.Speedup, o.Drain = 2.5, 150, 4, 40*time.Second
	o.FaultInterval = 3500 * time.Millisecond
	o.MaxFaults = 30
	o.SummaryPath = filepath.Join(t.TempDir(), "chaos-summary.json")
	o.Out = io.Discard
	if testing.Verbose() {
		o.Out = os.Stderr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	start := time.Now()
	sum, err := chaos.Run(ctx, o)
	if sum != nil {
		t.Logf("chaos: %.0f s wall, faults %v, %d client HTTP errors, %d rides requested, %d lost, %d stuck, invariants %v",
			time.Since(start).Seconds(), sum.Faults, sum.ClientHTTPErrors, sum.RidesRequested, sum.RidesLost, sum.RidesStuck, sum.Invariants)
	}
	if err != nil {
		t.Fatalf("chaos run: %v (logs kept in %s)", err, sum.WorkDir)
	}
}
