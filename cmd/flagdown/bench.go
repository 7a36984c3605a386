//go:build !production

package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"runtime/pprof"

	"github.com/spf13/cobra"

	"github.com/flagdown/flagdown/cmd/flagdown/internal/bench"
	"github.com/flagdown/flagdown/shared/app"
	"github.com/flagdown/flagdown/shared/config"
)

// benchPlatform adapts a local platform to bench.Platform.
type benchPlatform struct{ *platform }

// Deps are the platform's dependencies.
func (p benchPlatform) Deps() *app.Deps { return p.deps }

// benchOptions builds the bench options over cfg with this binary's gateway and platform.
func benchOptions(cfg *config.Config, log *slog.Logger) bench.Options {
	return bench.Options{
		Config:  cfg,
		Gateway: func(d *app.Deps) http.Handler { return gateway(d) },
		StartPlatform: func(ctx context.Context, c *config.Config, log *slog.Logger) (bench.Platform, error) {
			p, err := startPlatform(ctx, c, "", log)
			if err != nil {
				return nil, err
			}
			return benchPlatform{p}, nil
		},
		TripsPath:      "testdata/trips.csv",
		RedisBenchmark: "redis-benchmark",
		PGBench:        "pgbench",
		Log:            log,
	}
}

func newBenchCmd() *cobra.Command {
	var out, cpuProfile string
	var verbose bool
	var stages []string
	var fleets []int
	cfgLog := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	o := benchOptions(nil, cfgLog)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure flagdown beside the raw ceilings of its Redis and PostgreSQL, as ratios (make bench)",
		Long: `Runs against the real services of DATABASE_URL and REDIS_URL, each stage in its own schema
(bench_<random>) and key prefix (bench:<random>:), removed at the end, and prints one table where
every figure stands beside the ceiling measured in the same run:

  ingest        location-update over loopback HTTP (1, 100 and 500 pings per call, 16 connections)
                vs redis-benchmark GEOADD (-P 100 and -P 1, 16 clients) and a bare EVALSHA of the
                ping script (Store.ApplyPings, 16 callers)
  order-create  the handler over loopback HTTP (16 connections) vs pgbench -c 16 running the same
                transaction (cmd/flagdown/internal/bench/ordercreate.sql); PostgreSQL bytes per ride
  match         p50/p99 of one match at 1k, 10k, 100k and 1M drivers around real pickups,
                sequential and 16 concurrent, vs a bare GEOSEARCH; Redis bytes per online driver
  end-to-end    the whole platform open loop: ride requests at a constant arrival rate plus 50
                pings per ride, rising steps until offer p99 passes 200 ms

The table is also written as bench.json and bench.md under --out. --quick shrinks every stage to a
smoke run of well under a minute (CI); its figures are indicative only.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load()
			if err != nil {
				return err
			}
			level := slog.LevelInfo
			if verbose {
				level = slog.LevelDebug
			}
			o.Config, o.Stages, o.Fleets = cfg, stages, fleets
			o.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
			if cpuProfile != "" {
				f, err := os.Create(cpuProfile)
				if err != nil {
					return err
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return err
				}
				defer pprof.StopCPUProfile()
			}
			rep, err := bench.Run(cmd.Context(), o)
			if err != nil {
				return err
			}
			rep.WriteText(cmd.OutOrStdout())
			if o.Quick && !cmd.Flags().Changed("out") {
				out = ".local/bench" // a smoke run never overwrites the committed docs/bench.md
			}
			if out != "" {
				if err := rep.WriteFiles(out); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "written: %s/bench.json, %s/bench.md\n", out, out)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.Quick, "quick", false, "smoke run (CI): every stage shrunk, figures indicative only")
	f.StringVar(&out, "out", "docs", "folder bench.json and bench.md are written to (empty: none; --quick: .local/bench)")
	f.StringVar(&o.TripsPath, "trips", o.TripsPath, "trips CSV positions are drawn from")
	f.StringSliceVar(&stages, "stages", nil, "only these stages (ingest, order-create, match, end-to-end)")
	f.IntSliceVar(&fleets, "fleets", nil, "match fleet sizes, drivers (default 1000,10000,100000,1000000; quick 1000,10000)")
	f.DurationVar(&o.StepDuration, "step", 0, "length of one end-to-end step (default 12s; quick 3s)")
	f.StringVar(&o.RedisBenchmark, "redis-benchmark", o.RedisBenchmark, "redis-benchmark binary")
	f.StringVar(&o.PGBench, "pgbench", o.PGBench, "pgbench binary")
	f.StringVar(&o.MicroFile, "micro", "", "go test -bench -benchmem output to add as micro rows")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run (the handlers and the load generator: one process) to this file")
	f.BoolVarP(&verbose, "verbose", "v", false, "log failed requests")
	return cmd
}
