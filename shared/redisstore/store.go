// Package redisstore keeps flagdown's hot, short-lived state in Redis (go-redis v9): driver state and
// heartbeats, the GEO set of available drivers, offer locks and live ride positions. Everything here
// may be lost; PostgreSQL stays the source of truth for rides and offers.
//
// Keys (all under the configured prefix P; on a Redis Cluster P carries the city's hash tag, e.g.
// "flagdown:{nyc}:", so every key below is in one slot and each script and pipeline runs on the
// city's shard, see CheckPrefix):
//
//	P driver:{id}        hash: status, lat, lng, ts (ms of the last accepted ping), seen (ms of the
//	                     last ping), heading, speed, ride (active ride id), epoch (fencing token of
//	                     the assignment, from PostgreSQL), since (ms available since), rating, missed / missed_at
//	                     (offers let expire), resume (status to restore when a driver on a ride comes
//	                     back online), hbdl (ms, Redis's clock, when his heartbeat expires), rl
//	                     (his ping budget's theoretical arrival time, ms, Redis's clock: ping.lua);
//	                     xp (ms, Redis's clock, when the hash expires, as the last ping set it);
//	                     expires DriverStateTTL after the last ping that renewed it (ping.lua)
//	P hb:{id}            heartbeat, value = ping time ms, TTL = heartbeat TTL
//	P geo:available      GEO set of available drivers (member = driver id; Redis stores lng, lat)
//	P onride             set of the drivers whose hash holds a ride (reconcile and verify read it)
//	P fence:{id}         the highest fencing token applied for the driver (assign.lua); no TTL, so it
//	                     outlives his hash and no late write applies after the hash was lost
//	P fence:max          the highest fencing token applied for any driver; no TTL (reconcile moves
//	                     PostgreSQL's sequence past it when PostgreSQL moved backwards)
//	P offer:{id}         offer lock of a driver, value = the offer as JSON (dispatch.LiveOffer), TTL =
//	                     offer window: exclusion only, not indexed in P deadlines
//	P offertimer:{offer} the offer's timer, value = the driver id, expiring with the offer's window
//	                     (indexed in P deadlines): one per offer, so a new lock of the same driver
//	                     never drops an earlier offer's timeout
//	P batch:{name}:{opened}, P batcharmed:{name}, P batchq:{name}, P batchrun:{name}:{deadline}
//	                     batch matching: a window's timer, the armed marker, the rides waiting, the
//	                     claim of a closed window (see JoinBatch)
//	P hail:geo:{side}, P hail:exp:{side}, P hail:entry:{side}
//	                     street-hail presses waiting, side rider or driver (member = the rider's or
//	                     driver's id): GEO set of where they pressed, sorted set of their expiry (ms,
//	                     Redis's clock), hash of their code and dropoff as JSON; each key's TTL is its
//	                     latest expiry (see Hail). Field hailhold of P driver:{id} (ms, Redis's clock)
//	                     holds a driver being paired against offer locks
//	P ridepos:{ride id}  hash lat, lng, ts, driver, ver, pushed (last position push, ms): the live position of the ride's driver while it
//	                     is ACCEPTED/IN_PROGRESS; only that driver's pings write it, and ver (the ride
//	                     version that handed it to him) guards it like the epoch guards the hash
//	P surge:demand:{cell} sorted set: ride id → request time (ms, Redis's clock) of the rides requested
//	                     from geohash cell {cell} (dispatch.SurgeCellPrecision), trimmed to the surge
//	                     window, TTL = window (CountDemand)
//	P surge:mult:{cell}  hash m (the cell's last surge multiplier), at (ms, Redis's clock, when it was
//	                     computed); changed at most once per update interval (StoreSurge), TTL a few
//	                     windows: an expired key is a cell without data (1.0)
//	P quote:{id}         a fare estimate's quote as JSON (shared/pricing.Quote): what order-create
//	                     charges when the rider names it; TTL = quote validity
//	P health             hash gen, seen, since, gap, brake, brake_off: Redis's health mark and the
//	                     offline brake, written by the expiry source's sweeper (MarkHealthy,
//	                     health.lua) and read by every liveness decision (lapse.lua); no TTL: its
//	                     absence means a new generation
//	P hbidx              sorted set: driver id → his latest heartbeat deadline (ms, Redis's clock),
//	                     written by every ping (a driver who sets himself offline leaves it), pruned by
//	                     the health mark: the population the offline brake counts
//	P matchdelay         hash ewma (seconds from a ride's request to its accept, an EWMA), n (samples)
//	P drivepace          hash s, m, n: the drive pace learned from pickups (mean seconds accept →
//	                     pickup, mean straight-line metres at the offer; RecordDriveSample), TTL
//	                     WaitCalibrationTTL
//	P waitcal:{cell}:{hour}, P waitcal:city:{hour}
//	                     hash e, n: the wait calibration of a cell (or the city) at an hour of day
//	                     (RecordWaitError), TTL WaitCalibrationTTL
//	P matchmode:{cell}   hash mode, since, at (unix ms, the matcher's clock): an area's adaptive
//	                     matching mode (FLAGDOWN_MATCH_MODE=auto; see ReadArea), TTL AreaModeTTL
//
// Redis is a projection of PostgreSQL that cannot go backwards: a driver's ride changes only
// through ApplyAssignment, compare-and-set on the fencing token PostgreSQL gave the change (see
// dispatch.Effects and docs/resilience.md, "Fencing tokens"). Scripts that stamp times or deadlines use Redis's clock (TIME), never the host's.
//
// The Lua scripts are files under scripts/, embedded (see scriptFiles): each names its KEYS, ARGV
// and reply in its header; who belongs in the available set is written once, in available.lua.
//
// Ids that an expiry must act on (driver, ride) are in the key names: a keyspace notification carries
// only the name of the key that expired, so the name alone must say what to act on.
package redisstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	neturl "net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flagdown/flagdown/shared/dispatch"
)

