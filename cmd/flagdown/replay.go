//go:build !production

package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/flagdown/flagdown/cmd/flagdown/internal/replay"
	"github.com/flagdown/flagdown/shared/config"
)

// newReplayCmd builds `flagdown replay`: real NYC taxi trips replayed against a running platform over
// its HTTP API (see package replay).
func newReplayCmd() *cobra.Command {
	o := replay.DefaultOptions()
	var minutes int
	matchMode := ""
	starts := string(o.DriverStarts)
	compareModes := ""
	compareKeep := false
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "Replay real NYC taxi trips against a running platform over HTTP",
		Long: `Replay real NYC taxi trips against a running platform through its HTTP API.

Simulated drivers start where taxis really were (--driver-starts, default dropoffs-before: the
dropoff points of the file's trips that ended before the replayed window, which opens --skip-minutes
after the file's first pickup, or when none did, of its
trips picked up outside the window; never at a replayed pickup; replay-pickups, optimistic, puts them
at the file's pickups, the replayed ones included), go online and ping POST /function/location-update
(batched, like a gateway aggregator, with one ops token; single pings with the driver's own token)
as the seed's send rule asks (--send-rule, on by default: while stationary or carrying a passenger
only after 50 m or 15 s simulated, every --ping-interval on the way to a pickup);
every simulated driver and rider sends his own HS256 token, minted with FLAGDOWN_JWT_SECRET (the
platform's secret: in make demo both get the same one); they accept or decline the offers they see in the ping answers,
drive straight-line to the pickup and the dropoff, and start and complete their rides. Each trip in the
window becomes an order-create at its real pickup time. Simulated time runs --speedup times faster than
wall time; the platform's timers (offer window, heartbeat TTL, match retries) are wall time.

Drivers misbehave on purpose: a driver ignores an offer with probability --no-answer-prob (the platform
times it out and offers the ride to the next driver), and drops offline for good with probability
--offline-prob per simulated hour of his shift (he stops pinging; an ACCEPTED ride he was driving to is
re-opened by the platform after its heartbeat TTL). At the end a summary table is printed and written as
JSON to --summary, including offer_timeouts, rematches, drivers_went_offline, rides_unmatched (final
status UNMATCHED) and rides_never_matched (still REQUESTED).

At the end, --verify-grace plus 2 s after its last request, the replay checks the platform's
invariants as ` + "`flagdown verify`" + ` does, reading its PostgreSQL and Redis directly (DATABASE_URL,
FLAGDOWN_DB_SCHEMA, REDIS_URL, FLAGDOWN_REDIS_PREFIX: the same environment as ` + "`flagdown dev`" + `), and
puts every count in the summary as invariant_<name>. It exits with status 1, after writing the
summary, when a count is not 0 or when the check could not run (--verify=false skips it).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Minutes = float64(minutes)
			ds, err := replay.ParseDriverStarts(starts)
			if err != nil {
				return err
			}
			o.DriverStarts = ds
			o.Progress = true
			// The tokens are minted with the platform's own secret, read like every flagdown command
			// reads its configuration (FLAGDOWN_JWT_SECRET or its secret file).
			cfg, err := config.Load()
			if err != nil {
				return err
			}
			o.JWTSecret, o.JWTIssuer, o.JWTAudience = cfg.JWTSecret, cfg.JWTIssuer, cfg.JWTAudience
			// The replay cannot observe the platform's matching mode: it names the one it is told,
			// by default the FLAGDOWN_MATCH_MODE of the same environment flagdown dev reads.
			o.MatchMode = cfg.MatchMode
			if matchMode != "" {
				o.MatchMode = matchMode
			}
			if compareModes != "" {
				modes, err := replay.ParseModes(compareModes)
				if err != nil {
					return err
				}
				bin, err := os.Executable()
				if err != nil {
					return err
				}
				logDir := ".local"
				if err := os.MkdirAll(logDir, 0o755); err != nil {
					return err
				}
				_, err = replay.Compare(cmd.Context(), o, replay.CompareOptions{Modes: modes, Binary: bin, Environ: os.Environ(),
					LogDir: logDir, Keep: compareKeep}, cmd.OutOrStdout())
				return err
			}
			if cfg.SimSpeedup != o.Speedup {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: FLAGDOWN_SIM_SPEEDUP is %g but --speedup %g: the platform's wait estimates are in other seconds than the riders' (run flagdown dev with FLAGDOWN_SIM_SPEEDUP=%g)\n",
					cfg.SimSpeedup, o.Speedup, o.Speedup)
			}
			_, err = replay.Run(cmd.Context(), o, cmd.OutOrStdout())
			if errors.Is(err, context.Canceled) {
				return fmt.Errorf("replay interrupted; partial figures above")
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.URL, "url", o.URL, "platform base URL (gateway)")
	f.StringVar(&o.TripsPath, "trips", o.TripsPath, "trips CSV (pickup_time,pickup_lat,pickup_lng,dropoff_lat,dropoff_lng)")
	f.IntVar(&o.Drivers, "drivers", o.Drivers, "number of simulated drivers")
	f.IntVar(&minutes, "minutes", int(o.Minutes), "replayed window, simulated minutes from its opening (--skip-minutes after the file's first pickup)")
	f.Float64Var(&o.SkipMinutes, "skip-minutes", o.SkipMinutes, "simulated minutes after the file's first pickup the window opens; "+
		"the trips that ended before it place the drivers (--driver-starts dropoffs-before)")
	f.StringVar(&matchMode, "match-mode", "", "the platform's FLAGDOWN_MATCH_MODE (greedy, batch or auto), for the summary; "+
		"the replay cannot observe it (default: FLAGDOWN_MATCH_MODE of this environment, else greedy)")
	f.Float64Var(&o.Speedup, "speedup", o.Speedup, "simulated seconds per wall second")
	f.DurationVar(&o.PingInterval, "ping-interval", o.PingInterval, "driver ping interval, simulated time")
	f.Float64Var(&o.AcceptProb, "accept-prob", o.AcceptProb, "probability a driver accepts an offer he answers (else declines), 0..1")
	f.BoolVar(&o.SendRule, "send-rule", o.SendRule, "the seed's send rule: a stationary or carrying driver sends a position only after 50 m or 15 s simulated "+
		"(every --ping-interval otherwise, a ride phase change at once); the summary reports the pings sent and the writes saved (--send-rule=false: every driver every --ping-interval)")
	f.BoolVar(&o.Push, "push", o.Push, "every simulated driver and rider holds a WebSocket (GET /ws): drivers react to pushed offers; false polls only")
	f.Float64Var(&o.NoAnswerProb, "no-answer-prob", o.NoAnswerProb, "probability, per offer, that a driver ignores it (neither accepts nor declines; the platform times it out), 0..1")
	f.Float64Var(&o.OfflineProbPerHour, "offline-prob", o.OfflineProbPerHour,
		"probability that a driver drops offline for good (stops pinging) within any one simulated hour of his shift, 0..1 excluded; "+
			"a driver carrying a passenger drops after that ride")
	f.StringVar(&starts, "driver-starts", starts, fmt.Sprintf("where drivers start: %s (dropoffs of trips ended before the window, "+
		"else of trips outside it) or %s (the file's pickups, replayed ones included: optimistic)", replay.StartsDropoffsBefore, replay.StartsReplayPickups))
	f.IntVar(&o.DriversDropTo, "drivers-drop-to", 0, "supply drop: drivers left after it (0: none); the others end their shift (status offline) at --drivers-drop-at")
	f.Float64Var(&o.DriversDropAt, "drivers-drop-at", o.DriversDropAt, "supply drop: when, as a fraction of the window (0..1 excluded)")
	f.StringVar(&compareModes, "compare-modes", "", "replay the trips under each of these matching modes (e.g. greedy,batch,auto), each on a flagdown dev "+
		"of its own (this binary, a fresh schema and Redis prefix, FLAGDOWN_SIM_SPEEDUP = --speedup; --url is not used), and print the comparison table; "+
		"--summary gets the comparison, <summary>-<mode>.json each run")
	f.BoolVar(&compareKeep, "compare-keep", false, "keep each compared mode's schema and Redis keys after its run")
	f.Float64Var(&o.DriverSpeedMPS, "driver-speed-mps", o.DriverSpeedMPS, "straight-line driving speed, metres per simulated second")
	f.Uint64Var(&o.Seed, "seed", o.Seed, "random seed (driver positions, think times, accept, no-answer and offline draws)")
	f.StringVar(&o.SummaryPath, "summary", o.SummaryPath, "where to write the summary JSON (empty: none)")
	f.IntVar(&o.Concurrency, "concurrency", o.Concurrency, "HTTP workers (and idle connections kept to the platform)")
	f.DurationVar(&o.Drain, "drain", o.Drain, "extra simulated time after the last order to let rides finish matching")
	f.IntVar(&o.BatchSize, "batch", o.BatchSize, fmt.Sprintf("pings per location-update call, 1..%d (1 = one ping per call)", replay.MaxBatchSize))
	f.DurationVar(&o.ProgressEvery, "progress-every", replay.DefaultProgressEvery,
		"wall time between two progress lines when the output is not a terminal (on a terminal: a progress bar)")
	f.BoolVar(&o.CheckURL, "check-url", o.CheckURL, "fail fast unless GET <url>/readyz answers 200")
	f.BoolVar(&o.SpreadMinute, "spread-minute", o.SpreadMinute, "spread pickups recorded to the whole minute uniformly over that minute (seeded)")
	f.StringVar(&o.RunID, "run-id", "", "id embedded in driver and rider ids (default: derived from the clock, unique per run)")
	f.BoolVar(&o.Verify, "verify", o.Verify, "check the platform's invariants at the end (as flagdown verify does; needs its PostgreSQL and Redis)")
	f.DurationVar(&o.VerifyGrace, "verify-grace", o.VerifyGrace, "grace of the final invariant check (as flagdown verify --grace)")
	return cmd
}
