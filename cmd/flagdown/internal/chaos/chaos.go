// Package chaos is the chaos run of `flagdown chaos` (and of the short chaos test in `make test`): it
// replays real trips through the HTTP API while a controller, in a bounded loop, breaks the platform
// underneath, lets it settle, and then checks that nothing was lost and that every invariant holds.
//
// Everything runs on 127.0.0.1. The controller starts a private redis-server on a free port (so it
// can kill its pub/sub connections and restart it), uses the PostgreSQL of Options.DatabaseURL with a
// fresh schema and its own Redis key prefix, and runs the platform as child processes of the flagdown
// binary (Options.Binary): `flagdown dev` with a fixed broker store and port (a SIGKILLed broker keeps
// its stream), a second outbox relay (`flagdown relay`) armed to crash between publishing a row and
// marking it, and a second expiry source (`flagdown expiry-source`). The replay (package replay) runs
// in-process against the gateway and counts the HTTP errors it gets while the gateway is down.
//
// Faults (see Kinds): SIGKILL and restart of the platform; a restart of the platform with its host
// clock 2 s ahead or behind (FLAGDOWN_FAULT_CLOCK_OFFSET); SIGKILL and restart of the second expiry
// source; CLIENT KILL TYPE pubsub on Redis; a Redis restart losing its data (SHUTDOWN NOSAVE) or
// keeping it (SHUTDOWN SAVE), after which flagdown must apply notify-keyspace-events again (Redis
// runs without it on its command line); Redis frozen with SIGSTOP for Options.RedisStop, longer
// than the heartbeat TTL; the primary SIGKILLed and its replica promoted by a Sentinel (RedisFailover:
// only in a run with that kind is the platform given a replica and a Sentinel, redis+sentinel://,
// and the other Redis faults then break whichever server is the primary; a SIGSTOP longer than the
// Sentinel's down-after is failed over too); the platform paused with SIGSTOP for 1–4 s (at most a
// third of the heartbeat TTL), which stops requests anywhere, between a commit and its Redis
// effects too (PlatformSIGSTOP); a crash of PostgreSQL (PostgresRestart: SIGQUIT, an immediate
// shutdown, and a start with crash recovery 0.3–2 s later; only in a run with that kind, on a private
// server the run initdb's, never on Options.DatabaseURL); the second relay exiting after a publish and before the mark
// (FLAGDOWN_FAULT_RELAY_EXIT_AFTER_PUBLISH, restarted about a fault interval later, armed again); and events already in the broker's
// stream published again in shuffled order under new message ids (duplicated and reordered
// deliveries). Each scheduled kind is injected at least once, in a seeded order, one at a time, every
// Options.FaultInterval (±50 %), until the trips have been sent or Options.MaxFaults.
//
// While the trips run, invariants.Check runs every Options.InvariantEvery (outside outages and the
// grace after them). Then the controller stops injecting, lets the replay drain, keeps the platform
// running for twice the reconcile interval plus the grace, and the verdict fails unless: the
// replay's ground truth (replay.GroundTruth, judged again after the settle) counts no driver taken
// offline while pinging, none missed, no re-opening or trip alert without cause and no acknowledged
// action missing from PostgreSQL; every invariant was 0 during the run and is 0 at the end; the
// dead-letter stream is empty; notify-keyspace-events was re-applied after every Redis start; every
// ride the replay was given exists in PostgreSQL (rides lost = 0) and is terminal (COMPLETED,
// CANCELLED, UNMATCHED) or legitimately waiting (REQUESTED with a PENDING offer, a retry timer or a
// change within the grace; ACCEPTED/IN_PROGRESS held by a replay driver when the replay stopped, or
// changed within the grace); a ride that looks stuck is judged again 5 s later and counts as stuck
// only if it is still so, unchanged. Reconcile's repairs are reported per kind.
package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/flagdown/flagdown/cmd/flagdown/internal/replay"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/internalauth"
)

// Kind names a fault; kinds are the keys of Summary.Faults.
type Kind string

