package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flagdown/flagdown/shared/config"
)

func writeSecret(t *testing.T, dir, name, value string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(value), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestSecretFileName(t *testing.T) {
	for v, want := range map[string]string{"DATABASE_URL": "database-url", "REDIS_URL": "redis-url", "NATS_URL": "nats-url"} {
		if got := config.SecretFileName(v); got != want {
			t.Errorf("SecretFileName(%s) = %q, want %q", v, got, want)
		}
	}
}

func TestWithSecretsReadsFilesForUnsetVariables(t *testing.T) {
	dir := t.TempDir()
	writeSecret(t, dir, "database-url", "postgres://app:s3cret@db:5432/flagdown\n")
	writeSecret(t, dir, "redis-url", "  redis://:pw@redis:6379/0  ")
	in := map[string]string{"FLAGDOWN_SECRETS_DIR": dir, "NATS_URL": ""}
	got, err := config.WithSecrets(in)
	if err != nil {
		t.Fatal(err)
	}
	if got["DATABASE_URL"] != "postgres://app:s3cret@db:5432/flagdown" || got["REDIS_URL"] != "redis://:pw@redis:6379/0" {
		t.Errorf("secrets not read and trimmed: %v", got)
	}
	if got["NATS_URL"] != "" {
		t.Errorf("NATS_URL = %q without a nats-url file, want empty", got["NATS_URL"])
	}
	if _, ok := in["DATABASE_URL"]; ok {
		t.Errorf("WithSecrets modified its argument")
	}
}

func TestWithSecretsEnvironmentWins(t *testing.T) {
	dir := t.TempDir()
	writeSecret(t, dir, "redis-url", "redis://from-file:6379/0")
	got, err := config.WithSecrets(map[string]string{"FLAGDOWN_SECRETS_DIR": dir, "REDIS_URL": "redis://from-env:6379/1"})
	if err != nil {
		t.Fatal(err)
	}
	if got["REDIS_URL"] != "redis://from-env:6379/1" {
		t.Errorf("REDIS_URL = %q, want the environment's value", got["REDIS_URL"])
	}
}

func TestWithSecretsMissingDirectoryIsFine(t *testing.T) {
	got, err := config.WithSecrets(map[string]string{"FLAGDOWN_SECRETS_DIR": filepath.Join(t.TempDir(), "absent")})
	if err != nil {
		t.Fatal(err)
	}
	if got["DATABASE_URL"] != "" {
		t.Errorf("DATABASE_URL = %q from nowhere", got["DATABASE_URL"])
	}
}

func TestWithSecretsRejectsEmptyAndUnreadableFiles(t *testing.T) {
	dir := t.TempDir()
	writeSecret(t, dir, "database-url", " \n")
	_, err := config.WithSecrets(map[string]string{"FLAGDOWN_SECRETS_DIR": dir})
	if err == nil || !strings.Contains(err.Error(), "DATABASE_URL") || !strings.Contains(err.Error(), "empty") {
		t.Errorf("empty secret file: err = %v, want one naming DATABASE_URL and empty", err)
	}

	dir = t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "redis-url"), 0o700); err != nil { // a directory cannot be read as a file
		t.Fatal(err)
	}
	_, err = config.WithSecrets(map[string]string{"FLAGDOWN_SECRETS_DIR": dir})
	if err == nil || !strings.Contains(err.Error(), "REDIS_URL") {
		t.Errorf("unreadable secret file: err = %v, want one naming REDIS_URL", err)
	}
}

func TestLoadReadsSecretFiles(t *testing.T) {
	dir := t.TempDir()
	writeSecret(t, dir, "database-url", "postgres://app@db.example:5432/flagdown?sslmode=require\n")
	t.Setenv("FLAGDOWN_SECRETS_DIR", dir)
	t.Setenv("DATABASE_URL", "")
	t.Setenv("REDIS_URL", "redis://env.example:6379/0")
	c, err := config.Load()
	if err != nil {
		t.Fatal(err)
	}
	if c.DatabaseURL != "postgres://app@db.example:5432/flagdown?sslmode=require" {
		t.Errorf("DatabaseURL = %q, want the secret file's", c.DatabaseURL)
	}
	if c.RedisURL != "redis://env.example:6379/0" {
		t.Errorf("RedisURL = %q, want the environment's", c.RedisURL)
	}
}
