package main

import (
	"errors"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/flagdown/flagdown/shared/broker"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/expiry"
	"github.com/flagdown/flagdown/shared/redisstore"
)

func newExpirySourceCmd() *cobra.Command {
	var configured bool
	cmd := &cobra.Command{
		Use:   "expiry-source",
		Short: "Publish the expiry of heartbeats, offer locks and retry timers as events (Redis → broker)",
		Long: `Subscribes to Redis's expired keyevent notifications (enabling notify-keyspace-events Ex at start
unless --notifications-configured) and sweeps the deadline set every FLAGDOWN_EXPIRY_SWEEP_INTERVAL,
publishing one io.flagdown.redis.key.expired.v1 event per expired timed key on the broker at NATS_URL.
Several copies may run at once: event ids are deterministic, so each expiry has one effect.
flagdown dev runs one itself. Stops gracefully on SIGINT/SIGTERM.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load()
			if err != nil {
				return err
			}
			if cfg.NATSURL == "" {
				return errNoNATS
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, nil))
			ctx := cmd.Context()
			rdb, err := redisstore.Open(ctx, cfg.RedisURL)
			if err != nil {
				return err
			}
			defer func() { _ = rdb.Close() }()
			b, err := broker.Connect(ctx, cfg.NATSURL, cfg.NATSStream, cfg.SubjectPrefix)
			if err != nil {
				return err
			}
			defer b.Close()
			src := expiry.New(redisstore.New(rdb, cfg.RedisPrefix, cfg.HeartbeatTTL, cfg.MaxSpeedMPS), b.Publish,
				expiry.Options{SweepInterval: cfg.ExpirySweepInterval, NotificationsConfigured: configured, Log: log})
			log.Info("expiry source starting", "redis", rdb.Options().Addr, "sweep", cfg.ExpirySweepInterval)
			if err := src.Run(ctx); err != nil && ctx.Err() == nil {
				return err
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&configured, "notifications-configured", false,
		"notify-keyspace-events (including Ex) is set by the provider: do not CONFIG GET/SET it")
	return cmd
}

// errNoNATS: the expiry source publishes to a running broker; it does not embed one.
var errNoNATS = errors.New("expiry-source needs NATS_URL (the broker of a running flagdown dev, or the cluster's NATS)")
