// Package bench is `flagdown bench`: flagdown's figures beside the raw ceilings of the same services
// measured in the same run, as ratios (issue 10). It measures ingest through the location-update
// handler over loopback HTTP against redis-benchmark's GEOADD and a bare EVALSHA of the ping script
// (Store.ApplyPings); order-create through its handler against pgbench running the same transaction;
// match latency at growing fleets against a bare GEOSEARCH; an open-loop end-to-end run of the whole
// platform at rising arrival rates; Redis bytes per online driver and PostgreSQL bytes per ride.
// Every stage runs in its own PostgreSQL schema and Redis key prefix, removed at the end.
package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/flagdown/flagdown/cmd/flagdown/internal/replay"
	"github.com/flagdown/flagdown/shared/app"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/dispatch"
)

// Platform is a running local platform (flagdown dev) the end-to-end stage drives.
type Platform interface {
	// Addr is the gateway's host:port.
	Addr() string
	// Deps are the platform's dependencies (its schema and key prefix).
	Deps() *app.Deps
	// Close stops it.
	Close() error
}

// Options configure a run.
type Options struct {
	// Config is the base configuration (services, token secret); every stage copies it and sets its
	// own schema and key prefix.
	Config *config.Config
	// Gateway builds the handler that serves every function under /function/<name>.
	Gateway func(*app.Deps) http.Handler
	// StartPlatform starts the whole platform (gateway, broker, triggers, relay, expiry source,
	// cron) over cfg on a free loopback port.
	StartPlatform func(ctx context.Context, cfg *config.Config, log *slog.Logger) (Platform, error)
	// TripsPath is the trips CSV positions are drawn from.
	TripsPath string
	// Quick shrinks every stage to a CI smoke run of well under a minute; figures are indicative only.
	Quick bool
	// Stages limits the run to these stages (ingest, order-create, match, end-to-end); empty: all.
	Stages []string
	// Fleets are the match fleet sizes, drivers; empty: 1k, 10k, 100k, 1M (quick: 1k, 10k).
	Fleets []int
	// StepDuration is the length of one end-to-end step; 0: 12 s (quick: 3 s).
	StepDuration time.Duration
	// RedisBenchmark and PGBench are the paths of redis-benchmark and pgbench.
	RedisBenchmark, PGBench string
	// MicroFile is `go test -bench -benchmem` output to add as micro rows; empty: none.
	MicroFile string
	// Log receives progress; nil discards it.
	Log *slog.Logger
}

// runner carries a run's state.
type runner struct {
	o     Options
	log   *slog.Logger
	trips []replay.Trip
	rep   *Report
	// orderCeiling is pgbench's order-create transactions/s of this run (0 until measured).
	orderCeiling float64
}

// Run runs the stages and returns the report. A stage that fails stops the run with its error.
func Run(ctx context.Context, o Options) (*Report, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Config.JWTSecret == "" && o.Config.JWKSURL == "" {
		o.Config.JWTSecret = randomHex(32)
	}
	if o.Config.JWKSURL != "" {
		return nil, errors.New("bench mints its own client tokens: unset FLAGDOWN_JWKS_URL")
	}
	tf, err := replay.LoadTripsFile(o.TripsPath)
	if err != nil {
		return nil, err
	}
	r := &runner{o: o, log: o.Log, trips: tf.Trips, rep: &Report{Started: time.Now().UTC(), Quick: o.Quick}}
	r.rep.Machine = Machine{CPUs: runtime.NumCPU(), LoadBefore: loadAvg(), GoVersion: runtime.Version()}
	r.versions(ctx)
	for _, s := range []struct {
		name string
		run  func(context.Context) error
	}{
		{"ingest", r.ingest}, {"order-create", r.orderCreate}, {"match", r.match}, {"end-to-end", r.endToEnd},
	} {
		if !r.wants(s.name) {
			continue
		}
		t0 := time.Now()
		r.log.Info("stage", "name", s.name)
		if err := s.run(ctx); err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		r.log.Info("stage done", "name", s.name, "took", time.Since(t0).Round(time.Millisecond))
	}
	if o.MicroFile != "" {
		if err := r.micro(o.MicroFile); err != nil {
			return nil, err
		}
	}
	r.rep.Machine.LoadAfter = loadAvg()
	r.rep.DurationS = time.Since(r.rep.Started).Seconds()
	return r.rep, nil
}

