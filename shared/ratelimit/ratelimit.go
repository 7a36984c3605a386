// Package ratelimit caps how fast one caller may use each endpoint (ride requests, pings, fare
// estimates, nearby queries, hail presses, WebSocket connects), per caller and per client IP,
// backed by Redis so that every replica of a function shares the same budget. It uses go-redis/redis_rate (a
// GCRA limiter in one Lua script per call), not a hand-written bucket; AllowEach pipelines that
// script for a batch, and Queue carries one check inside another read's round trip (Spend).
//
// Keys: P rl:{kind}:{id} (redis_rate adds its own "rate:" prefix), each expiring once its budget is
// whole again. A limit of 0 disables that kind.
//
// When Redis does not answer within the limiter's Timeout (FLAGDOWN_REDIS_TIMEOUT), the check
// fails open within a local bound: the same budget is enforced by this process alone, in memory
// (golang.org/x/time/rate, one token bucket per caller and kind, at most MaxLocal of them), so a
// caller gets at most one budget per replica while Redis is away. Each such decision is counted in
// flagdown_redis_degraded_total{check="rate_limit"} and the outage is logged once.
package ratelimit

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// Kind names what is limited.
type Kind string

// Kinds of limits.
const (
	// RideRequests: order-create calls per rider (FLAGDOWN_RATE_RIDES_PER_MIN).
	RideRequests Kind = "rides"
	// Pings: location-update pings per driver (FLAGDOWN_RATE_PINGS_PER_MIN).
	Pings Kind = "pings"
	// Estimates: fare-estimate calls (each stores a quote) per rider (FLAGDOWN_RATE_ESTIMATES_PER_MIN).
	Estimates Kind = "estimates"
	// NearbyQueries: nearby calls per caller (FLAGDOWN_RATE_NEARBY_PER_MIN).
	NearbyQueries Kind = "nearby"
	// Hails: street-hail presses per rider or driver (FLAGDOWN_RATE_HAILS_PER_MIN).
	Hails Kind = "hails"
	// Connects: WebSocket connects per user (FLAGDOWN_RATE_CONNECTS_PER_MIN).
	Connects Kind = "connects"
	// Devices: device registrations per user (FLAGDOWN_RATE_DEVICES_PER_MIN).
	Devices Kind = "devices"
)

// ipKind is the per-IP budget of kind: FLAGDOWN_RATE_PER_IP_PER_MIN units per client IP, for each
// kind apart.
func ipKind(kind Kind) Kind { return kind + "-ip" }

// ipKinds are the kinds that have a per-IP budget (every kind but Pings, whose callers are
// drivers' phones and the gateway aggregator sending batches for many drivers from one address).
var ipKinds = []Kind{RideRequests, Estimates, NearbyQueries, Hails, Connects, Devices}

// Limits are the configured budgets, per minute, with a burst of the same size.
type Limits struct {
	// RidesPerMin is how many ride requests one rider may make per minute (0: unlimited).
	RidesPerMin int
	// PingsPerMin is how many pings one driver may send per minute (0: unlimited).
	PingsPerMin int
	// EstimatesPerMin is how many fare estimates one rider may ask per minute (0: unlimited).
	EstimatesPerMin int
	// NearbyPerMin is how many nearby queries one caller may make per minute (0: unlimited).
	NearbyPerMin int
	// HailsPerMin is how many hail presses one rider or driver may make per minute (0: unlimited).
	HailsPerMin int
	// ConnectsPerMin is how many WebSocket connects one user may make per minute (0: unlimited).
	ConnectsPerMin int
	// DevicesPerMin is how many device registrations one user may make per minute (0: unlimited).
	DevicesPerMin int
	// PerIPPerMin is how many calls of each kind but pings one client IP may make per minute, when
	// the caller's IP is known (AllowCaller); 0: unlimited.
	PerIPPerMin int
}

// FromConfig returns the budgets of cfg's FLAGDOWN_RATE_* settings.
func FromConfig(cfg *config.Config) Limits {
	return Limits{RidesPerMin: cfg.RateRidesPerMin, PingsPerMin: cfg.RatePingsPerMin,
		EstimatesPerMin: cfg.RateEstimatesPerMin, NearbyPerMin: cfg.RateNearbyPerMin, HailsPerMin: cfg.RateHailsPerMin,
		ConnectsPerMin: cfg.RateConnectsPerMin, DevicesPerMin: cfg.RateDevicesPerMin, PerIPPerMin: cfg.RatePerIPPerMin}
}

// MaxLocal bounds the local budgets (one per caller and kind) a Limiter keeps while Redis does not
// answer; when full they are all dropped and begin again whole.
const MaxLocal = 10_000

// Limiter checks budgets; one per process, safe for concurrent use.
type Limiter struct {
	rl     *redis_rate.Limiter
	rdb    redis.UniversalClient
	prefix string
	limits map[Kind]redis_rate.Limit
	// timeout bounds one check's wait on Redis (0: the client's own timeouts only).
	timeout  time.Duration
	degraded *redisstore.Degradation

	mu    sync.Mutex
	local map[string]*rate.Limiter
}

// New returns a Limiter over rdb with keys under prefix, without a timeout of its own and logging
// nothing (NewTimeout).
func New(rdb redis.UniversalClient, prefix string, l Limits) *Limiter {
	return NewTimeout(rdb, prefix, l, 0, nil)
}

