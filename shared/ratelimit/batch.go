package ratelimit

import (
	"context"
	_ "embed"
	"strconv"
	"strings"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// allowNScript is redis_rate v10.0.1's allowN script (GCRA), byte for byte, so it has the same SHA1
// as the one Allow runs (scripts/allow_n.lua, whose header, up to the first blank line, the loader
// strips: see there). It is copied because redis_rate runs one script per round trip and does not
// export it; AllowEach pipelines it.
var allowNScript = redis.NewScript(scriptBody(allowNLua))

// allowNLua is scripts/allow_n.lua: a header comment, a blank line, then redis_rate's script.
//
//go:embed scripts/allow_n.lua
var allowNLua string

// scriptBody is src after its header comment: everything from the first blank line on.
func scriptBody(src string) string {
	i := strings.Index(src, "\n\n")
	if i < 0 {
		panic("ratelimit: a script file without a header ending in a blank line")
	}
	return src[i+1:]
}

// AllowEach spends counts[id] units of each id's budget of kind in one round trip (a pipeline of
// the same script Allow runs) and returns the CodeRateLimited error (as Allow's) of every id past
// its budget; nothing of those ids is spent. The error is CodeUnavailable when Redis cannot be
// reached. A kind without a limit allows everything.
func (l *Limiter) AllowEach(ctx context.Context, kind Kind, counts map[string]int, field string) (map[string]error, error) {
	if l == nil || len(counts) == 0 {
		return nil, nil
	}
	lim, ok := l.limits[kind]
	if !ok {
		return nil, nil
	}
	ids := make([]string, 0, len(counts))
	for id := range counts {
		ids = append(ids, id)
	}
	pipe := l.rdb.Pipeline()
	for _, id := range ids {
		queueAllowN(ctx, pipe, l.key(kind, id), lim, counts[id])
	}
	cmds, err := redisstore.ExecScripts(ctx, l.rdb, pipe, allowNScript)
	if err != nil {
		return nil, dispatch.Unavailable("redis", err)
	}
	var limited map[string]error
	for i, c := range cmds {
		refusal, err := verdict(c.(*redis.Cmd), kind, lim, field, counts[ids[i]])
		if err != nil {
			return nil, err
		}
		if refusal != nil {
			if limited == nil {
				limited = map[string]error{}
			}
			limited[ids[i]] = refusal
		}
	}
	return limited, nil
}

// queueAllowN adds one allowN call spending n units of key's budget lim to pipe (the arguments
// redis_rate's AllowN sends).
func queueAllowN(ctx context.Context, pipe redis.Pipeliner, key string, lim redis_rate.Limit, n int) *redis.Cmd {
	return allowNScript.EvalSha(ctx, pipe, []string{"rate:" + key}, lim.Burst, lim.Rate, lim.Period.Seconds(), n)
}

// verdict reads the answer of one allowN call (queueAllowN) for n units: refusal is Allow's
// CodeRateLimited error when the budget is spent (nil when allowed); err is CodeUnavailable when
// Redis gave no answer.
func verdict(c *redis.Cmd, kind Kind, lim redis_rate.Limit, field string, n int) (refusal, err error) {
	vals, err := c.Slice()
	if err != nil || len(vals) != 4 {
		return nil, dispatch.Unavailable("redis", err)
	}
	if allowed, _ := vals[0].(int64); int(allowed) >= n {
		return nil, nil
	}
	s, _ := vals[2].(string)
	retry, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return nil, dispatch.Internal(err)
	}
	return refused(kind, lim.Burst, lim.Period, field, time.Duration(retry*float64(time.Second))), nil
}

// Spend is one Allow check carried in another read's pipeline (Queue) to save its round trip:
// its Piggyback goes to the read (redisstore.Store.ReadSurge, Quote), and Err, once the read
// returned, is the check's answer. A nil Spend (no limiter, or no limit of its kind) allows
// everything.
type Spend struct {
	l         *Limiter
	kind      Kind
	id, field string
	n         int
	lim       redis_rate.Limit
	cmd       *redis.Cmd
}

// Queue prepares spending n units of id's budget of kind (Allow's check, its error naming field)
// inside another read's round trip: pass Piggyback to the read, then call Err.
func (l *Limiter) Queue(kind Kind, id, field string, n int) *Spend {
	if l == nil {
		return nil
	}
	lim, ok := l.limits[kind]
	if !ok {
		return nil
	}
	return &Spend{l: l, kind: kind, id: id, field: field, n: n, lim: lim}
}

// Piggyback is what the read carries: the allowN call, queued before the read's own commands.
func (s *Spend) Piggyback() redisstore.Piggyback {
	if s == nil {
		return redisstore.Piggyback{}
	}
	return redisstore.Piggyback{Scripts: []*redis.Script{allowNScript}, Queue: func(ctx context.Context, pipe redis.Pipeliner) {
		s.cmd = queueAllowN(ctx, pipe, s.l.key(s.kind, s.id), s.lim, s.n)
	}}
}

// Err is Allow's answer to the check after the read that carried it: nil when allowed, the
// CodeRateLimited error when the budget is spent, and, when the read could not reach Redis, the
// answer of this process's own budget (counted as Allow counts it). When no read carried it (the
// read returned before queueing), it spends in a round trip of its own (Allow).
func (s *Spend) Err(ctx context.Context) error {
	if s == nil {
		return nil
	}
	if s.cmd == nil {
		return s.l.Allow(ctx, s.kind, s.id, s.field, s.n)
	}
	refusal, err := verdict(s.cmd, s.kind, s.lim, s.field, s.n)
	if err != nil {
		s.l.degraded.Degraded(err, "budgets enforced per process, in memory")
		return s.l.allowLocal(s.kind, s.id, s.field, s.n, s.lim)
	}
	s.l.degraded.Recovered()
	return refusal
}