// Store is the Redis adapter; one per process, safe for concurrent use.
type Store struct {
	rdb    redis.UniversalClient
	prefix string
	// HeartbeatTTL is how long a ping keeps a driver online.
	HeartbeatTTL time.Duration
	// MaxSpeedMPS is the implied speed (metres per second) above which a ping is a GPS jump.
	MaxSpeedMPS float64
	// RidePosTTL bounds how long a live ride position is kept without pings.
	RidePosTTL time.Duration
	// PositionPushInterval is the least time between two position pushes to a ride's rider
	// (PingResult.PushRide); 0 marks none due.
	PositionPushInterval time.Duration
	// DriverStateTTL is how long a driver's hash lives after his last ping (retention), less up to a
	// minute: a ping renews the expiry only when it has grown that stale (ApplyPings).
	DriverStateTTL time.Duration
	// PingsPerMin is each driver's ping budget, pings per minute with a burst of as many (0:
	// unlimited); ApplyPings and SpendPing spend it (field rl of his hash).
	PingsPerMin int
	// MissMemory is how long a missed offer counts against a driver (RecordMiss).
	MissMemory time.Duration
	// BatchWindow is the batch timer's TTL when Apply re-joins rides to the batch
	// (dispatch.Effects.BatchJoins); New sets 2 s.
	BatchWindow time.Duration
	// OfflineBrakeShare is the share (0..1) of the population that, lapsing together, engages the
	// offline brake at the next health mark (MarkHealthy; FLAGDOWN_OFFLINE_BRAKE_SHARE); 0 turns it
	// off. New sets 0.55.
	OfflineBrakeShare float64
	// OfflineBrakeMinDrivers is the least population (drivers whose heartbeat deadline is less than
	// a TTL ago or ahead) for which the brake may engage (FLAGDOWN_OFFLINE_BRAKE_MIN_DRIVERS). New
	// sets 20.
	OfflineBrakeMinDrivers int
	// Timeout is the deadline Bounded gives the Redis work of a request whose decision PostgreSQL
	// makes (FLAGDOWN_REDIS_TIMEOUT); New sets DefaultTimeout.
	Timeout time.Duration
}

// budgetKey is the context key of a request's Redis budget (Budget).
type budgetKey struct{}

// redisBudget is the time a request's Redis steps have spent so far (Bounded to its cancel).
type redisBudget struct {
	mu    sync.Mutex
	spent time.Duration
}

// Budget returns ctx carrying a Redis budget for one request (ctx itself when it carries one
// already): the Bounded steps under it share one Timeout, each getting what the ones before it
// left, so a request whose Redis steps are several (an action's effects, then the live part of
// the view it answers; a quote, then the demand record) waits at most Timeout in all for a Redis
// that does not answer, not Timeout per step. Only the time inside the steps counts (Bounded to
// its cancel), never the PostgreSQL work between them. A handler whose decision PostgreSQL makes
// calls it once, first.
func (s *Store) Budget(ctx context.Context) context.Context {
	if _, ok := ctx.Value(budgetKey{}).(*redisBudget); ok {
		return ctx
	}
	return context.WithValue(ctx, budgetKey{}, &redisBudget{})
}

