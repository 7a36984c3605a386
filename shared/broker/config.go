package broker

import "github.com/flagdown/flagdown/shared/config"

// ConfigCredentials are the broker credentials cfg names (FLAGDOWN_NATS_USER, _PASSWORD, _CREDS,
// _CA_FILE, _CERT_FILE, _KEY_FILE).
func ConfigCredentials(cfg *config.Config) Credentials {
	return Credentials{User: cfg.NATSUser, Password: cfg.NATSPassword, CredsFile: cfg.NATSCreds,
		CAFile: cfg.NATSCAFile, CertFile: cfg.NATSCertFile, KeyFile: cfg.NATSKeyFile}
}
