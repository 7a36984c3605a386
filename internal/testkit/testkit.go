// Package testkit gives each test its own slice of the real services: a fresh PostgreSQL schema with
// the migrations applied, a unique Redis key prefix, and a NATS JetStream server. Everything is removed
// when the test ends, so tests run in parallel and leave nothing behind.
//
// Services are found through DATABASE_URL, REDIS_URL and NATS_URL (the Makefile sets the first two);
// without NATS_URL an embedded nats-server with JetStream is started per test.
//
// It is test code: it lives under internal/, outside the production tree (shared/ and functions/), so
// nothing in a function image imports it.
package testkit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/flagdown/flagdown/shared/app"
	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/host"
	"github.com/flagdown/flagdown/shared/internalauth"
	"github.com/flagdown/flagdown/shared/pgstore"
)

// DefaultDatabaseURL is used when DATABASE_URL is unset.
const DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// DefaultRedisURL is used when REDIS_URL is unset.
const DefaultRedisURL = "redis://127.0.0.1:6379/0"

// ID returns a short random lower-case hex string for names.
func ID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// DatabaseURL returns DATABASE_URL or DefaultDatabaseURL.
func DatabaseURL() string {
	if u := os.Getenv("DATABASE_URL"); u != "" {
		return u
	}
	return DefaultDatabaseURL
}

// RedisURL returns REDIS_URL or DefaultRedisURL.
func RedisURL() string {
	if u := os.Getenv("REDIS_URL"); u != "" {
		return u
	}
	return DefaultRedisURL
}

// DB opens a migrated store in a new schema t_<random>, dropped (with its tables) when t ends.
func DB(t testing.TB) *pgstore.DB {
	t.Helper()
	ctx := context.Background()
	schema := "t_" + ID()
	db, err := pgstore.Open(ctx, DatabaseURL(), schema)
	if err != nil {
		t.Fatalf("testkit: postgres at %s: %v (is PostgreSQL running? `make services`)", DatabaseURL(), err)
	}
	t.Cleanup(func() {
		_, _ = db.Pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		db.Close()
	})
	if err := db.Migrate(ctx); err != nil {
		t.Fatalf("testkit: migrate: %v", err)
	}
	return db
}

// Redis returns a client and a unique key prefix "t:<random>:"; keys under it are deleted when t ends.
func Redis(t testing.TB) (*redis.Client, string) {
	t.Helper()
	opt, err := redis.ParseURL(RedisURL())
	if err != nil {
		t.Fatalf("testkit: REDIS_URL: %v", err)
	}
	rdb := redis.NewClient(opt)
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("testkit: redis at %s: %v (is Redis running? `make services`)", RedisURL(), err)
	}
	prefix := "t:" + ID() + ":"
	t.Cleanup(func() {
		ctx := context.Background()
		iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
			if len(keys) == 500 {
				rdb.Del(ctx, keys...)
				keys = keys[:0]
			}
		}
		if len(keys) > 0 {
			rdb.Del(ctx, keys...)
		}
		_ = rdb.Close()
	})
	return rdb, prefix
}

// NATS returns the URL of a JetStream-enabled NATS server: NATS_URL if set, otherwise an embedded
// server on a random loopback port with its store in t.TempDir(), shut down when t ends. Tests
// sharing an external server must use their own stream and subject names (see ID).
func NATS(t testing.TB) string {
	t.Helper()
	if u := os.Getenv("NATS_URL"); u != "" {
		return u
	}
	ns, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true,
		StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
	})
	if err != nil {
		t.Fatalf("testkit: nats server: %v", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatalf("testkit: nats server not ready")
	}
	t.Cleanup(ns.Shutdown)
	return ns.ClientURL()
}

// EventSigningKey is the FLAGDOWN_EVENT_SIGNING_KEY of the tests' publishers (key id "testkit", a
// fixed seed): fntest signs the events it sends with it (EventSigner), as the relay signs. Every Deps
// accepts its public key (EventVerifyKeys) and holds no private key, like a deployed function.
const EventSigningKey = "testkit:dGVzdGtpdC1ldmVudC1zaWduaW5nLWtleS0wMDAwMDE"

