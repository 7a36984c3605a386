package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flagdown/flagdown/shared/config"
)

// TestKeygen: flagdown keygen writes a signing key, its public key and a token as 0600 secret files
// that shared/config loads, and never overwrites them.
func TestKeygen(t *testing.T) {
	dir := t.TempDir()
	cmd := newKeygenCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--dir", dir, "--kid", "k-test"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"flagdown-event-signing-key", "flagdown-event-verify-keys", "flagdown-internal-token"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", name, fi.Mode().Perm())
		}
		b, _ := os.ReadFile(filepath.Join(dir, name))
		if strings.Contains(out.String(), strings.TrimSpace(string(b))) {
			t.Errorf("keygen printed the content of %s", name)
		}
	}
	env, err := config.WithSecrets(map[string]string{"FLAGDOWN_SECRETS_DIR": dir})
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.FromEnv(env)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(c.EventSigningKey, "k-test:") || !strings.HasPrefix(c.EventVerifyKeys, "k-test:") || len(c.InternalToken) != 64 {
		t.Errorf("loaded %q %q, token of %d bytes", c.EventSigningKey[:7], c.EventVerifyKeys, len(c.InternalToken))
	}
	cmd = newKeygenCmd()
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--dir", dir})
	if err := cmd.Execute(); err == nil {
		t.Error("a second keygen into the same directory overwrote the files")
	}
}
