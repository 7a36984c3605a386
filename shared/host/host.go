// Package host builds what a function needs to run in a process, once per process: the
// configuration, the PostgreSQL pool, the Redis store, a logger, the token verifier, the rate
// limiter, the pricing service, the internal credential, the dispatch rules and the lifecycle
// service over them (Deps); the lazy builder of the OpenFaaS Handle(w, r) entry point (Lazy,
// Process); and the HTTP edge of event-triggered functions (EventHandler).
//
// The layering, from the bottom:
//
//   - domain and adapter packages (dispatch, config, pgstore, redisstore, lifecycle, pricing, ...)
//     take narrow dependencies and import neither this package nor shared/app;
//   - host composes them for a function that does not push, and links no push code (shared/push,
//     the AWS SDK);
//   - shared/app adds push (shared/push over API Gateway and SNS, so the AWS SDK) on top of host, for
//     the functions that push and for cmd/.
//
// internal/archtest fails when an import breaks this layering (it reads `go list -deps`).
package host

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/httpx"
	"github.com/flagdown/flagdown/shared/internalauth"
	"github.com/flagdown/flagdown/shared/lifecycle"
	"github.com/flagdown/flagdown/shared/logging"
	"github.com/flagdown/flagdown/shared/pgstore"
	"github.com/flagdown/flagdown/shared/pricing"
	"github.com/flagdown/flagdown/shared/ratelimit"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// Deps are a process's shared dependencies. Build them once (Open) and pass them to every
// function's New; they are safe for concurrent use.
type Deps struct {
	// Config is the validated configuration (config.Load).
	Config *config.Config
	// DB is the PostgreSQL pool.
	DB *pgstore.DB
	// Redis is the Redis store (NewStore).
	Redis *redisstore.Store
	// Log is the process's logger (NewLogger).
	Log *slog.Logger
	// Auth verifies client tokens (auth.FromConfig); nil when no key source is configured, and then
	// every client-facing function answers 503 (auth.Require).
	Auth *auth.Verifier
	// Rules are Config's dispatch rules (config.Config.Rules), built once by New.
	Rules dispatch.Rules

	internalOnce sync.Once
	verifier     *internalauth.Verifier
	tokens       *internalauth.Tokens
	limiterOnce  sync.Once
	limiter      *ratelimit.Limiter
	pricingOnce  sync.Once
	pricing      *pricing.Service
}

// New returns the Deps over an open pool, store and token verifier (Open's last step; tests build
// theirs with it), with the rules of cfg.
func New(cfg *config.Config, db *pgstore.DB, store *redisstore.Store, log *slog.Logger, v *auth.Verifier) *Deps {
	return &Deps{Config: cfg, DB: db, Redis: store, Log: log, Auth: v, Rules: cfg.Rules()}
}

// Lifecycle returns a lifecycle service (the one owner of state changes) over d's pool, store,
// logger and rules, emitting events with source (the calling function's CloudEvent source).
func (d *Deps) Lifecycle(source string) *lifecycle.Service {
	return lifecycle.New(lifecycle.Deps{DB: d.DB, Redis: d.Redis, Log: d.Log, Rules: d.Rules}, source)
}

// Limiter returns the process's rate limiter (shared/ratelimit) over its Redis, with the budgets of
// FLAGDOWN_RATE_* (ratelimit.FromConfig), built once.
func (d *Deps) Limiter() *ratelimit.Limiter {
	d.limiterOnce.Do(func() {
		d.limiter = ratelimit.NewTimeout(d.Redis.Client(), d.Config.RedisPrefix, ratelimit.FromConfig(d.Config), d.Config.RedisTimeout, d.Log)
	})
	return d.limiter
}

// Pricing returns the process's fare and wait quoter (shared/pricing) over its Redis, with the
// surge settings of FLAGDOWN_SURGE_*, built once.
func (d *Deps) Pricing() *pricing.Service {
	d.pricingOnce.Do(func() { d.pricing = pricing.New(d.Redis, d.Config, d.Log) })
	return d.pricing
}

// EventVerifier returns the public keys event signatures are checked with (Config.EventVerifyKeys,
// with the maximum age Config.EventMaxAge; shared/internalauth), parsed once; nil (verifies
// nothing) when none is configured. Config.Validate refuses a malformed value.
func (d *Deps) EventVerifier() *internalauth.Verifier {
	d.parseInternal()
	return d.verifier
}

// InternalTokens returns the bearer tokens of internal calls that are not events
// (Config.InternalToken; shared/internalauth), parsed once; nil (accepts nothing) when none is
// configured.
func (d *Deps) InternalTokens() *internalauth.Tokens {
	d.parseInternal()
	return d.tokens
}

func (d *Deps) parseInternal() {
	d.internalOnce.Do(func() {
		d.verifier, _ = internalauth.ParseVerifier(d.Config.EventVerifyKeys, d.Config.EventMaxAge)
		d.tokens, _ = internalauth.ParseTokens(d.Config.InternalToken)
	})
}

// NewLogger returns the process's logger (shared/logging) on standard error, in cfg's
// FLAGDOWN_LOG_FORMAT at its FLAGDOWN_LOG_LEVEL; JSON at info for a nil cfg (a configuration that
// failed to load).
func NewLogger(cfg *config.Config) *slog.Logger {
	format, level := logging.FormatJSON, slog.LevelInfo
	if cfg != nil {
		format, level = cfg.LogFormat, cfg.LogLevel
	}
	log, err := logging.New(os.Stderr, format, level)
	if err != nil { // a Config that skipped Validate
		log, _ = logging.New(os.Stderr, logging.FormatJSON, level)
		log.Error("unknown log format; logging JSON", "err", err)
	}
	return log
}

