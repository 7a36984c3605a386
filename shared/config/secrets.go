package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Credentials reach a deployed function as files, never as plain environment variables: OpenFaaS
// mounts each secret a function lists at /var/openfaas/secrets/<name>, and the Knative manifests
// mount the flagdown Secret at the same path. Load reads them from there.

// SecretVars are the variables that may come from a secret file instead of the environment.
var SecretVars = []string{"DATABASE_URL", "REDIS_URL", "NATS_URL", "FLAGDOWN_NATS_PASSWORD", "FLAGDOWN_JWT_SECRET",
	"FLAGDOWN_EVENT_SIGNING_KEY", "FLAGDOWN_EVENT_VERIFY_KEYS", "FLAGDOWN_INTERNAL_TOKEN"}

// DefaultSecretsDir is where Load looks for secret files unless FLAGDOWN_SECRETS_DIR says otherwise.
const DefaultSecretsDir = "/var/openfaas/secrets"

// SecretFileName is the file name a secret variable is read from: lower case, '_' as '-'
// (DATABASE_URL → database-url), the OpenFaaS and Kubernetes secret naming rules.
func SecretFileName(variable string) string {
	return strings.ReplaceAll(strings.ToLower(variable), "_", "-")
}

// WithSecrets returns environ completed from secret files: for each of SecretVars that is unset or
// empty in environ, the file SecretFileName(v) in the directory environ["FLAGDOWN_SECRETS_DIR"]
// (default DefaultSecretsDir) is read, surrounding whitespace trimmed, and used as its value. A set
// variable always wins over a file; a missing file or directory is not an error. A file that exists
// but cannot be read or is empty is an error naming it. environ itself is not modified.
func WithSecrets(environ map[string]string) (map[string]string, error) {
	dir := environ["FLAGDOWN_SECRETS_DIR"]
	if dir == "" {
		dir = DefaultSecretsDir
	}
	out := make(map[string]string, len(environ)+len(SecretVars))
	for k, v := range environ {
		out[k] = v
	}
	for _, v := range SecretVars {
		if out[v] != "" {
			continue
		}
		path := filepath.Join(dir, SecretFileName(v))
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("config: %s from secret file: %w", v, err)
		}
		s := strings.TrimSpace(string(b))
		if s == "" {
			return nil, fmt.Errorf("config: %s from secret file: %s is empty", v, path)
		}
		out[v] = s
	}
	return out, nil
}

// processEnviron returns the process environment as a map.
func processEnviron() map[string]string {
	m := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}
