// Package redisstore keeps flagdown's hot, short-lived state in Redis (go-redis v9): driver state and
// heartbeats, the GEO set of available drivers, offer locks and live ride positions. Everything here
// may be lost; PostgreSQL stays the source of truth for rides and offers.
//
// Keys (all under the configured prefix P):
//
//	P driver:{id}        hash: status, lat, lng, ts (ms of the last accepted ping), seen (ms of the
//	                     last ping), heading, speed, ride (active ride id), epoch (assignment epoch of
//	                     ride, from PostgreSQL), since (ms available since), rating, missed / missed_at
//	                     (offers let expire), resume (status to restore when a driver on a ride comes
//	                     back online), hbdl (ms, Redis's clock, when his heartbeat expires);
//	                     expires DriverStateTTL after the last ping
//	P hb:{id}            heartbeat, value = ping time ms, TTL = heartbeat TTL
//	P geo:available      GEO set of available drivers (member = driver id; Redis stores lng, lat)
//	P onride             set of the drivers whose hash holds a ride (reconcile and verify read it)
//	P offer:{id}         offer lock of a driver, value = the offer as JSON (dispatch.LiveOffer), TTL =
//	                     offer window
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
//	P matchdelay         hash ewma (seconds from a ride's request to its accept, an EWMA), n (samples)
//
// Redis is a projection of PostgreSQL that cannot go backwards: a driver's ride changes only
// through ApplyAssignment, compare-and-set on the epoch PostgreSQL gave the change (see
// dispatch.Effects). Scripts that stamp times or deadlines use Redis's clock (TIME), never the host's.
//
// Ids that an expiry must act on (driver, ride) are in the key names, as the design notes require.
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
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
	// DriverStateTTL is how long a driver's hash lives after his last ping (retention).
	DriverStateTTL time.Duration
	// MissMemory is how long a missed offer counts against a driver (RecordMiss).
	MissMemory time.Duration
	// BatchWindow is the batch timer's TTL when Apply re-joins rides to the batch
	// (dispatch.Effects.BatchJoins); New sets 2 s.
	BatchWindow time.Duration
}

// New returns a Store over rdb with every key under prefix; DriverStateTTL (24 h), MissMemory
// (30 min) and BatchWindow (2 s) get their defaults, which the caller may change before first use.
func New(rdb redis.UniversalClient, prefix string, heartbeatTTL time.Duration, maxSpeedMPS float64) *Store {
	return &Store{rdb: rdb, prefix: prefix, HeartbeatTTL: heartbeatTTL, MaxSpeedMPS: maxSpeedMPS, RidePosTTL: 2 * time.Hour,
		DriverStateTTL: 24 * time.Hour, MissMemory: 30 * time.Minute, BatchWindow: 2 * time.Second}
}

// Open parses a redis:// URL and returns a connected client.
func Open(ctx context.Context, url string) (*redis.Client, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redisstore: parse REDIS_URL: %w", err)
	}
	opt.PoolSize = 64
	rdb := redis.NewClient(opt)
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("redisstore: connect %s: %w", opt.Addr, err)
	}
	return rdb, nil
}

// Client returns the underlying client.
func (s *Store) Client() redis.UniversalClient { return s.rdb }

// Key helpers.
func (s *Store) driverKey(id string) string  { return s.prefix + "driver:" + id }
func (s *Store) hbKey(id string) string      { return s.prefix + "hb:" + id }
func (s *Store) geoKey() string              { return s.prefix + "geo:available" }
func (s *Store) offerKey(id string) string   { return s.prefix + "offer:" + id }
func (s *Store) ridePosKey(id string) string { return s.prefix + "ridepos:" + id }
func (s *Store) onRideKey() string           { return s.prefix + "onride" }

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
