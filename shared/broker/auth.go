package broker

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"github.com/nats-io/nats.go"
)

// Credentials are how a process proves who it is to NATS and protects its connection. The
// server's authorization block (deploy/nats/authorization.conf) gives each user its subjects:
// only the outbox relay's and the expiry source's users may publish events; a trigger's (the
// JetStream connector, flagdown dev's dispatcher) may only consume, acknowledge and dead-letter.
// The zero value is an anonymous plain-text connection (flagdown dev's embedded broker).
type Credentials struct {
	// User and Password: a user of the server's authorization block (FLAGDOWN_NATS_USER,
	// FLAGDOWN_NATS_PASSWORD). Both or neither.
	User, Password string
	// CredsFile: a NATS credentials file (user JWT and nkey seed, nsc), FLAGDOWN_NATS_CREDS. Not
	// with User.
	CredsFile string
	// CAFile: PEM of the CA the server's certificate must chain to (FLAGDOWN_NATS_CA_FILE). Set,
	// the connection requires TLS.
	CAFile string
	// CertFile and KeyFile: a TLS client certificate and its key (FLAGDOWN_NATS_CERT_FILE,
	// FLAGDOWN_NATS_KEY_FILE). Both or neither.
	CertFile, KeyFile string
}

// Options are the nats.go options that apply c, or an error naming the setting that is wrong.
// Files are read now, so a missing or malformed one fails at start.
func (c Credentials) Options() ([]nats.Option, error) {
	var opts []nats.Option
	switch {
	case (c.User == "") != (c.Password == ""):
		return nil, fmt.Errorf("broker: FLAGDOWN_NATS_USER and FLAGDOWN_NATS_PASSWORD go together: set both or neither")
	case c.User != "" && c.CredsFile != "":
		return nil, fmt.Errorf("broker: FLAGDOWN_NATS_USER and FLAGDOWN_NATS_CREDS are two ways to authenticate: set one")
	case c.User != "":
		opts = append(opts, nats.UserInfo(c.User, c.Password))
	case c.CredsFile != "":
		if _, err := os.Stat(c.CredsFile); err != nil {
			return nil, fmt.Errorf("broker: FLAGDOWN_NATS_CREDS: %w", err)
		}
		opts = append(opts, nats.UserCredentials(c.CredsFile))
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return nil, fmt.Errorf("broker: FLAGDOWN_NATS_CERT_FILE and FLAGDOWN_NATS_KEY_FILE go together: set both or neither")
	}
	if c.CAFile == "" && c.CertFile == "" {
		return opts, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("broker: FLAGDOWN_NATS_CA_FILE: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("broker: FLAGDOWN_NATS_CA_FILE: %s holds no PEM certificate", c.CAFile)
		}
		tc.RootCAs = pool
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("broker: FLAGDOWN_NATS_CERT_FILE / FLAGDOWN_NATS_KEY_FILE: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return append(opts, nats.Secure(tc)), nil
}

// Option changes how Connect connects.
type Option func(*connectOptions)

type connectOptions struct {
	nats     []nats.Option
	existing bool
}

// WithCredentials authenticates with c (Credentials.Options); Connect fails when c is invalid.
func WithCredentials(c Credentials) Option {
	return func(o *connectOptions) {
		opts, err := c.Options()
		if err != nil {
			o.nats = append(o.nats, func(*nats.Options) error { return err })
			return
		}
		o.nats = append(o.nats, opts...)
	}
}

// WithNATSOptions adds nats.go options (an error handler, a name).
func WithNATSOptions(opts ...nats.Option) Option {
	return func(o *connectOptions) { o.nats = append(o.nats, opts...) }
}

// ExistingStreams makes Connect look the two streams up instead of creating or updating them: a
// trigger's credentials may read the streams, not change them (the relay, which may, sets them up).
func ExistingStreams() Option {
	return func(o *connectOptions) { o.existing = true }
}