// InternalToken is the FLAGDOWN_INTERNAL_TOKEN of every Deps: fntest authorizes its reconcile and
// gateway-integration calls with it (InternalTokens). It is not a signing key.
const InternalToken = "testkit-internal-token-0123456789abcdef"

// EventSigner returns the signer over EventSigningKey.
func EventSigner() *internalauth.Signer {
	s, err := internalauth.ParseSigner(EventSigningKey)
	if err != nil {
		panic(err)
	}
	return s
}

// EventVerifyKeys is the FLAGDOWN_EVENT_VERIFY_KEYS of every Deps: EventSigner's public key.
func EventVerifyKeys() string { return EventSigner().VerifyKey() }

// InternalTokens returns the bearer tokens over InternalToken.
func InternalTokens() *internalauth.Tokens {
	k, err := internalauth.ParseTokens(InternalToken)
	if err != nil {
		panic(err)
	}
	return k
}

// Deps builds function dependencies (with push: pass .Deps, the host.Deps, to a function that does
// not push) over a fresh schema and Redis prefix (see DB and Redis), with
// the default configuration changed by tune (may be nil). The configuration has a random HS256
// FLAGDOWN_JWT_SECRET (tune sees it and may change it), and Auth verifies tokens minted with it.
// Everything is removed when t ends.
func Deps(t testing.TB, tune func(*config.Config)) *app.Deps {
	t.Helper()
	cfg, err := config.FromEnv(map[string]string{})
	if err != nil {
		t.Fatalf("testkit: config: %v", err)
	}
	db := DB(t)
	rdb, prefix := Redis(t)
	cfg.DatabaseURL, cfg.DatabaseSchema = DatabaseURL(), db.Schema
	cfg.RedisURL, cfg.RedisPrefix = RedisURL(), prefix
	// Public keys and the bearer token only, as a deployed function has; tune may change them.
	cfg.EventVerifyKeys, cfg.InternalToken = EventVerifyKeys(), InternalToken
	cfg.JWTSecret = "test-secret-" + ID() + ID() + ID()
	if tune != nil {
		tune(cfg)
	}
	v, err := auth.FromConfig(cfg)
	if err != nil {
		t.Fatalf("testkit: token verifier: %v", err)
	}
	t.Cleanup(v.Close)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	store := host.NewStore(rdb, cfg)
	HealthyRedis(t, store)
	return app.With(host.New(cfg, db, store, log, v))
}

// Run runs fn (a component's Run method) in the background until t ends, then cancels its context
// and fails t unless fn returns nil within 30 seconds.
func Run(t testing.TB, fn func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("Run did not return after cancel")
		}
	})
}

// StreamMessages returns every message stored in the JetStream stream, in stream order.
func StreamMessages(t testing.TB, js jetstream.JetStream, stream string) []jetstream.RawStreamMsg {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("testkit: stream %s: %v", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatalf("testkit: stream %s: %v", stream, err)
	}
	var out []jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("testkit: stream %s message %d: %v", stream, seq, err)
		}
		out = append(out, *m)
	}
	return out
}

// PollInterval is how long Eventually waits between two calls of its condition (20 ms).
const PollInterval = 20 * time.Millisecond

// Eventually calls cond every PollInterval until it reports true, and fails the test once within
// (wall time) has passed without that, with the description cond returned last (what it saw, or
// what it waits for). Use generous limits: it waits for state, it does not measure speed.
func Eventually(t testing.TB, within time.Duration, cond func() (ok bool, state string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, state)
		}
		time.Sleep(PollInterval)
	}
}

// UnreachableRedis returns a client of a Redis that is not there: a 127.0.0.1 port just freed,
// no retries, 200 ms timeouts, so every command fails at once with a refused connection (closed
// with the test).
func UnreachableRedis(t testing.TB) *redis.Client {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testkit: free port: %v", err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}