// The faults.
const (
	PlatformKill           Kind = "platform_sigkill"
	PlatformClockOffset    Kind = "platform_clock_offset"
	ExpirySourceKill       Kind = "expiry_source_sigkill"
	RedisPubSubKill        Kind = "redis_pubsub_kill"
	RedisRestartNoSave     Kind = "redis_restart_nosave"
	RedisRestartSave       Kind = "redis_restart_save"
	RedisSIGSTOP           Kind = "redis_sigstop"
	RelayCrashAfterPublish Kind = "relay_crash_after_publish"
	EventsDupReorder       Kind = "events_duplicated_reordered"
	RedisFailover          Kind = "redis_failover"
	PlatformSIGSTOP        Kind = "platform_sigstop"
	PostgresRestart        Kind = "postgres_restart"
)

// Kinds lists every fault. All but RelayCrashAfterPublish are scheduled by the controller; that one
// the second relay injects itself (armed at each start) and the controller counts its exits.
var Kinds = []Kind{PlatformKill, PlatformClockOffset, ExpirySourceKill, RedisPubSubKill,
	RedisRestartNoSave, RedisRestartSave, RedisSIGSTOP, RelayCrashAfterPublish, EventsDupReorder,
	RedisFailover, PlatformSIGSTOP, PostgresRestart}

// ParseKinds parses a comma-separated list of kinds; "" or "all" is nil: every kind this machine
// can inject (Options.Kinds).
func ParseKinds(v string) ([]Kind, error) {
	if v == "" || v == "all" {
		return nil, nil
	}
	var out []Kind
	for _, f := range strings.Split(v, ",") {
		k := Kind(strings.TrimSpace(f))
		known := false
		for _, x := range Kinds {
			known = known || x == k
		}
		if !known {
			return nil, fmt.Errorf("faults: unknown kind %q (known: %v)", k, Kinds)
		}
		out = append(out, k)
	}
	return out, nil
}

// Options configure a chaos run.
type Options struct {
	// Binary is the flagdown executable run as the platform's processes.
	Binary string
	// RedisServer is the redis-server executable; empty looks it up (FindRedisServer).
	RedisServer string
	// DatabaseURL is the PostgreSQL the platform uses; the run creates its own schema there.
	DatabaseURL string
	// TripsPath is the trips CSV the replay reads.
	TripsPath string
	// Minutes of trips replayed (simulated), Drivers simulated drivers, Speedup simulated seconds
	// per wall second, Drain simulated time after the last order.
	Minutes float64
	Drivers int
	Speedup float64
	Drain   time.Duration
	// FaultInterval is the mean wall time between two faults (each wait is drawn in ±50 %).
	FaultInterval time.Duration
	// MaxFaults bounds the scheduled faults and, separately, the relay crashes.
	MaxFaults int
	// Kinds are the faults injected (each at least once); nil means every kind (Kinds), but
	// PostgresRestart where PostgreSQL's server binaries are not installed (Run says so).
	Kinds []Kind
	// HeartbeatTTL is FLAGDOWN_HEARTBEAT_TTL of the platform (wall time); RedisStop how long a
	// RedisSIGSTOP fault freezes Redis (longer than the TTL, so heartbeats lapse in the outage).
	HeartbeatTTL time.Duration
	RedisStop    time.Duration
	// OfflineProbPerHour is the replay's probability that a driver stops pinging for good within
	// a simulated hour (replay.Options.OfflineProbPerHour): the drivers the ground truth expects to
	// be taken offline.
	OfflineProbPerHour float64
	// InvariantEvery is the wall time between two invariant checks during the run (each with Grace).
	InvariantEvery time.Duration
	// SendRule makes the replay's drivers follow the seed's send rule (replay.Options.SendRule).
	// Off by default: the chaos verdict's figures are measured with every driver pinging every
	// ping interval.
	SendRule bool
	// BreakConsumers starts the platform with event verification keys that match no signer, so
	// every consumer refuses every event (a broken consumer; the verdict must fail). Tests only.
	BreakConsumers bool
	// Seed seeds the replay and the fault schedule.
	Seed uint64
	// ReconcileInterval is FLAGDOWN_RECONCILE_INTERVAL of the platform.
	ReconcileInterval time.Duration
	// Grace is the grace of the invariant check and of "legitimately waiting".
	Grace time.Duration
	// SummaryPath is where the JSON summary is written; empty writes none.
	SummaryPath string
	// WorkDir holds the broker store, Redis's files and the process logs; empty makes a temporary
	// folder, removed after a passing run.
	WorkDir string
	// Out receives the controller's progress lines and the summary table.
	Out io.Writer
}