// NewTimeout returns a Limiter over rdb with keys under prefix whose checks wait at most timeout
// (FLAGDOWN_REDIS_TIMEOUT) for Redis before enforcing the budget locally, logging the outage to log.
func NewTimeout(rdb redis.UniversalClient, prefix string, l Limits, timeout time.Duration, log *slog.Logger) *Limiter {
	limits := map[Kind]redis_rate.Limit{}
	for kind, n := range map[Kind]int{RideRequests: l.RidesPerMin, Pings: l.PingsPerMin, Estimates: l.EstimatesPerMin,
		NearbyQueries: l.NearbyPerMin, Hails: l.HailsPerMin, Connects: l.ConnectsPerMin, Devices: l.DevicesPerMin} {
		if n > 0 {
			limits[kind] = redis_rate.PerMinute(n)
		}
	}
	if l.PerIPPerMin > 0 {
		for _, kind := range ipKinds {
			limits[ipKind(kind)] = redis_rate.PerMinute(l.PerIPPerMin)
		}
	}
	return &Limiter{rl: redis_rate.NewLimiter(rdb), rdb: rdb, prefix: prefix, limits: limits, timeout: timeout,
		degraded: redisstore.NewDegradation("rate_limit", log), local: map[string]*rate.Limiter{}}
}

// Allow spends n units of id's budget of kind. It returns nil when allowed; a CodeRateLimited
// error naming field (with details.retry_after_s, whole seconds, at least 1) when the budget is
// spent, and nothing is spent then. When Redis does not answer (within the limiter's timeout) the
// budget is enforced by this process alone (see the package doc).
func (l *Limiter) Allow(ctx context.Context, kind Kind, id, field string, n int) error {
	if l == nil {
		return nil
	}
	lim, ok := l.limits[kind]
	if !ok {
		return nil
	}
	if l.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.timeout)
		defer cancel()
	}
	res, err := l.rl.AllowN(ctx, l.key(kind, id), lim, n)
	if err != nil {
		l.degraded.Degraded(err, "budgets enforced per process, in memory")
		return l.allowLocal(kind, id, field, n, lim)
	}
	l.degraded.Recovered()
	if res.Allowed >= n {
		return nil
	}
	return refused(kind, lim.Burst, lim.Period, field, res.RetryAfter)
}

// allowLocal spends n units of id's budget of kind in this process's own token bucket (the same
// burst, refilled at the same rate as lim), for a check Redis could not answer.
func (l *Limiter) allowLocal(kind Kind, id, field string, n int, lim redis_rate.Limit) error {
	key := l.key(kind, id)
	l.mu.Lock()
	b, ok := l.local[key]
	if !ok {
		if len(l.local) >= MaxLocal {
			clear(l.local)
		}
		b = rate.NewLimiter(rate.Limit(float64(lim.Rate)/lim.Period.Seconds()), lim.Burst)
		l.local[key] = b
	}
	r := b.ReserveN(time.Now(), n)
	l.mu.Unlock()
	if !r.OK() {
		return refused(kind, lim.Burst, lim.Period, field, -1)
	}
	if wait := r.Delay(); wait > 0 {
		r.Cancel() // refused: nothing is spent
		return refused(kind, lim.Burst, lim.Period, field, wait)
	}
	return nil
}

// AllowCaller spends one unit of the caller's budget of kind (Allow, the error naming field) and,
// when ip is not empty, one of that client IP's budget of kind (FLAGDOWN_RATE_PER_IP_PER_MIN, the
// error naming "client_ip"); ip comes from httpx.ClientIP. A caller refused by either budget gets
// its CodeRateLimited error (429 with Retry-After); a unit spent on the caller's budget before the
// IP's refused is not given back.
func (l *Limiter) AllowCaller(ctx context.Context, kind Kind, id, field, ip string) error {
	if err := l.Allow(ctx, kind, id, field, 1); err != nil {
		return err
	}
	if ip == "" {
		return nil
	}
	return l.Allow(ctx, ipKind(kind), ip, "client_ip", 1)
}

// key is id's budget key of kind (redis_rate prefixes it with "rate:").
func (l *Limiter) key(kind Kind, id string) string { return l.prefix + "rl:" + string(kind) + ":" + id }

// refused is the CodeRateLimited error of a spent budget of burst units per period: retry in
// wait (negative when the request is larger than the whole burst: one period), whole seconds, at
// least 1.
func refused(kind Kind, burst int, period time.Duration, field string, wait time.Duration) error {
	if wait < 0 { // n is larger than the whole burst: it can never pass at once
		wait = period
	}
	secs := int(math.Ceil(wait.Seconds()))
	if secs < 1 {
		secs = 1
	}
	return (&dispatch.Error{Code: dispatch.CodeRateLimited, Field: field,
		Message: fmt.Sprintf("%s: at most %d %s per %s; retry in %d s", field, burst, kind, period, secs)}).
		With("retry_after_s", secs)
}

// RetryAfter is how long a caller refused by Allow should wait, from its error (0 for other errors).
func RetryAfter(err error) time.Duration {
	e := dispatch.AsError(err)
	if e.Code != dispatch.CodeRateLimited {
		return 0
	}
	s, _ := e.Details["retry_after_s"].(int)
	return time.Duration(s) * time.Second
}