func (r *runner) wants(stage string) bool {
	if len(r.o.Stages) == 0 {
		return true
	}
	for _, s := range r.o.Stages {
		if s == stage {
			return true
		}
	}
	return false
}

func (r *runner) versions(ctx context.Context) {
	if opt, err := redis.ParseURL(r.o.Config.RedisURL); err == nil {
		rdb := redis.NewClient(opt)
		if info, err := rdb.InfoMap(ctx, "server").Result(); err == nil {
			r.rep.Machine.Redis = info["Server"]["redis_version"]
		}
		_ = rdb.Close()
	}
	if conn, err := pgx.Connect(ctx, r.o.Config.DatabaseURL); err == nil {
		_ = conn.QueryRow(ctx, "SHOW server_version").Scan(&r.rep.Machine.Postgres)
		_ = conn.Close(ctx)
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// stage is one stage's own slice of the services: a migrated schema and a key prefix.
type stage struct {
	deps *app.Deps
	cfg  *config.Config
}

// stageConfig copies the base configuration with a fresh schema bench_<id> and prefix bench:<id>:,
// then applies tune.
func (r *runner) stageConfig(tune func(*config.Config)) *config.Config {
	c := *r.o.Config
	id := randomHex(4)
	c.DatabaseSchema, c.RedisPrefix = "bench_"+id, "bench:"+id+":"
	if tune != nil {
		tune(&c)
	}
	return &c
}

// openStage opens and migrates the dependencies of a stage; close drops its schema and keys.
func (r *runner) openStage(ctx context.Context, tune func(*config.Config)) (*stage, error) {
	cfg := r.stageConfig(tune)
	d, err := app.Open(ctx, cfg, r.log)
	if err != nil {
		return nil, err
	}
	if err := d.DB.Migrate(ctx); err != nil {
		d.Close()
		return nil, err
	}
	return &stage{deps: d, cfg: cfg}, nil
}

func (s *stage) close() { dropStage(s.deps) }

// dropStage removes a stage's schema and keys and closes its dependencies.
func dropStage(d *app.Deps) {
	ctx := context.Background()
	_, _ = d.DB.Pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{d.DB.Schema}.Sanitize()+" CASCADE")
	rdb := d.Redis.Client()
	// The rate limiter (redis_rate) keys its state "rate:" + flagdown's key.
	for _, match := range []string{d.Config.RedisPrefix + "*", "rate:" + d.Config.RedisPrefix + "*"} {
		iter := rdb.Scan(ctx, 0, match, 5000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			if keys = append(keys, iter.Val()); len(keys) == 1000 {
				rdb.Unlink(ctx, keys...)
				keys = keys[:0]
			}
		}
		if len(keys) > 0 {
			rdb.Unlink(ctx, keys...)
		}
	}
	d.Close()
}

// serve serves h on a free loopback port until the returned stop is called.
func serve(h http.Handler) (addr string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

// httpClient returns a client keeping up to conns idle loopback connections.
func httpClient(conns int) *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		MaxIdleConns: conns, MaxIdleConnsPerHost: conns, DisableCompression: true, IdleConnTimeout: time.Minute,
	}}
}

func point(ll replay.LatLng) dispatch.Point { return dispatch.Point{Lat: ll.Lat, Lng: ll.Lng} }

// pick returns the i-th trip, wrapping around.
func (r *runner) pick(i int) replay.Trip { return r.trips[i%len(r.trips)] }