// Bounded returns ctx with a deadline Timeout from now, less what the request's earlier steps
// spent when ctx carries a budget (Budget; ctx's own deadline is kept when sooner), for the Redis
// work of a request that must answer even when Redis does not (docs/resilience.md): every command
// under it fails, as CodeUnavailable, once the deadline has passed. Its cancel adds the step's
// time to the budget.
func (s *Store) Bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	b, ok := ctx.Value(budgetKey{}).(*redisBudget)
	if !ok {
		return context.WithTimeout(ctx, s.Timeout)
	}
	start := time.Now()
	b.mu.Lock()
	left := s.Timeout - b.spent
	b.mu.Unlock()
	cctx, cancel := context.WithDeadline(ctx, start.Add(max(left, 0)))
	var once sync.Once
	return cctx, func() {
		once.Do(func() {
			b.mu.Lock()
			b.spent += time.Since(start)
			b.mu.Unlock()
		})
		cancel()
	}
}

// New returns a Store over rdb with every key under prefix; DriverStateTTL (24 h), MissMemory
// (30 min), BatchWindow (2 s), the offline brake (0.55 of at least 20 drivers) and Timeout
// (DefaultTimeout) get their defaults, which the caller may change before first use.
func New(rdb redis.UniversalClient, prefix string, heartbeatTTL time.Duration, maxSpeedMPS float64) *Store {
	return &Store{rdb: rdb, prefix: prefix, HeartbeatTTL: heartbeatTTL, MaxSpeedMPS: maxSpeedMPS, RidePosTTL: 2 * time.Hour,
		DriverStateTTL: 24 * time.Hour, MissMemory: 30 * time.Minute, BatchWindow: 2 * time.Second,
		OfflineBrakeShare: 0.55, OfflineBrakeMinDrivers: 20, Timeout: DefaultTimeout}
}

// ClusterScheme and ClusterTLSScheme are the REDIS_URL schemes naming a Redis Cluster (see Open).
const (
	ClusterScheme    = "redis+cluster"
	ClusterTLSScheme = "rediss+cluster"
)

// SentinelScheme and SentinelTLSScheme are the REDIS_URL schemes naming a primary found through
// Redis Sentinel (see Open).
const (
	SentinelScheme    = "redis+sentinel"
	SentinelTLSScheme = "rediss+sentinel"
)

// DefaultTimeout is FLAGDOWN_REDIS_TIMEOUT's default: the deadline Store.Bounded gives the Redis
// work of a request PostgreSQL decides.
const DefaultTimeout = 500 * time.Millisecond

// MinSocketTimeout is the least dial, read, write and pool-wait timeout of a client OpenTimeout
// builds (go-redis's own default read timeout): a healthy Redis on a busy host answering a
// pipeline of hundreds of ping scripts can take longer than FLAGDOWN_REDIS_TIMEOUT, and a socket
// timeout cut there would turn a slow answer into a 503 for every caller. Requests that must
// answer without Redis bound their Redis work with Store.Bounded instead.
const MinSocketTimeout = 3 * time.Second

// poolSize is the number of connections each Redis node's pool holds at most.
const poolSize = 64

// Open is OpenTimeout with DefaultTimeout.
func Open(ctx context.Context, url string) (redis.UniversalClient, error) {
	return OpenTimeout(ctx, url, DefaultTimeout)
}