// DefaultOptions are the defaults of `flagdown chaos` (a few minutes of trips, a fault every 6 s).
func DefaultOptions() Options {
	return Options{
		DatabaseURL:        "postgres://postgres@127.0.0.1:5432/flagdown?sslmode=disable",
		TripsPath:          "testdata/trips.csv",
		Minutes:            16,
		Drivers:            600,
		Speedup:            4,
		Drain:              2 * time.Minute,
		FaultInterval:      6 * time.Second,
		MaxFaults:          100,
		HeartbeatTTL:       30 * time.Second,
		RedisStop:          35 * time.Second,
		InvariantEvery:     10 * time.Second,
		OfflineProbPerHour: 0.5,
		Seed:               1,
		ReconcileInterval:  5 * time.Second,
		Grace:              10 * time.Second,
		SummaryPath:        "chaos-summary.json",
	}
}

// FindRedisServer returns the redis-server on PATH or in the usual install folders, or an error
// saying how to install it.
func FindRedisServer() (string, error) {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/bin/redis-server", "/usr/sbin/redis-server", "/usr/local/bin/redis-server"} {
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New("redis-server not found (on PATH, /usr/bin, /usr/sbin, /usr/local/bin): the chaos run " +
		"starts its own Redis to restart it; install it (apt-get install redis-server, or `scripts/services.sh up --redis-server`)")
}

func (o *Options) validate() error {
	switch {
	case o.Binary == "":
		return errors.New("chaos: no flagdown binary")
	case o.DatabaseURL == "":
		return errors.New("chaos: no database URL")
	case !(o.Minutes > 0) || o.Drivers < 1 || !(o.Speedup > 0) || o.Drain < 0:
		return errors.New("chaos: minutes, drivers and speedup must be > 0, drain ≥ 0")
	case o.FaultInterval < 500*time.Millisecond:
		return errors.New("chaos: fault interval must be ≥ 500ms")
	case o.MaxFaults < len(o.scheduled()):
		return fmt.Errorf("chaos: max faults must be ≥ %d (each kind once)", len(o.scheduled()))
	case !(o.OfflineProbPerHour >= 0 && o.OfflineProbPerHour < 1):
		return errors.New("chaos: offline probability must be within 0..1 (1 excluded)")
	case o.HeartbeatTTL < time.Second || o.RedisStop < 0 || o.InvariantEvery <= 0:
		return errors.New("chaos: heartbeat TTL must be ≥ 1s, redis stop ≥ 0, invariant interval > 0")
	case o.ReconcileInterval <= 0 || o.Grace < 0:
		return errors.New("chaos: reconcile interval must be > 0, grace ≥ 0")
	}
	return nil
}

// kinds are the kinds of the run (Options.Kinds, or all).
func (o *Options) kinds() []Kind {
	if len(o.Kinds) == 0 {
		return Kinds
	}
	return o.Kinds
}

// scheduled are the run's kinds the controller injects (all but RelayCrashAfterPublish, which the
// second relay injects itself).
func (o *Options) scheduled() []Kind {
	var out []Kind
	for _, k := range o.kinds() {
		if k != RelayCrashAfterPublish {
			out = append(out, k)
		}
	}
	return out
}

// relayCrashes reports whether the run arms the second relay to crash.
func (o *Options) relayCrashes() bool {
	for _, k := range o.kinds() {
		if k == RelayCrashAfterPublish {
			return true
		}
	}
	return false
}

