package main

import (
	"log/slog"
	"os"
	"sync/atomic"

	"github.com/spf13/cobra"

	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/outbox"
	"github.com/flagdown/flagdown/shared/pgstore"
)

func newRelayCmd() *cobra.Command {
	var metricsAddr string
	cmd := &cobra.Command{
		Use:   "relay",
		Short: "Run the outbox relay alone: publish outbox rows to the broker (K_SINK or NATS_URL)",
		Long: `Publishes the events transactions wrote to the outbox table to the Knative Broker at K_SINK, or
else the NATS JetStream broker at NATS_URL, in commit order per ride, and marks them published. Finds rows by
polling the unpublished-row index (waits of 2 ms doubling up to FLAGDOWN_RELAY_POLL_INTERVAL, 50 ms by
default: the bound from a commit to its publication) and on an explicit NOTIFY (reconcile); nothing
notifies at commit. Several copies may run at once. flagdown dev runs
one itself; this command is for deployments where the relay is its own Deployment.
FLAGDOWN_FAULT_RELAY_EXIT_AFTER_PUBLISH=N (chaos runs only) makes it exit with status 86 after
its N-th published event, before marking it. --metrics-addr serves its Prometheus metrics
(flagdown_outbox_published_total, the Go runtime's); traces go to the OTLP endpoint of the OTEL_*
environment when one is set.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			w, err := startWorker(ctx, "flagdown-relay", metricsAddr)
			if err != nil {
				return err
			}
			defer w.stop()
			cfg, keys, log := w.cfg, w.keys, w.log
			db, err := pgstore.Open(ctx, cfg.DatabaseURL, cfg.DatabaseSchema)
			if err != nil {
				return err
			}
			defer db.Close()
			publish, closePublisher, target, err := eventPublisher(ctx, cfg)
			if err != nil {
				return err
			}
			defer closePublisher()
			log.Info("outbox relay running", "publish to", target)
			opts := outbox.Options{PollInterval: cfg.RelayPollInterval, Log: log, Keys: keys}
			if n := cfg.FaultRelayExitAfterPublish; n > 0 {
				opts.AfterPublish = exitAfterPublish(n, log)
			}
			err = outbox.New(db, publish, opts).Run(ctx)
			if ctx.Err() != nil {
				return nil
			}
			return err
		},
	}
	cmd.Flags().StringVar(&metricsAddr, "metrics-addr", "", metricsAddrUsage)
	return cmd
}

// exitAfterPublish is the relay's FLAGDOWN_FAULT_RELAY_EXIT_AFTER_PUBLISH hook (chaos runs only): at
// the n-th published event it exits the process with config.FaultRelayExitStatus before the row is
// marked, leaving the row to be published again by this or another relay.
func exitAfterPublish(n int, log *slog.Logger) func() {
	var published atomic.Int64
	return func() {
		if published.Add(1) == int64(n) {
			log.Warn("fault injection: exiting after publishing, before marking the row published",
				"published", n, "exit_status", config.FaultRelayExitStatus)
			os.Exit(config.FaultRelayExitStatus)
		}
	}
}
