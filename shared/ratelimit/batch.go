package ratelimit

import (
	"context"
	_ "embed"
	"strconv"
	"strings"
	"time"

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
		allowNScript.EvalSha(ctx, pipe, []string{"rate:" + l.key(kind, id)}, lim.Burst, lim.Rate, lim.Period.Seconds(), counts[id])
	}
	cmds, err := redisstore.ExecScripts(ctx, l.rdb, pipe, allowNScript)
	if err != nil {
		return nil, dispatch.Unavailable("redis", err)
	}
	var limited map[string]error
	for i, c := range cmds {
		vals, err := c.(*redis.Cmd).Slice()
		if err != nil || len(vals) != 4 {
			return nil, dispatch.Unavailable("redis", err)
		}
		allowed, _ := vals[0].(int64)
		n := counts[ids[i]]
		if int(allowed) >= n {
			continue
		}
		s, _ := vals[2].(string)
		retry, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, dispatch.Internal(err)
		}
		if limited == nil {
			limited = map[string]error{}
		}
		limited[ids[i]] = refused(kind, lim.Burst, lim.Period, field, time.Duration(retry*float64(time.Second)))
	}
	return limited, nil
}