// run is one chaos run's state; everything but the replay goroutine's result is owned by the
// controller loop.
type run struct {
	opts Options
	out  io.Writer
	rng  *rand.Rand
	dir  string
	id   string
	env  []string // environment of every platform process
	cfg  *config.Config
	// redis is the primary the platform writes to; replica and sentinel its replica and the
	// Sentinel watching both, started only when the run injects RedisFailover (nil otherwise).
	redis    *redisServer
	replica  *redisServer
	sentinel *sentinel
	// pg is the private PostgreSQL of a run that injects PostgresRestart (nil otherwise: the run
	// uses Options.DatabaseURL, which it never restarts).
	pg *pgServer

	gatewayAddr string
	natsPort    int

	dev, relay2, expiry2 *proc
	relayArmed           bool
	relayRestartAt       time.Time // when to restart the exited second relay (zero: not pending)
	relayCrashes         int
	devOffset            time.Duration

	sum   *Summary
	start time.Time

	// outages are the spans in which Redis or the platform was away (ground truth deadlines).
	outagesMu sync.Mutex
	outages   []replay.Outage
	// repairsBase sums the reconcile repairs of the platform processes that exited; repairsLast
	// is the last scrape of the running one.
	repairsBase, repairsLast map[string]float64
	lastScrape               time.Time
	// replaySum is the replay's summary (its ground truth is judged again after the settle).
	replaySum *replay.Summary
}

// outageBegin records that what went away now; the returned func records its end.
func (r *run) outageBegin(what string) func() {
	r.outagesMu.Lock()
	r.outages = append(r.outages, replay.Outage{What: what, From: time.Now()})
	i := len(r.outages) - 1
	r.outagesMu.Unlock()
	return func() {
		r.outagesMu.Lock()
		r.outages[i].To = time.Now()
		r.outagesMu.Unlock()
	}
}

// outageList is a copy of the outages so far.
func (r *run) outageList() []replay.Outage {
	r.outagesMu.Lock()
	defer r.outagesMu.Unlock()
	return append([]replay.Outage{}, r.outages...)
}

// inOutage reports whether an outage is under way, or ended less than after ago.
func (r *run) inOutage(after time.Duration) bool {
	r.outagesMu.Lock()
	defer r.outagesMu.Unlock()
	for _, o := range r.outages {
		if o.To.IsZero() || time.Since(o.To) < after {
			return true
		}
	}
	return false
}

func (r *run) logf(format string, args ...any) {
	fmt.Fprintf(r.out, "chaos %6.1fs  %s\n", time.Since(r.start).Seconds(), fmt.Sprintf(format, args...))
}

// Run performs a chaos run and returns its summary. The error is non-nil when the run could not be
// carried out or when its checks failed (Summary.Pass false); the summary is written either way
// once the run got as far as the checks.
func Run(ctx context.Context, opts Options) (*Summary, error) {
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	if len(opts.Kinds) == 0 {
		if err := PostgresAvailable(); err != nil {
			for _, k := range Kinds {
				if k != PostgresRestart {
					opts.Kinds = append(opts.Kinds, k)
				}
			}
			fmt.Fprintf(opts.Out, "chaos: %s not injected: %v\n", PostgresRestart, err)
		}
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if opts.RedisServer == "" {
		p, err := FindRedisServer()
		if err != nil {
			return nil, err
		}
		opts.RedisServer = p
	}
	r := &run{opts: opts, out: opts.Out, rng: rand.New(rand.NewPCG(opts.Seed, 0xc4a05)), start: time.Now(),
		repairsBase: map[string]float64{}, repairsLast: map[string]float64{}}
	r.id = strconv.FormatInt(time.Now().UnixNano()%1_000_000_000_000, 36)
	r.sum = newSummary(opts)
	keepDir := opts.WorkDir != ""
	r.dir = opts.WorkDir
	if r.dir == "" {
		d, err := os.MkdirTemp("", "flagdown-chaos-")
		if err != nil {
			return nil, err
		}
		r.dir = d
	} else if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return nil, err
	}
	r.sum.WorkDir = r.dir
	passed := false
	defer func() {
		r.shutdown()
		if !keepDir && passed {
			_ = os.RemoveAll(r.dir)
		} else {
			fmt.Fprintf(r.out, "chaos: logs and stores kept in %s\n", r.dir)
		}
	}()
	if err := r.setup(ctx); err != nil {
		return nil, err
	}
	err := r.exercise(ctx)
	if err == nil {
		err = r.check(ctx)
	}
	r.sum.WallSeconds = time.Since(r.start).Seconds()
	if err != nil && ctx.Err() == nil {
		r.sum.Failures = append(r.sum.Failures, err.Error())
	}
	r.sum.Pass = len(r.sum.Failures) == 0 && err == nil
	r.sum.WriteTable(r.out)
	if opts.SummaryPath != "" {
		if werr := r.sum.WriteJSON(opts.SummaryPath); werr != nil {
			return r.sum, werr
		}
		fmt.Fprintf(r.out, "summary written to %s\n", opts.SummaryPath)
	}
	if err != nil {
		return r.sum, err
	}
	if !r.sum.Pass {
		return r.sum, fmt.Errorf("chaos: %s", strings.Join(r.sum.Failures, "; "))
	}
	passed = true
	r.dropSchema()
	return r.sum, nil
}

