//go:build !production

package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/flagdown/flagdown/shared/config"
)

// tokenSecretFile is the name of the file, in the run's own folder, that holds a token secret
// flagdown dev generated.
const tokenSecretFile = "flagdown-jwt-secret"

// ensureTokenSecret gives a platform run without a key source (neither FLAGDOWN_JWT_SECRET nor
// FLAGDOWN_JWKS_URL) a random HS256 secret of 32 random bytes in hex. The secret is never logged:
// it is written to a file only its owner may read (mode 0600) in a folder only he may enter (a
// fresh os.MkdirTemp folder, mode 0700), whose path is logged with the flagdown token command that
// reads it. It returns that folder ("" when nothing was generated), for the caller to remove when
// the run ends.
func ensureTokenSecret(cfg *config.Config, log *slog.Logger) (dir string, err error) {
	if cfg.JWTSecret != "" || cfg.JWKSURL != "" {
		return "", nil
	}
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	secret := hex.EncodeToString(b[:])
	if dir, err = os.MkdirTemp("", "flagdown-dev-"); err != nil { // mode 0700
		return "", fmt.Errorf("token secret: %w", err)
	}
	path := filepath.Join(dir, tokenSecretFile)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		_, err = f.WriteString(secret + "\n")
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", fmt.Errorf("token secret: %w", err)
	}
	cfg.JWTSecret = secret
	log.Info("no FLAGDOWN_JWT_SECRET or FLAGDOWN_JWKS_URL set: using a random token secret for this run, kept in secret_file (mode 0600, removed at exit); mint a client token with",
		"secret_file", path, "command", "FLAGDOWN_JWT_SECRET=$(cat "+path+") flagdown token --role driver --sub d-1 --ttl 1h")
	return dir, nil
}
