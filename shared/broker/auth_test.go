package broker_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/broker"
	"github.com/flagdown/flagdown/shared/cloudevent"
)

// natsServerBin is the nats-server binary the private server of TestNATSPermissions runs.
func natsServerBin(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("NATS_SERVER_BIN"), "/usr/sbin/nats-server"} {
		if p != "" {
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
	}
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p
	}
	t.Skip("no nats-server binary (apt-get install nats-server, or set NATS_SERVER_BIN)")
	return ""
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key into dir; the certificate
// is its own CA.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "flagdown test nats"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// privateNATS starts a private nats-server on a free loopback port with JetStream, TLS (a
// self-signed certificate made here, returned as the CA file) and the repository's
// deploy/nats/authorization.conf, its users' passwords given in the server's environment. It is
// stopped at the end of the test.
func privateNATS(t *testing.T, passwords map[string]string) (url, caFile string) {
	t.Helper()
	bin := natsServerBin(t)
	dir := t.TempDir()
	auth, err := os.ReadFile(filepath.Join(testkit.RepoRoot(t), "deploy", "nats", "authorization.conf"))
	if err != nil {
		t.Fatalf("the sample authorization of deploy/nats: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "authorization.conf"), auth, 0o600); err != nil {
		t.Fatal(err)
	}
	cert, key := selfSigned(t, dir)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	conf := fmt.Sprintf("listen: 127.0.0.1:%d\njetstream: {store_dir: %q}\ntls: {cert_file: %q, key_file: %q}\ninclude ./authorization.conf\n",
		port, filepath.Join(dir, "js"), cert, key)
	confFile := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(confFile, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "-c", confFile)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range passwords {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var logs testkit.Output
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})
	testkit.Eventually(t, 20*time.Second, func() (bool, string) {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
		}
		return err == nil, "nats-server not listening; its output:\n" + logs.String()
	})
	return fmt.Sprintf("nats://127.0.0.1:%d", port), cert
}

// TestNATSPermissions runs a private nats-server with TLS and the users and permissions of
// deploy/nats/authorization.conf: the relay's credentials set the streams up and publish an event;
// the triggers' credentials consume and acknowledge it (through the real Dispatcher) but cannot
// publish an event (the server refuses the publish and the stream stays as it was); no
// credentials, or no CA to verify the server's certificate, cannot connect at all.
func TestNATSPermissions(t *testing.T) {
	pw := map[string]string{
		"NATS_RELAY_PASSWORD": "relay-" + testkit.ID(), "NATS_EXPIRY_SOURCE_PASSWORD": "expiry-" + testkit.ID(),
		"NATS_TRIGGERS_PASSWORD": "triggers-" + testkit.ID(),
	}
	url, ca := privateNATS(t, pw)
	ctx := context.Background()
	const stream, prefix = "FLAGDOWN", "flagdown.events" // the defaults authorization.conf names
	relay := broker.Credentials{User: "flagdown-relay", Password: pw["NATS_RELAY_PASSWORD"], CAFile: ca}
	triggers := broker.Credentials{User: "flagdown-triggers", Password: pw["NATS_TRIGGERS_PASSWORD"], CAFile: ca}

	t.Run("NoCredentialsRefused", func(t *testing.T) {
		if b, err := broker.Connect(ctx, url, stream, prefix, broker.WithCredentials(broker.Credentials{CAFile: ca})); err == nil {
			b.Close()
			t.Fatal("connected without credentials")
		}
	})
	t.Run("UnverifiedServerRefused", func(t *testing.T) {
		c := relay
		c.CAFile = ""
		if b, err := broker.Connect(ctx, url, stream, prefix, broker.WithCredentials(c)); err == nil {
			b.Close()
			t.Fatal("connected to a TLS server without a CA to verify it")
		}
	})

	pub, err := broker.Connect(ctx, url, stream, prefix, broker.WithCredentials(relay))
	if err != nil {
		t.Fatalf("relay: %v", err)
	}
	defer pub.Close()
	e, err := cloudevent.New("ev-"+testkit.ID(), events.RideAccepted, "/flagdown/test", "r-nats-1",
		events.RideAcceptedData{RideID: "r-nats-1", RiderID: "rd-1", DriverID: "d-1", Version: 2}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(ctx, e); err != nil {
		t.Fatalf("the relay's credentials cannot publish: %v", err)
	}
	stored := func(b *broker.Broker) uint64 {
		t.Helper()
		s, err := b.JetStream().Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}
	if n := stored(pub); n != 1 {
		t.Fatalf("stream holds %d events after the relay's publish, want 1", n)
	}

	var violations atomic.Int64
	cons, err := broker.Connect(ctx, url, stream, prefix, broker.WithCredentials(triggers), broker.ExistingStreams(),
		broker.WithNATSOptions(nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) || strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
				violations.Add(1)
			}
		})))
	if err != nil {
		t.Fatalf("triggers: %v", err)
	}
	defer cons.Close()

	t.Run("TriggersConsumeAndAck", func(t *testing.T) {
		var got atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Ce-Id") == e.ID() {
				got.Add(1)
			}
			w.WriteHeader(http.StatusOK)
		}))
		defer srv.Close()
		d, err := broker.NewDispatcher(cons, []broker.Trigger{{Name: "notify", Types: []string{events.RideAccepted}, URL: srv.URL}}, 3, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- d.Run(runCtx) }()
		testkit.Eventually(t, 20*time.Second, func() (bool, string) {
			return got.Load() == 1 && d.Stats().Delivered == 1, fmt.Sprintf("delivered %d, stats %+v", got.Load(), d.Stats())
		})
		stop()
		if err := <-done; err != nil {
			t.Fatalf("dispatcher with the triggers' credentials: %v", err)
		}
	})

	t.Run("TriggersCannotPublish", func(t *testing.T) {
		forged, err := cloudevent.New("ev-"+testkit.ID(), events.RideAccepted, "/flagdown/test", "r-nats-1",
			events.RideAcceptedData{RideID: "r-nats-1", RiderID: "attacker", DriverID: "d-1", Version: 2147483647}, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		pctx, cancel := context.WithCancel(ctx)
		res := make(chan error, 1)
		go func() { res <- cons.Publish(pctx, forged) }()
		testkit.Eventually(t, 20*time.Second, func() (bool, string) {
			return violations.Load() > 0, "the server reported no permissions violation for the triggers' publish"
		})
		cancel()
		if err := <-res; err == nil {
			t.Error("the triggers' publish answered no error")
		}
		if n := stored(pub); n != 1 {
			t.Errorf("stream holds %d events after the triggers' publish, want still 1", n)
		}
	})
}