// Open connects to PostgreSQL and Redis (one server, a Sentinel-followed primary or a Redis Cluster,
// see redisstore.OpenTimeout; FLAGDOWN_REDIS_TIMEOUT bounds every wait on it) as cfg
// says, refusing a cluster with a key prefix without hash tag (redisstore.CheckPrefix). It does not
// apply migrations. A nil log is NewLogger(cfg).
func Open(ctx context.Context, cfg *config.Config, log *slog.Logger) (*Deps, error) {
	if log == nil {
		log = NewLogger(cfg)
	}
	db, err := pgstore.Open(ctx, cfg.DatabaseURL, cfg.DatabaseSchema)
	if err != nil {
		return nil, err
	}
	rdb, err := redisstore.OpenTimeout(ctx, cfg.RedisURL, cfg.RedisTimeout)
	if err == nil {
		if err = redisstore.CheckPrefix(rdb, cfg.RedisPrefix); err != nil {
			_ = rdb.Close()
		}
	}
	if err != nil {
		db.Close()
		return nil, err
	}
	v, err := auth.FromConfig(cfg)
	if err != nil {
		db.Close()
		_ = rdb.Close()
		return nil, err
	}
	return New(cfg, db, NewStore(rdb, cfg), log, v), nil
}

// NewStore returns the Redis store over rdb configured as cfg says (prefix, heartbeat TTL, speed
// limit, driver-state TTL, miss memory, ping budget, offline brake, Redis timeout, and the position
// push interval when push is on).
func NewStore(rdb redis.UniversalClient, cfg *config.Config) *redisstore.Store {
	s := redisstore.New(rdb, cfg.RedisPrefix, cfg.HeartbeatTTL, cfg.MaxSpeedMPS)
	s.DriverStateTTL, s.MissMemory, s.BatchWindow = cfg.DriverStateTTL, cfg.MissMemory, cfg.BatchWindow
	s.PingsPerMin = cfg.RatePingsPerMin
	s.OfflineBrakeShare, s.OfflineBrakeMinDrivers = cfg.OfflineBrakeShare, cfg.OfflineBrakeMinDrivers
	s.Timeout = cfg.RedisTimeout
	if cfg.PushEndpoint != "" {
		s.PositionPushInterval = cfg.PushPositionInterval
	}
	return s
}

// Close releases the pools and stops the token verifier's key refresh.
func (d *Deps) Close() {
	d.Auth.Close()
	d.DB.Close()
	_ = d.Redis.Client().Close()
}

// Ready checks that PostgreSQL and Redis answer.
func (d *Deps) Ready(ctx context.Context) error {
	if err := d.DB.Pool.Ping(ctx); err != nil {
		return dispatch.Unavailable("postgres", err)
	}
	return d.Redis.Ping(ctx)
}

// ServiceArea returns the configured service area (Rules.ServiceArea).
func (d *Deps) ServiceArea() dispatch.Area { return d.Rules.ServiceArea }

var (
	processMu   sync.Mutex
	processDeps *Deps
)

// Process returns the process-wide Deps built from the environment, building them on first use.
// A failed build (a dependency down at start) is retried on the next call rather than cached.
func Process(ctx context.Context) (*Deps, error) {
	processMu.Lock()
	defer processMu.Unlock()
	if processDeps != nil {
		return processDeps, nil
	}
	cfg, err := config.Load()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	d, err := Open(ctx, cfg, nil)
	if err != nil {
		return nil, err
	}
	processDeps = d
	return d, nil
}

// Lazy is an http.Handler that builds its real handler from the process's dependencies (a T) on
// first request, the shape the OpenFaaS golang-middleware template needs (a package-level
// Handle(w, r)).
type Lazy[T any] struct {
	open  func(context.Context) (T, error)
	build func(T) http.Handler
	mu    sync.Mutex
	h     atomic.Pointer[http.Handler]
}

// NewLazy returns a Lazy that calls build once the process Deps exist (Process).
func NewLazy(build func(*Deps) http.Handler) *Lazy[*Deps] { return LazyOver(Process, build) }

// LazyOver returns a Lazy that calls build once open has returned the process's dependencies; open
// is called on each request until it succeeds, and must itself build them once per process (as
// Process does). shared/app uses it for the dependencies of functions that push.
func LazyOver[T any](open func(context.Context) (T, error), build func(T) http.Handler) *Lazy[T] {
	return &Lazy[T]{open: open, build: build}
}

// ServeHTTP serves with the built handler, or answers 503 unavailable while the dependencies cannot
// be built.
func (l *Lazy[T]) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h := l.h.Load(); h != nil {
		(*h).ServeHTTP(w, r)
		return
	}
	l.mu.Lock()
	if l.h.Load() == nil {
		d, err := l.open(r.Context())
		if err != nil {
			l.mu.Unlock()
			httpx.WriteError(w, r, nil, dispatch.Unavailable("dependencies", fmt.Errorf("start-up: %w", err)))
			return
		}
		h := l.build(d)
		l.h.Store(&h)
	}
	l.mu.Unlock()
	(*l.h.Load()).ServeHTTP(w, r)
}
