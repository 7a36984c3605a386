//go:build !production

package main

import (
	"crypto/rand"
	"encoding/hex"
	"log/slog"

	"github.com/flagdown/flagdown/shared/config"
)

// ensureTokenSecret gives a platform run without a key source (neither FLAGDOWN_JWT_SECRET nor
// FLAGDOWN_JWKS_URL) a random HS256 secret of 32 random bytes in hex, and logs the flagdown token
// command that mints client tokens for it: the secret is this run's only, and a local one.
func ensureTokenSecret(cfg *config.Config, log *slog.Logger) error {
	if cfg.JWTSecret != "" || cfg.JWKSURL != "" {
		return nil
	}
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	cfg.JWTSecret = hex.EncodeToString(b[:])
	log.Info("no FLAGDOWN_JWT_SECRET or FLAGDOWN_JWKS_URL set: using a random token secret for this run; mint a client token with",
		"command", "FLAGDOWN_JWT_SECRET="+cfg.JWTSecret+" flagdown token --role driver --sub d-1 --ttl 1h")
	return nil
}