// setup starts Redis and the platform processes.
func (r *run) setup(ctx context.Context) error {
	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	redisPort, gwPort, natsPort := ports[0], ports[1], ports[2]
	r.gatewayAddr, r.natsPort = fmt.Sprintf("127.0.0.1:%d", gwPort), natsPort
	schema := "chaos_" + r.id
	prefix := "chaos:" + r.id + ":"
	r.sum.Schema, r.sum.RedisPrefix = schema, prefix

	r.redis = &redisServer{path: r.opts.RedisServer, port: redisPort, dir: filepath.Join(r.dir, "redis")}
	if err := r.redis.start(ctx); err != nil {
		return err
	}
	r.sum.RedisURL = r.redis.url()
	if slices.Contains(r.opts.kinds(), RedisFailover) {
		if err := r.startSentinel(ctx); err != nil {
			return err
		}
		r.sum.RedisURL = r.sentinel.url()
	}
	if slices.Contains(r.opts.kinds(), PostgresRestart) {
		if err := r.startPostgres(ctx); err != nil {
			return err
		}
	}
	signer, err := eventSigner()
	if err != nil {
		return err
	}
	vars := map[string]string{
		"DATABASE_URL":                r.opts.DatabaseURL,
		"FLAGDOWN_DB_SCHEMA":          schema,
		"REDIS_URL":                   r.sum.RedisURL,
		"FLAGDOWN_REDIS_PREFIX":       prefix,
		"FLAGDOWN_NATS_STREAM":        "FLAGDOWN",
		"FLAGDOWN_RECONCILE_INTERVAL": r.opts.ReconcileInterval.String(),
		"FLAGDOWN_HEARTBEAT_TTL":      r.opts.HeartbeatTTL.String(),
		"FLAGDOWN_EVENT_SIGNING_KEY":  signer.Secret(),
		"FLAGDOWN_EVENT_VERIFY_KEYS":  signer.VerifyKey(),
		"FLAGDOWN_INTERNAL_TOKEN":     internalauth.GenerateToken(),
		"FLAGDOWN_JWT_SECRET":         tokenSecret(),
	}
	if r.cfg, err = config.FromEnv(vars); err != nil {
		return err
	}
	if r.opts.BreakConsumers {
		other, err := eventSigner()
		if err != nil {
			return err
		}
		vars["FLAGDOWN_EVENT_VERIFY_KEYS"] = other.VerifyKey() // no consumer accepts what the platform signs
	}
	// The children get this process's environment minus anything that would point them elsewhere.
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if _, set := vars[k]; set || strings.HasPrefix(k, "FLAGDOWN_") || k == "NATS_URL" || k == "K_SINK" {
			continue
		}
		r.env = append(r.env, kv)
	}
	for k, v := range vars {
		r.env = append(r.env, k+"="+v)
	}
	natsURL := fmt.Sprintf("nats://127.0.0.1:%d", natsPort)
	r.dev = &proc{name: "flagdown dev", path: r.opts.Binary, env: r.env, logPath: filepath.Join(r.dir, "dev.log"),
		args: []string{"dev", "--addr", r.gatewayAddr, "--nats-store", filepath.Join(r.dir, "nats"), "--nats-port", strconv.Itoa(natsPort)}}
	r.relay2 = &proc{name: "flagdown relay", path: r.opts.Binary, env: append(append([]string{}, r.env...), "NATS_URL="+natsURL),
		logPath: filepath.Join(r.dir, "relay.log"), args: []string{"relay"}}
	r.expiry2 = &proc{name: "flagdown expiry-source", path: r.opts.Binary, env: append(append([]string{}, r.env...), "NATS_URL="+natsURL),
		logPath: filepath.Join(r.dir, "expiry-source.log"), args: []string{"expiry-source"}}

	r.logf("redis-server on %s, PostgreSQL schema %s, Redis prefix %q, work dir %s", r.sum.RedisURL, schema, prefix, r.dir)
	if err := r.startDev(ctx, 0); err != nil {
		return err
	}
	if err := r.startRelay(true); err != nil {
		return err
	}
	if err := r.expiry2.start(); err != nil {
		return err
	}
	r.checkNotifications(ctx, "start")
	r.logf("platform ready at http://%s (broker %s); second relay and expiry source started", r.gatewayAddr, natsURL)
	return nil
}

