package main

import (
	"github.com/spf13/cobra"

	"github.com/flagdown/flagdown/shared/expiry"
	"github.com/flagdown/flagdown/shared/host"
	"github.com/flagdown/flagdown/shared/redisstore"
)

func newExpirySourceCmd() *cobra.Command {
	var configured bool
	var metricsAddr string
	cmd := &cobra.Command{
		Use:   "expiry-source",
		Short: "Publish the expiry of heartbeats, offer locks and retry timers as events (Redis → broker)",
		Long: `Subscribes to Redis's expired keyevent notifications (enabling notify-keyspace-events Ex at start
unless --notifications-configured) and sweeps the deadline set every FLAGDOWN_EXPIRY_SWEEP_INTERVAL,
publishing one io.flagdown.redis.key.expired.v1 event per expired timed key to the Knative Broker at
K_SINK, or else the NATS broker at NATS_URL.
Several copies may run at once: event ids are deterministic, so each expiry has one effect.
flagdown dev runs one itself. Stops gracefully on SIGINT/SIGTERM. --metrics-addr serves its
Prometheus metrics; traces go to the OTLP endpoint of the OTEL_* environment when one is set.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			w, err := startWorker(ctx, "flagdown-expiry-source", metricsAddr)
			if err != nil {
				return err
			}
			defer w.stop()
			cfg, keys, log := w.cfg, w.keys, w.log
			rdb, err := redisstore.OpenTimeout(ctx, cfg.RedisURL, cfg.RedisTimeout)
			if err != nil {
				return err
			}
			defer func() { _ = rdb.Close() }()
			if err := redisstore.CheckPrefix(rdb, cfg.RedisPrefix); err != nil {
				return err
			}
			publish, closePublisher, target, err := eventPublisher(ctx, cfg)
			if err != nil {
				return err
			}
			defer closePublisher()
			src := expiry.New(host.NewStore(rdb, cfg), expiry.Publisher(publish),
				expiry.Options{SweepInterval: cfg.ExpirySweepInterval, NotificationsConfigured: configured, Log: log, Keys: keys})
			log.Info("expiry source starting", "redis", redisstore.Addr(rdb), "sweep", cfg.ExpirySweepInterval, "publish to", target)
			if err := src.Run(ctx); err != nil && ctx.Err() == nil {
				return err
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&configured, "notifications-configured", false,
		"notify-keyspace-events (including Ex) is set by the provider: do not CONFIG GET/SET it")
	cmd.Flags().StringVar(&metricsAddr, "metrics-addr", "", metricsAddrUsage)
	return cmd
}
