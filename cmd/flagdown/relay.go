package main

import (
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/outbox"
	"github.com/flagdown/flagdown/shared/pgstore"
)

func newRelayCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "relay",
		Short: "Run the outbox relay alone: publish outbox rows to the broker (K_SINK or NATS_URL)",
		Long: `Publishes the events transactions wrote to the outbox table to the Knative Broker at K_SINK, or
else the NATS JetStream broker at NATS_URL, in commit order per ride, and marks them published. Wakes on LISTEN/NOTIFY with a
polling fallback (FLAGDOWN_RELAY_POLL_INTERVAL). Several copies may run at once. flagdown dev runs
one itself; this command is for deployments where the relay is its own Deployment.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load()
			if err != nil {
				return err
			}
			log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
			ctx := cmd.Context()
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
			err = outbox.New(db, publish, outbox.Options{PollInterval: cfg.RelayPollInterval, Log: log}).Run(ctx)
			if ctx.Err() != nil {
				return nil
			}
			return err
		},
	}
}