// startDev starts `flagdown dev` with the given clock offset and waits until /readyz answers 200.
func (r *run) startDev(ctx context.Context, offset time.Duration) error {
	var last error
	for k, v := range r.repairsLast {
		r.repairsBase[k] += v
	}
	r.repairsLast = map[string]float64{}
	for attempt := 0; attempt < 3; attempt++ {
		if err := r.dev.start("FLAGDOWN_FAULT_CLOCK_OFFSET=" + offset.String()); err != nil {
			return err
		}
		r.devOffset = offset
		if last = r.waitReady(ctx, 90*time.Second); last == nil {
			return nil
		}
		r.dev.kill()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r.logf("platform start %d failed: %v; retrying", attempt+1, last)
	}
	return fmt.Errorf("chaos: flagdown dev did not become ready (log %s): %w", r.dev.logPath, last)
}

// waitReady polls GET /readyz until 200, the dev process exits, or timeout.
func (r *run) waitReady(ctx context.Context, timeout time.Duration) error {
	hc := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(timeout)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.gatewayAddr+"/readyz", nil)
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("/readyz answered %d", resp.StatusCode)
		}
		if up, _ := r.dev.running(); !up {
			return fmt.Errorf("flagdown dev exited with status %d", r.dev.exitCode())
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("not ready after %s: %v", timeout, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// startRelay starts the second relay, armed to crash after a random 1..40th publish when armed.
func (r *run) startRelay(armed bool) error {
	r.relayArmed = armed && r.relayCrashes < r.opts.MaxFaults && r.opts.relayCrashes()
	extra := []string{}
	if r.relayArmed {
		extra = append(extra, "FLAGDOWN_FAULT_RELAY_EXIT_AFTER_PUBLISH="+strconv.Itoa(1+r.rng.IntN(40)))
	}
	return r.relay2.start(extra...)
}

// exercise runs the replay while injecting faults, then waits for the replay to drain and the
// platform to settle.
func (r *run) exercise(ctx context.Context) error {
	ropts := replay.DefaultOptions()
	ropts.URL = "http://" + r.gatewayAddr
	ropts.TripsPath = r.opts.TripsPath
	ropts.Drivers, ropts.Minutes, ropts.Speedup, ropts.Drain = r.opts.Drivers, r.opts.Minutes, r.opts.Speedup, r.opts.Drain
	ropts.Seed, ropts.RunID = r.opts.Seed, r.id
	ropts.SummaryPath, ropts.Progress, ropts.Verify = "", false, false
	ropts.Concurrency = 16
	ropts.OfflineProbPerHour = r.opts.OfflineProbPerHour
	ropts.SendRule = r.opts.SendRule
	ropts.JWTSecret, ropts.JWTIssuer, ropts.JWTAudience = r.cfg.JWTSecret, r.cfg.JWTIssuer, r.cfg.JWTAudience
	ropts.GroundTruth, ropts.VerifyConfig, ropts.HeartbeatTTL, ropts.Outages = true, r.cfg, r.opts.HeartbeatTTL, r.outageList
	type result struct {
		sum *replay.Summary
		err error
	}
	replayCtx, cancelReplay := context.WithCancel(ctx)
	defer cancelReplay()
	done := make(chan result, 1)
	go func() {
		s, err := replay.Run(replayCtx, ropts, io.Discard)
		done <- result{s, err}
	}()
	wallTrips := time.Duration(r.opts.Minutes * float64(time.Minute) / r.opts.Speedup)
	injectUntil := time.Now().Add(wallTrips)
	r.logf("replaying %g min of trips with %d drivers at %gx (%s wall), injecting faults until then every ~%s",
		r.opts.Minutes, r.opts.Drivers, r.opts.Speedup, wallTrips.Round(time.Second), r.opts.FaultInterval)

	stopMonitor := r.monitor(ctx)
	defer stopMonitor()
	scheduled := r.opts.scheduled()
	plan := append([]Kind{}, scheduled...)
	r.rng.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })
	next := time.Now().Add(r.wait())
	injected := 0
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var res result
	replayDone := false
	injecting := true
	for !replayDone {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case res = <-done:
			replayDone = true
			continue
		case <-tick.C:
		}
		if err := r.supervise(ctx); err != nil {
			return err
		}
		now := time.Now()
		if injecting && ((now.After(injectUntil) && r.everyKindInjected()) || injected >= r.opts.MaxFaults) {
			injecting = false
			r.logf("injection over after %d scheduled faults; disarming the second relay, letting the replay drain", injected)
			r.relay2.stop()
			r.relayRestartAt = time.Time{}
			if err := r.startRelay(false); err != nil {
				return err
			}
		}
		if !injecting || now.Before(next) {
			continue
		}
		// First every kind once in a seeded order (a kind that could not be injected goes to the
		// back of that queue), then kinds at random.
		var k Kind
		if len(plan) > 0 {
			k, plan = plan[0], plan[1:]
		} else {
			k = scheduled[r.rng.IntN(len(scheduled))]
		}
		injected++
		if err := r.inject(ctx, k); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			r.sum.FaultsFailed[string(k)]++
			r.logf("fault %s could not be injected: %v", k, err)
			if r.sum.Faults[string(k)] == 0 {
				plan = append(plan, k)
			}
		}
		next = time.Now().Add(r.wait())
	}
	if res.err != nil && (res.sum == nil || res.sum.GroundTruth == nil || res.sum.Interrupted) {
		return fmt.Errorf("chaos: replay: %w", res.err)
	}
	// A replay error with its ground truth judged is the ground truth's counts: check reports them.
	r.sum.takeReplay(res.sum)
	r.replaySum = res.sum
	settle := 2*r.opts.ReconcileInterval + r.opts.Grace + 2*time.Second
	r.logf("replay done (%d rides requested); settling %s (2 × reconcile interval + grace + 2 s)", r.sum.RidesRequested, settle)
	deadline := time.Now().Add(settle)
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		if err := r.supervise(ctx); err != nil {
			return err
		}
	}
	r.sum.SettleSeconds = settle.Seconds()
	return nil
}