// OpenTimeout parses REDIS_URL and returns a connected client:
//   - a *redis.Client for one server (redis://[user:password@]host:port/db, rediss:// for TLS;
//     go-redis ParseURL);
//   - a failover *redis.Client that finds the primary through Redis Sentinel and follows its
//     failovers (redis+sentinel://[user:password@]host:port[,host:port...]/mastername[?db=N],
//     rediss+sentinel:// for TLS to the data nodes): the addresses are the Sentinels', the
//     credentials the data nodes' (the Sentinels are asked without AUTH), db defaults to 0;
//   - a *redis.ClusterClient for a Redis Cluster
//     (redis+cluster://[user:password@]host:port?addr=host2:port2&addr=..., rediss+cluster:// for
//     TLS; go-redis ParseClusterURL: the seed nodes, from which the client learns every node;
//     database 0 only, the one a cluster has). A cluster needs a key prefix with a hash tag
//     (CheckPrefix).
//
// Each node gets a pool of 64 connections. The dial, read, write and pool-wait timeout is timeout
// (FLAGDOWN_REDIS_TIMEOUT) or MinSocketTimeout, whichever is longer; context deadlines are honoured
// (Store.Bounded cuts the Redis work of a PostgreSQL-decided request at FLAGDOWN_REDIS_TIMEOUT),
// and a failed command is retried once, so a command on a Redis that does not answer (stopped,
// partitioned) fails within about two socket timeouts and a hung Redis holds at most the pool's
// connections, never a growing pile of goroutines. Each node's commands go through a circuit
// breaker (breaker.go): when a node answered nothing for 2 s while commands went unanswered, the
// client sends it none, failing them at once with ErrNotAnswering, until a probe (one a second) is
// answered.
func OpenTimeout(ctx context.Context, url string, timeout time.Duration) (redis.UniversalClient, error) {
	timeout = max(timeout, MinSocketTimeout)
	var rdb redis.UniversalClient
	if rest, ok := cutScheme(url, ClusterScheme, ClusterTLSScheme); ok {
		opt, err := redis.ParseClusterURL(rest)
		if err != nil {
			return nil, fmt.Errorf("redisstore: parse REDIS_URL (a Redis Cluster URL %s://host:port?addr=host:port...): %w", ClusterScheme, err)
		}
		if u, err := neturl.Parse(rest); err == nil && u.Path != "" && u.Path != "/" && u.Path != "/0" {
			return nil, fmt.Errorf("redisstore: REDIS_URL names database %s of a Redis Cluster, which has only database 0", strings.TrimPrefix(u.Path, "/"))
		}
		opt.PoolSize, opt.MaxRetries = poolSize, 1
		opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout, opt.PoolTimeout = timeout, timeout, timeout, timeout
		opt.ContextTimeoutEnabled = true
		cc := redis.NewClusterClient(opt)
		cc.OnNewNode(func(node *redis.Client) { node.AddHook(newBreaker(node.Options().Addr)) })
		rdb = cc
	} else if rest, ok := cutScheme(url, SentinelScheme, SentinelTLSScheme); ok {
		opt, err := ParseSentinelURL(rest)
		if err != nil {
			return nil, err
		}
		opt.PoolSize, opt.MaxRetries = poolSize, 1
		opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout, opt.PoolTimeout = timeout, timeout, timeout, timeout
		opt.ContextTimeoutEnabled = true
		fc := redis.NewFailoverClient(opt)
		fc.AddHook(newBreaker(opt.MasterName))
		rdb = fc
	} else {
		opt, err := redis.ParseURL(url)
		if err != nil {
			return nil, fmt.Errorf("redisstore: parse REDIS_URL: %w", err)
		}
		opt.PoolSize, opt.MaxRetries = poolSize, 1
		opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout, opt.PoolTimeout = timeout, timeout, timeout, timeout
		opt.ContextTimeoutEnabled = true
		c := redis.NewClient(opt)
		c.AddHook(newBreaker(opt.Addr))
		rdb = c
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("redisstore: connect %s: %w", Addr(rdb), err)
	}
	return rdb, nil
}

// ParseSentinelURL parses the part after the scheme of a Sentinel REDIS_URL, given with scheme
// redis:// (rediss:// for TLS to the data nodes) as cutScheme leaves it:
// [user:password@]host:port[,host:port...]/mastername[?db=N]. Errors name the part that is wrong.
func ParseSentinelURL(url string) (*redis.FailoverOptions, error) {
	u, err := neturl.Parse(url)
	if err != nil {
		return nil, fmt.Errorf("redisstore: parse REDIS_URL (a Sentinel URL %s://host:port[,host:port]/mastername): %w", SentinelScheme, err)
	}
	opt := &redis.FailoverOptions{MasterName: strings.Trim(u.Path, "/")}
	if opt.MasterName == "" || strings.Contains(opt.MasterName, "/") {
		return nil, fmt.Errorf("redisstore: REDIS_URL %s://...: the path must be the master name the Sentinels monitor, e.g. /mymaster", SentinelScheme)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("redisstore: REDIS_URL %s://...: needs at least one Sentinel address host:port before the master name", SentinelScheme)
	}
	for _, a := range strings.Split(u.Host, ",") {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("redisstore: REDIS_URL %s://...: Sentinel address %q must be host:port", SentinelScheme, a)
		}
		opt.SentinelAddrs = append(opt.SentinelAddrs, a)
	}
	if u.User != nil {
		opt.Username = u.User.Username()
		opt.Password, _ = u.User.Password()
	}
	q := u.Query()
	for k := range q {
		if k != "db" {
			return nil, fmt.Errorf("redisstore: REDIS_URL %s://...: unknown parameter %q (only db)", SentinelScheme, k)
		}
	}
	if v := q.Get("db"); v != "" {
		if opt.DB, err = strconv.Atoi(v); err != nil || opt.DB < 0 {
			return nil, fmt.Errorf("redisstore: REDIS_URL %s://...: db must be a database number, got %q", SentinelScheme, v)
		}
	}
	if u.Scheme == "rediss" {
		opt.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	return opt, nil
}

