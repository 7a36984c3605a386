//go:build !production

package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/dispatch"
)

// newTokenCmd builds `flagdown token`: an HS256 client token for local use (shared/auth.Mint).
func newTokenCmd() *cobra.Command {
	var role, sub string
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Mint a client token (HS256, FLAGDOWN_JWT_SECRET) for local use",
		Long: `Prints a JWT for Authorization: Bearer <token>, signed HS256 with FLAGDOWN_JWT_SECRET (or its
secret file) and carrying sub, role, iss FLAGDOWN_JWT_ISSUER, aud FLAGDOWN_JWT_AUDIENCE, iat and
exp = now + --ttl. Roles: driver (pings as himself, answers his offers and rides), rider (orders,
reads and cancels his rides, coarse nearby), ops (views: reads any ride, exact nearby, the
operations map), service (the gateway aggregator: ping batches for many drivers), admin (runs
reconcile on demand). A deployment behind an identity provider (FLAGDOWN_JWKS_URL) gets its tokens
there.`,
		Example: `  FLAGDOWN_JWT_SECRET=... flagdown token --role driver --sub d-7 --ttl 1h`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load()
			if err != nil {
				return err
			}
			if cfg.JWTSecret == "" {
				return errors.New("no FLAGDOWN_JWT_SECRET: set the secret the platform verifies with (make dev writes it to .local/dev.env; flagdown dev alone writes the one it generated to the 0600 file its log names)")
			}
			r := auth.Role(role)
			if !r.Valid() {
				return fmt.Errorf("--role must be driver, rider, ops, service or admin, not %q", role)
			}
			if err := dispatch.ValidateID("--sub", sub); err != nil {
				return err
			}
			if ttl <= 0 {
				return errors.New("--ttl must be positive")
			}
			tok, err := auth.Mint([]byte(cfg.JWTSecret), cfg.JWTIssuer, cfg.JWTAudience, auth.Identity{Subject: sub, Role: r}, ttl)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), tok)
			return nil
		},
	}
	cmd.Flags().StringVar(&role, "role", "", "driver, rider, ops, service or admin (required)")
	cmd.Flags().StringVar(&sub, "sub", "", "the driver's or rider's id, or the operator's or service's (required)")
	cmd.Flags().DurationVar(&ttl, "ttl", time.Hour, "lifetime of the token")
	_ = cmd.MarkFlagRequired("role")
	_ = cmd.MarkFlagRequired("sub")
	return cmd
}
