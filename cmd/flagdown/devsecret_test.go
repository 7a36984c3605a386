package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/config"
)

// TestDevNeverLogsTheTokenSecret: flagdown dev without a key source generates a token secret for the
// run; its log never carries the secret (nor the internal token), it names a file holding it that
// only its owner may read (0600, in a folder only he may enter, 0700), and Close removes that file.
func TestDevNeverLogsTheTokenSecret(t *testing.T) {
	db := testkit.DB(t)
	_, prefix := testkit.Redis(t)
	cfg, err := config.FromEnv(map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	id := testkit.ID()
	cfg.DatabaseURL, cfg.DatabaseSchema = testkit.DatabaseURL(), db.Schema
	cfg.RedisURL, cfg.RedisPrefix = testkit.RedisURL(), prefix
	cfg.NATSURL = testkit.NATS(t)
	cfg.NATSStream, cfg.SubjectPrefix = "T_"+id, "t"+id+".events"
	cfg.Addr = "127.0.0.1:0"
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	p, err := startPlatform(context.Background(), cfg, "", log)
	if err != nil {
		t.Fatalf("start platform: %v", err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = p.Close()
		}
	})
	secret := p.deps.Config.JWTSecret
	if secret == "" {
		t.Fatal("no token secret generated")
	}
	for name, v := range map[string]string{"token secret": secret, "internal token": p.deps.Config.InternalToken} {
		if strings.Contains(logs.String(), v) {
			t.Errorf("the log carries the %s:\n%s", name, logs.String())
		}
	}
	m := regexp.MustCompile(`secret_file=(\S+)`).FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("the log names no secret_file:\n%s", logs.String())
	}
	path := strings.Trim(m[1], `"`)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s: mode %v, want 0600", path, fi.Mode().Perm())
	}
	di, err := os.Stat(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if di.Mode().Perm() != 0o700 {
		t.Errorf("%s: mode %v, want 0700", filepath.Dir(path), di.Mode().Perm())
	}
	if b, err := os.ReadFile(path); err != nil || strings.TrimSpace(string(b)) != secret {
		t.Errorf("%s holds %q (%v), want the run's secret", path, b, err)
	}
	closed = true
	_ = p.Close()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("%s still there after Close (%v)", path, err)
	}
}
