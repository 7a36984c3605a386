package main

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flagdown/flagdown/cmd/flagdown/internal/chaos"
	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/invariants"
	"github.com/flagdown/flagdown/shared/pgstore"
)

// TestChaosShort is the short chaos run of `make test`: about a minute of real trips through the
// flagdown binary's platform while every fault kind but those of chaosKnownDefects (none today) is
// injected (platform SIGKILL, clock offset, expiry source SIGKILL, Redis pub/sub kill, Redis frozen
// longer than the heartbeat TTL, Redis restarted with and without its data and without
// notify-keyspace-events on its command line, a Sentinel failover, the platform paused, PostgreSQL
// crashed (where its server binaries are installed), relay crash between publish and mark,
// duplicated and reordered events), then the settle and the verdict: the replay's ground truth (no driver taken
// offline while pinging, none missed, no re-opening or trip alert without cause, every
// acknowledged action in PostgreSQL), every invariant 0 during the run and at the end, no dead
// letter, no ride lost or stuck; the counts that still fail are reported, not judged
// (chaosOpenDefects).
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos run")
	}
	o := chaosTestOptions(t)
	// The drain (80 s wall) keeps the drivers pinging more than two heartbeat TTLs after the last
	// fault (every kind is injected at least once, the last about 75 s in): the replay's end
	// silences every driver at once, which the offline brake holds, so only a driver whose deadline
	// (an outage's end + 2 × TTL at the latest) comes before it is judged (replay
	// truthInput.silentOutage).
	o.Minutes, o.Drivers, o.Speedup, o.Drain = 2.5, 150, 4, 320*time.Second
	o.FaultInterval = 3500 * time.Millisecond
	o.MaxFaults = 30
	o.HeartbeatTTL, o.RedisStop, o.InvariantEvery, o.OfflineProbPerHour = 12*time.Second, 15*time.Second, 5*time.Second, 0.9
	o.Kinds = nil
	for _, k := range chaos.Kinds {
		if k == chaos.PostgresRestart {
			if err := chaos.PostgresAvailable(); err != nil {
				t.Logf("chaos: %s not injected: %v", k, err)
				continue
			}
		}
		if !slices.Contains(chaosKnownDefects, k) {
			o.Kinds = append(o.Kinds, k)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	sum, err := chaos.Run(ctx, o)
	if sum != nil {
		t.Logf("chaos: %.0f s wall, faults %v, %d client HTTP errors, %d rides requested, %d lost, %d stuck, invariants %v, "+
			"during the run %v, false offline %d, missed offline %d, false reopens %d, false trip alerts %d, acked not reflected %d, dead letters %d",
			time.Since(start).Seconds(), sum.Faults, sum.ClientHTTPErrors, sum.RidesRequested, sum.RidesLost, sum.RidesStuck, sum.Invariants,
			sum.DuringInvariants, sum.FalseOfflineDrivers, sum.MissedOfflineDrivers, sum.FalseReopens, sum.FalseTripAlerts,
			sum.AckedNotReflected, sum.DeadLetters)
	}
	if sum != nil && len(sum.Failures) > 0 {
		// What to trace a failure from, since the summary file goes with the test's folder.
		var ground map[string][]string
		if sum.GroundTruth != nil {
			ground = sum.GroundTruth.Examples
		}
		t.Logf("chaos: examples: stuck %v, during the run %v, at the end %v, ground truth %v, outages %v",
			sum.RidesStuckExamples, sum.DuringExamples, sum.InvariantExamples, ground, sum.Outages)
	}
	if sum != nil && sum.GroundTruth != nil && sum.GroundTruth.DriversStopped > 0 && sum.GroundTruth.OfflineJudged == 0 {
		t.Errorf("the ground truth judged none of the %d drivers who stopped: a missed offline driver could not be found",
			sum.GroundTruth.DriversStopped)
	}
	if err != nil {
		if sum == nil || !onlyOpenDefects(sum.Failures) {
			t.Fatalf("chaos run: %v", err)
		}
		// Nothing was lost, no ride got two drivers nor a driver two rides, nothing acknowledged was
		// undone; what failed is only among chaosOpenDefects, which `make chaos` fails on.
		t.Logf("chaos: open defects (issue 17; `make chaos` fails on them): %s", strings.Join(sum.Failures, "; "))
	}
}

// chaosOpenDefects are the verdict's counts that still fail, not every run, under the faults of
// TestChaosShort (issue 17 is open on them; docs/resilience.md lists them): ACCEPTED rides nobody
// drives, and drivers who stopped and were taken offline late. Offers past their window
// (pending_offer_overdue) are judged since reconcile rebuilds Redis on a new generation and runs
// every step when one fails; the match consumer's lag and the idle rides it holds are judged
// during the run too since reconcile backs off the retries match has not answered (the retry
// storm). TestChaosShort reports the open ones and fails on everything else (rides lost, every
// invariant during the run and at the end, the ground truth on false offline decisions and
// acknowledged actions, dead letters, faults not injected, notifications not re-applied);
// `make chaos` fails on them too.
var chaosOpenDefects = []string{
	"rides stuck = ",
	// Drivers who stopped and were taken offline late: 0 in the runs on a quiet machine, 1 and 3 in
	// loaded runs; one cause traced and fixed, one left (docs/resilience.md).
	"missed_offline_drivers = ",
}

// onlyOpenDefects reports whether every failure of a chaos verdict is one of chaosOpenDefects.
func onlyOpenDefects(failures []string) bool {
	for _, f := range failures {
		known := false
		for _, p := range chaosOpenDefects {
			if strings.HasPrefix(f, p) {
				known = true
			}
		}
		if !known {
			return false
		}
	}
	return len(failures) > 0
}

// chaosTestOptions are the chaos options of a test: the flagdown binary and redis-server built or
// found for it, the shared PostgreSQL, the repository's trips, a summary in the test's folder, and
// the run's log on stderr with -v.
func chaosTestOptions(t *testing.T) chaos.Options {
	t.Helper()
	bin, redisServer, root := chaosBinary(t)
	o := chaos.DefaultOptions()
	o.Binary, o.RedisServer, o.DatabaseURL = bin, redisServer, testkit.DatabaseURL()
	o.TripsPath = filepath.Join(root, "testdata", "trips.csv")
	o.SummaryPath = filepath.Join(t.TempDir(), "chaos-summary.json")
	o.Out = io.Discard
	if testing.Verbose() {
		o.Out = os.Stderr
	}
	return o
}

// chaosKnownDefects are the fault kinds TestChaosShort leaves to `make chaos` because their verdict
// fails today: none (the empty restart's "offline" ping answers and the offline brake engaging
// after a long Redis stop are fixed; the dead letters while Redis is frozen are among
// chaosOpenDefects).
var chaosKnownDefects = []chaos.Kind{}

// TestChaosVerdictFailsWhenConsumersRefuse proves the verdict can fail: the platform runs with
// event verification keys that match no signer (chaos.Options.BreakConsumers), so match and every
// other consumer refuse every event; a short run with one harmless fault must then FAIL, on the
// dead letters and on the rides that never move.
func TestChaosVerdictFailsWhenConsumersRefuse(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos run")
	}
	o := chaosTestOptions(t)
	o.Minutes, o.Drivers, o.Speedup, o.Drain = 0.5, 40, 4, 12*time.Second
	o.Kinds, o.MaxFaults, o.FaultInterval = []chaos.Kind{chaos.ExpirySourceKill}, 1, 2*time.Second
	o.ReconcileInterval, o.Grace = 2*time.Second, 4*time.Second
	o.HeartbeatTTL, o.InvariantEvery, o.OfflineProbPerHour = 12*time.Second, 3*time.Second, 0
	o.BreakConsumers = true
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sum, err := chaos.Run(ctx, o)
	if sum == nil {
		t.Fatalf("chaos run did not get to its verdict: %v", err)
	}
	// A failed run keeps its work folder and schema for a post-mortem; this one failed on purpose.
	defer func() {
		_ = os.RemoveAll(sum.WorkDir)
		_ = pgstore.DropSchema(context.Background(), o.DatabaseURL, sum.Schema)
	}()
	if err == nil || sum.Pass {
		t.Fatalf("verdict PASS with every consumer refusing events (dead letters %d, during the run %v, failures %v)",
			sum.DeadLetters, sum.DuringInvariants, sum.Failures)
	}
	// The rides never move: match refuses ride.requested and every retry, so they stay idle.
	if idle := sum.DuringInvariants[invariants.RequestedRideIdle.Key()]; sum.DeadLetters == 0 || idle == 0 {
		t.Errorf("dead letters %d, requested_ride_idle during the run %d: want both > 0 (failures %v)", sum.DeadLetters, idle, sum.Failures)
	}
	t.Logf("verdict FAIL as it must: %v", sum.Failures)
}

// chaosBinary builds the flagdown binary (with -race under the race build) for a chaos run and
// finds redis-server; the test is skipped when redis-server is missing.
func chaosBinary(t *testing.T) (bin, redisServer, root string) {
	t.Helper()
	redisServer, err := chaos.FindRedisServer()
	if err != nil {
		t.Skipf("skipping the chaos run: %v", err)
	}
	root = testkit.RepoRoot(t)
	bin = filepath.Join(t.TempDir(), "flagdown")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, "./cmd/flagdown")...)
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin, redisServer, root
}