// everyKindInjected reports whether every scheduled kind was injected at least once.
func (r *run) everyKindInjected() bool {
	for _, k := range r.opts.scheduled() {
		if r.sum.Faults[string(k)] == 0 {
			return false
		}
	}
	return true
}

// wait draws the time to the next fault: FaultInterval ± 50 %.
func (r *run) wait() time.Duration {
	f := r.opts.FaultInterval
	return f/2 + time.Duration(r.rng.Int64N(int64(f)))
}

// supervise restarts processes that exited: the second relay (counting its fault exits), the
// second expiry source, and the platform or Redis when they died without being told to.
func (r *run) supervise(ctx context.Context) error {
	if time.Since(r.lastScrape) > 2*time.Second {
		r.scrapeRepairs(ctx)
	}
	for _, s := range []*redisServer{r.redis, r.replica} {
		if s == nil {
			continue
		}
		if up, _ := s.proc.running(); !up {
			r.sum.UnexpectedExits["redis-server"]++
			r.logf("redis-server on port %d exited unexpectedly (status %d); restarting it", s.port, s.proc.exitCode())
			if err := s.start(ctx); err != nil {
				return err
			}
		}
	}
	if r.pg != nil {
		if up, _ := r.pg.proc.running(); !up {
			r.sum.UnexpectedExits["postgres"]++
			r.logf("postgres exited unexpectedly (status %d); restarting it", r.pg.proc.exitCode())
			if err := r.pg.start(ctx); err != nil {
				return err
			}
		}
	}
	if up, _ := r.dev.running(); !up {
		r.sum.UnexpectedExits["flagdown dev"]++
		r.logf("flagdown dev exited unexpectedly (status %d); restarting it", r.dev.exitCode())
		if err := r.startDev(ctx, r.devOffset); err != nil {
			return err
		}
	}
	if up, _ := r.relay2.running(); !up && r.relayRestartAt.IsZero() {
		// A crashed relay stays down for about a fault interval (one relay meanwhile), so its
		// crashes stay about as frequent as the other faults.
		code := r.relay2.exitCode()
		r.relayRestartAt = time.Now().Add(r.wait())
		if code == config.FaultRelayExitStatus && r.relayArmed {
			r.relayCrashes++
			r.sum.Faults[string(RelayCrashAfterPublish)]++
		} else {
			r.sum.UnexpectedExits["flagdown relay"]++
			r.logf("second relay exited with status %d; restarting it", code)
			r.relayRestartAt = time.Now().Add(time.Second)
		}
	}
	if !r.relayRestartAt.IsZero() && time.Now().After(r.relayRestartAt) {
		r.relayRestartAt = time.Time{}
		if err := r.startRelay(r.relayArmed); err != nil {
			return err
		}
	}
	if up, _ := r.expiry2.running(); !up {
		r.sum.UnexpectedExits["flagdown expiry-source"]++
		r.logf("second expiry source exited with status %d; restarting it", r.expiry2.exitCode())
		if err := r.expiry2.start(); err != nil {
			return err
		}
	}
	return nil
}

