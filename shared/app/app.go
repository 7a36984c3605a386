// Package app builds the dependencies a function needs once per process (configuration, the
// PostgreSQL pool, the Redis client, a logger) and hands them to the function constructors.
package app

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
	"github.com/flagdown/flagdown/shared/logging"
	"github.com/flagdown/flagdown/shared/pgstore"
	"github.com/flagdown/flagdown/shared/pricing"
	"github.com/flagdown/flagdown/shared/push"
	"github.com/flagdown/flagdown/shared/ratelimit"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// Deps are a process's shared dependencies. Build them once (Open) and pass them to every
// function's New; they are safe for concurrent use.
type Deps struct {
	Config *config.Config
	DB     *pgstore.DB
	Redis  *redisstore.Store
	Log    *slog.Logger
	// Auth verifies client tokens (auth.FromConfig); nil when no key source is configured, and then
	// every client-facing function answers 503 (auth.Require).
	Auth *auth.Verifier

	internalOnce sync.Once
	internal     *internalauth.Keys
	limiterOnce  sync.Once
	limiter      *ratelimit.Limiter
	pricingOnce  sync.Once
	pricing      *pricing.Service
	pushOnce     sync.Once
	pusher       *push.Pusher
	snsOnce      sync.Once
	sns          *push.SNS
	// PushManagement, when set before the first Push call, is the management API client Push
	// uses instead of building one for FLAGDOWN_PUSH_ENDPOINT from the AWS credential chain
	// (flagdown dev hands its local gateway's).
	PushManagement *push.Management
	// PushSNS, when set before the first SNS call, is the mobile push fallback SNS returns instead
	// of building one from FLAGDOWN_SNS_* and the AWS credential chain.
	PushSNS *push.SNS
}

// SNS returns the process's mobile push fallback (push.NewSNS over FLAGDOWN_SNS_*), built once; it
// is off (Enabled false) when no platform application is configured or the AWS configuration
// cannot be loaded (logged).
func (d *Deps) SNS() *push.SNS {
	d.snsOnce.Do(func() {
		if d.PushSNS != nil {
			d.sns = d.PushSNS
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s, err := push.NewSNS(ctx, d.Config, d.DB)
		if err != nil {
			d.Log.Error("mobile push fallback off", "err", err)
			s = nil
		}
		d.sns = s
	})
	return d.sns
}

// Push returns the process's pusher (shared/push), built once: the connection registry over its
// Redis and, when FLAGDOWN_PUSH_ENDPOINT is set, the management API client signed with the AWS
// credential chain, and the mobile fallback of SNS. With no endpoint (or when the credential chain
// cannot be loaded, which is logged) the pusher is off: Enabled is false and every Send delivers
// nothing.
func (d *Deps) Push() *push.Pusher {
	d.pushOnce.Do(func() {
		reg := push.NewRegistry(d.Redis.Client(), d.Config.RedisPrefix)
		gw := d.PushManagement
		if ep := d.Config.PushEndpoint; gw == nil && ep != "" {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			m, err := push.ManagementFromEnv(ctx, ep)
			if err != nil {
				d.Log.Error("push off: management API client", "endpoint", ep, "err", err)
			} else {
				gw = m
			}
		}
		var mob push.Mobile
		if s := d.SNS(); s.Enabled() {
			mob = s
		}
		d.pusher = push.NewPusher(reg, gw, mob, d.Log)
	})
	return d.pusher
}

// Limiter returns the process's rate limiter (shared/ratelimit) over its Redis, with the budgets of
// FLAGDOWN_RATE_* (ratelimit.FromConfig), built once.
func (d *Deps) Limiter() *ratelimit.Limiter {
	d.limiterOnce.Do(func() {
		d.limiter = ratelimit.New(d.Redis.Client(), d.Config.RedisPrefix, ratelimit.FromConfig(d.Config))
	})
	return d.limiter
}

// Pricing returns the process's fare and wait quoter (shared/pricing) over its Redis, with the
// surge settings of FLAGDOWN_SURGE_*, built once.
func (d *Deps) Pricing() *pricing.Service {
	d.pricingOnce.Do(func() { d.pricing = pricing.New(d.Redis, d.Config, d.Log) })
	return d.pricing
}

// Internal returns the internal credential of Config.InternalSecret (shared/internalauth), parsed
// once; nil (verifies nothing) when none is configured. Config.Validate refuses a malformed value.
func (d *Deps) Internal() *internalauth.Keys {
	d.internalOnce.Do(func() {
		d.internal, _ = internalauth.Parse(d.Config.InternalSecret)
	})
	return d.internal
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

// Open connects to PostgreSQL and Redis (one server or a Redis Cluster, see redisstore.Open) as cfg
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
	rdb, err := redisstore.Open(ctx, cfg.RedisURL)
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
	return &Deps{Config: cfg, DB: db, Redis: NewStore(rdb, cfg), Log: log, Auth: v}, nil
}

// NewStore returns the Redis store over rdb configured as cfg says (prefix, heartbeat TTL, speed
// limit, driver-state TTL, miss memory, and the position push interval when push is on).
func NewStore(rdb redis.UniversalClient, cfg *config.Config) *redisstore.Store {
	s := redisstore.New(rdb, cfg.RedisPrefix, cfg.HeartbeatTTL, cfg.MaxSpeedMPS)
	s.DriverStateTTL, s.MissMemory, s.BatchWindow = cfg.DriverStateTTL, cfg.MissMemory, cfg.BatchWindow
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

// ServiceArea returns the configured service area.
func (d *Deps) ServiceArea() dispatch.Area {
	a := d.Config.ServiceArea
	return dispatch.Area{MinLat: a[0], MinLng: a[1], MaxLat: a[2], MaxLng: a[3]}
}

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

// Lazy is an http.Handler that builds its real handler from the process Deps on first request,
// the shape the OpenFaaS golang-middleware template needs (a package-level Handle(w, r)).
type Lazy struct {
	build func(*Deps) http.Handler
	mu    sync.Mutex
	h     atomic.Pointer[http.Handler]
}

// NewLazy returns a Lazy that calls build once the process Deps exist.
func NewLazy(build func(*Deps) http.Handler) *Lazy { return &Lazy{build: build} }

// ServeHTTP serves with the built handler, or answers 503 unavailable while Deps cannot be built.
func (l *Lazy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h := l.h.Load(); h != nil {
		(*h).ServeHTTP(w, r)
		return
	}
	l.mu.Lock()
	if l.h.Load() == nil {
		d, err := Process(r.Context())
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