// cutScheme turns a URL of scheme cluster (or tls) into the same URL of scheme redis (rediss).
func cutScheme(url, cluster, tls string) (string, bool) {
	if rest, ok := strings.CutPrefix(url, cluster+"://"); ok {
		return "redis://" + rest, true
	}
	if rest, ok := strings.CutPrefix(url, tls+"://"); ok {
		return "rediss://" + rest, true
	}
	return url, false
}

// Addr names the server(s) of rdb for logs: host:port of one server, the seed nodes of a cluster
// joined by commas.
func Addr(rdb redis.UniversalClient) string {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().Addr
	case *redis.ClusterClient:
		return strings.Join(c.Options().Addrs, ",")
	default:
		return fmt.Sprintf("%T", rdb)
	}
}

// HashTag returns the hash tag of a key prefix as Redis Cluster reads it: the text between the
// prefix's first '{' and the first '}' after it, when not empty. Every key under a prefix with a
// tag hashes to the tag's slot, so one script or pipeline of a city's keys runs on one shard; ""
// when the prefix has no tag (the whole key is hashed).
func HashTag(prefix string) string {
	i := strings.IndexByte(prefix, '{')
	if i < 0 {
		return ""
	}
	j := strings.IndexByte(prefix[i+1:], '}')
	if j <= 0 {
		return ""
	}
	return prefix[i+1 : i+1+j]
}

// CheckPrefix refuses a key prefix without a hash tag (HashTag) on a Redis Cluster: flagdown's
// scripts and pipelines touch several keys of a city at once, which a cluster allows only within
// one slot. Any prefix suits a single server.
func CheckPrefix(rdb redis.UniversalClient, prefix string) error {
	if _, ok := rdb.(*redis.ClusterClient); !ok || HashTag(prefix) != "" {
		return nil
	}
	return fmt.Errorf("redisstore: FLAGDOWN_REDIS_PREFIX %q must carry a hash tag on a Redis Cluster, e.g. %q: "+
		"every key of a city must hash to one slot (one tag per city)", prefix, "flagdown:{nyc}:")
}

// nowScript reads the clock of the shard holding the store's keys (scripts/time.lua).
var nowScript = loadScript("time.lua")

// Now returns Redis's clock on the server holding the store's keys (on a cluster, the shard of the
// prefix's hash tag: the clock its scripts stamp deadlines with). Errors are CodeUnavailable.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	v, err := nowScript.Run(ctx, s.rdb, []string{s.DeadlinesKey()}).StringSlice()
	if err != nil || len(v) != 2 {
		if err == nil {
			err = fmt.Errorf("TIME answered %v", v)
		}
		return time.Time{}, unavailable(err)
	}
	sec, err1 := strconv.ParseInt(v[0], 10, 64)
	usec, err2 := strconv.ParseInt(v[1], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return time.Time{}, dispatch.Internal(err)
	}
	return time.Unix(sec, usec*1000), nil
}

// Client returns the underlying client.
func (s *Store) Client() redis.UniversalClient { return s.rdb }

// Key helpers.
func (s *Store) driverKey(id string) string { return s.prefix + "driver:" + id }
func (s *Store) hbKey(id string) string     { return s.prefix + "hb:" + id }
func (s *Store) geoKey() string             { return s.prefix + "geo:available" }
func (s *Store) offerKey(id string) string  { return s.prefix + "offer:" + id }
func (s *Store) fenceKey(id string) string  { return s.prefix + "fence:" + id }
func (s *Store) fenceMaxKey() string        { return s.prefix + "fence:max" }

// offerTimerKey is the timer of one offer (by offer id), set with its driver's offer lock.
func (s *Store) offerTimerKey(offerID string) string { return s.prefix + "offertimer:" + offerID }
func (s *Store) ridePosKey(id string) string         { return s.prefix + "ridepos:" + id }
func (s *Store) onRideKey() string                   { return s.prefix + "onride" }

// Ping checks the connection.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		return dispatch.Unavailable("redis", err)
	}
	return nil
}

func unavailable(err error) error {
	if err == nil || errors.Is(err, redis.Nil) {
		return err
	}
	return dispatch.Unavailable("redis", err)
}

func ms(t time.Time) int64 { return t.UnixMilli() }

func f64(s string) float64 {
	v, _ := strconv.ParseFloat(s, 64)
	return v
}
