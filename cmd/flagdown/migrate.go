package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/host"
	"github.com/flagdown/flagdown/shared/pgstore"
)

// newMigrateCmd is `flagdown migrate`: a production command (a Job or a CI step).
func newMigrateCmd() *cobra.Command {
	var fresh bool
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply the database migrations (DATABASE_URL, FLAGDOWN_DB_SCHEMA)",
		Long: `Applies every migration not yet applied to the schema FLAGDOWN_DB_SCHEMA (default public) of
DATABASE_URL. With --fresh it first drops that schema with everything in it and deletes every Redis
key under FLAGDOWN_REDIS_PREFIX: a clean slate (make demo starts each run so). --fresh refuses the
schema public and an empty prefix.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load()
			if err != nil {
				return err
			}
			if fresh {
				if err := pgstore.DropSchema(cmd.Context(), cfg.DatabaseURL, cfg.DatabaseSchema); err != nil {
					return err
				}
			}
			d, err := host.Open(cmd.Context(), cfg, nil)
			if err != nil {
				return err
			}
			defer d.Close()
			if fresh {
				n, err := d.Redis.DeleteAll(cmd.Context())
				if err != nil {
					return err
				}
				fmt.Printf("fresh: dropped schema %s, deleted %d Redis keys under %q\n", cfg.DatabaseSchema, n, cfg.RedisPrefix)
			}
			if err := d.DB.Migrate(cmd.Context()); err != nil {
				return err
			}
			fmt.Println("migrations applied")
			return nil
		},
	}
	cmd.Flags().BoolVar(&fresh, "fresh", false, "drop FLAGDOWN_DB_SCHEMA (never public) and the Redis keys under FLAGDOWN_REDIS_PREFIX first")
	return cmd
}