// shutdown stops every process the run started.
func (r *run) shutdown() {
	for _, p := range []*proc{r.relay2, r.expiry2, r.dev} {
		if p != nil {
			p.stop()
		}
	}
	if r.sentinel != nil {
		r.sentinel.stop()
	}
	if r.pg != nil {
		r.pg.stop()
	}
	for _, s := range []*redisServer{r.redis, r.replica} {
		if s != nil {
			s.stop()
		}
	}
}

// startPostgres starts the run's private PostgreSQL and points the whole run at it
// (PostgresRestart).
func (r *run) startPostgres(ctx context.Context) error {
	ports, err := freePorts(1)
	if err != nil {
		return err
	}
	if r.pg, err = newPGServer(filepath.Join(r.dir, "postgres"), ports[0]); err != nil {
		return err
	}
	if err := r.pg.start(ctx); err != nil {
		return err
	}
	r.opts.DatabaseURL = r.pg.url()
	r.logf("private PostgreSQL on %s (postgres_restart)", r.pg.url())
	return nil
}

// startSentinel starts a replica of the primary and a Sentinel watching both (RedisFailover).
func (r *run) startSentinel(ctx context.Context) error {
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	r.replica = &redisServer{path: r.opts.RedisServer, port: ports[0], dir: filepath.Join(r.dir, "redis-replica"), replicaOf: r.redis.port}
	if err := r.replica.start(ctx); err != nil {
		return err
	}
	r.sentinel = &sentinel{port: ports[1], dir: filepath.Join(r.dir, "sentinel")}
	return r.sentinel.start(ctx, r.opts.RedisServer, r.redis.port)
}
