//go:build !production

package main

import (
	"errors"
	"os"

	"github.com/spf13/cobra"

	"github.com/flagdown/flagdown/cmd/flagdown/internal/chaos"
)

// newChaosCmd builds `flagdown chaos`: a replay of real trips while a controller breaks the
// platform underneath, then the checks (package cmd/flagdown/internal/chaos).
func newChaosCmd() *cobra.Command {
	o := chaos.DefaultOptions()
	if u := os.Getenv("DATABASE_URL"); u != "" {
		o.DatabaseURL = u
	}
	faults := "all"
	cmd := &cobra.Command{
		Use:   "chaos",
		Short: "Replay real trips while killing and restarting the platform, Redis and the relay; then check nothing was lost",
		Long: `Runs the platform as child processes of this binary on 127.0.0.1 (flagdown dev with a fixed
broker store, a second flagdown relay, a second flagdown expiry-source) over a private redis-server
it starts on a free port (redis-server must be installed) and a fresh schema of the PostgreSQL at
DATABASE_URL, replays real trips against the gateway, and meanwhile, one at a time every
--fault-interval: SIGKILLs and restarts the platform, restarts it with its clock 2 s off
(FLAGDOWN_FAULT_CLOCK_OFFSET), SIGKILLs the second expiry source, kills Redis's pub/sub connections,
restarts Redis losing its data (SHUTDOWN NOSAVE) or keeping it (SHUTDOWN SAVE), republishes events
from the broker's stream shuffled under new message ids (duplicated, reordered deliveries); the
second relay crashes after publishing a row and before marking it
(FLAGDOWN_FAULT_RELAY_EXIT_AFTER_PUBLISH) and is restarted each time.

It also freezes Redis with SIGSTOP for --redis-stop (longer than --heartbeat-ttl), SIGKILLs the
Redis primary for its Sentinel to promote the replica (redis_failover: only then does the run give
the platform a replica and a Sentinel, REDIS_URL redis+sentinel://), pauses the platform with
SIGSTOP for 1-4 s (platform_sigstop: requests stop anywhere, between a commit and its Redis effects
too), crashes a private PostgreSQL (postgres_restart: only then does the run initdb one, and
point itself at it; the one of --database-url is never restarted), and checks that
flagdown applies notify-keyspace-events after every Redis start (Redis runs without it). Every
--invariant-every it checks the invariants of flagdown verify. Once the trips are sent it stops
injecting, lets the replay drain and the platform settle (twice the reconcile interval plus the
grace), then fails unless the replay's ground truth counts no driver taken offline while pinging,
none missed, no re-opening or trip alert without cause and no acknowledged action missing from
PostgreSQL, every invariant was 0 during the run and is 0 at the end, the dead-letter stream is
empty, and every ride is in PostgreSQL and terminal or legitimately waiting. It prints a table, writes --summary, and exits 1 on any failure;
the run's logs and stores are then kept (the path is printed).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			if o.Binary == "" {
				o.Binary = exe
			}
			if o.Kinds, err = chaos.ParseKinds(faults); err != nil {
				return err
			}
			o.Out = cmd.OutOrStdout()
			sum, err := chaos.Run(cmd.Context(), o)
			if err != nil && sum != nil && !sum.Pass {
				return errors.New("chaos run FAILED: " + err.Error())
			}
			return err
		},
	}
	f := cmd.Flags()
	f.Float64Var(&o.Minutes, "minutes", o.Minutes, "minutes of trips replayed (simulated); faults are injected while they are sent")
	f.IntVar(&o.Drivers, "drivers", o.Drivers, "simulated drivers")
	f.Float64Var(&o.Speedup, "speedup", o.Speedup, "simulated seconds per wall second")
	f.DurationVar(&o.Drain, "drain", o.Drain, "simulated time the replay goes on after the last order (no faults)")
	f.DurationVar(&o.FaultInterval, "fault-interval", o.FaultInterval, "mean wall time between two faults (each wait ±50 %)")
	f.IntVar(&o.MaxFaults, "max-faults", o.MaxFaults, "most scheduled faults, and most relay crashes")
	f.Uint64Var(&o.Seed, "seed", o.Seed, "seed of the replay and of the fault schedule")
	f.DurationVar(&o.ReconcileInterval, "reconcile-interval", o.ReconcileInterval, "FLAGDOWN_RECONCILE_INTERVAL of the platform")
	f.DurationVar(&o.Grace, "grace", o.Grace, "grace of the invariant check and of a ride legitimately waiting")
	f.StringVar(&o.TripsPath, "trips", o.TripsPath, "trips CSV")
	f.DurationVar(&o.HeartbeatTTL, "heartbeat-ttl", o.HeartbeatTTL, "FLAGDOWN_HEARTBEAT_TTL of the platform")
	f.DurationVar(&o.RedisStop, "redis-stop", o.RedisStop, "how long a redis_sigstop fault freezes Redis (longer than the heartbeat TTL)")
	f.Float64Var(&o.OfflineProbPerHour, "offline-prob", o.OfflineProbPerHour, "probability a simulated driver stops pinging for good within a simulated hour")
	f.BoolVar(&o.SendRule, "send-rule", o.SendRule, "the replay's drivers follow the seed's send rule (as flagdown replay --send-rule; off here by default)")
	f.DurationVar(&o.InvariantEvery, "invariant-every", o.InvariantEvery, "wall time between two invariant checks during the run")
	f.StringVar(&faults, "faults", faults, "comma-separated fault kinds to inject (each at least once), or all")
	f.StringVar(&o.SummaryPath, "summary", o.SummaryPath, "where to write the JSON summary (empty: none)")
	f.StringVar(&o.DatabaseURL, "database-url", o.DatabaseURL, "PostgreSQL (default DATABASE_URL); the run uses a fresh schema and drops it after a pass")
	f.StringVar(&o.RedisServer, "redis-server", "", "redis-server executable (default: found on PATH)")
	f.StringVar(&o.Binary, "flagdown", "", "flagdown executable run as the platform (default: this one)")
	f.StringVar(&o.WorkDir, "work-dir", "", "folder for logs, the broker store and Redis's dump (default: a temporary one, removed after a pass)")
	return cmd
}
