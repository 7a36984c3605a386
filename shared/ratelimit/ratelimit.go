// Package ratelimit caps how fast one rider may request rides and one driver may ping, backed by
// Redis so that every replica of a function shares the same budget. It uses go-redis/redis_rate (a
// GCRA limiter in one Lua script per call), not a hand-written bucket.
//
// Keys: P rl:{kind}:{id} (redis_rate adds its own "rate:" prefix), each expiring once its budget is
// whole again. A limit of 0 disables that kind.
package ratelimit

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/flagdown/flagdown/shared/dispatch"
)

// Kind names what is limited.
type Kind string

// Kinds of limits.
const (
	// RideRequests: order-create calls per rider (FLAGDOWN_RATE_RIDES_PER_MIN).
	RideRequests Kind = "rides"
	// Pings: location-update pings per driver (FLAGDOWN_RATE_PINGS_PER_MIN).
	Pings Kind = "pings"
)

// Limits are the configured budgets, per minute, with a burst of the same size.
type Limits struct {
	// RidesPerMin is how many ride requests one rider may make per minute (0: unlimited).
	RidesPerMin int
	// PingsPerMin is how many pings one driver may send per minute (0: unlimited).
	PingsPerMin int
}

// Limiter checks budgets; one per process, safe for concurrent use.
type Limiter struct {
	rl     *redis_rate.Limiter
	rdb    redis.UniversalClient
	prefix string
	limits map[Kind]redis_rate.Limit
}

// New returns a Limiter over rdb with keys under prefix.
func New(rdb redis.UniversalClient, prefix string, l Limits) *Limiter {
	limits := map[Kind]redis_rate.Limit{}
	if l.RidesPerMin > 0 {
		limits[RideRequests] = redis_rate.PerMinute(l.RidesPerMin)
	}
	if l.PingsPerMin > 0 {
		limits[Pings] = redis_rate.PerMinute(l.PingsPerMin)
	}
	return &Limiter{rl: redis_rate.NewLimiter(rdb), rdb: rdb, prefix: prefix, limits: limits}
}

// Allow spends n units of id's budget of kind. It returns nil when allowed; a CodeRateLimited
// error naming field (with details.retry_after_s, whole seconds, at least 1) when the budget is
// spent, and nothing is spent then; CodeUnavailable when Redis cannot be reached.
func (l *Limiter) Allow(ctx context.Context, kind Kind, id, field string, n int) error {
	lim, ok := l.limits[kind]
	if !ok || l == nil {
		return nil
	}
	res, err := l.rl.AllowN(ctx, l.key(kind, id), lim, n)
	if err != nil {
		return dispatch.Unavailable("redis", err)
	}
	if res.Allowed >= n {
		return nil
	}
	return refused(kind, lim.Burst, lim.Period, field, res.RetryAfter)
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
