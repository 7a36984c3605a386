package ratelimit

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flagdown/flagdown/shared/dispatch"
)

// allowNScript is redis_rate v10.0.1's allowN script (GCRA), byte for byte, so it has the same SHA1
// as the one Allow runs: both share Redis's script cache and the same "rate:"-prefixed keys, and a
// budget spent by one is spent for the other. The script is
// Copyright (c) 2017 Pavel Pravosud (https://github.com/rwz/redis-gcra), BSD-2-Clause as redis_rate.
// It is copied because redis_rate runs one script per round trip and does not export it;
// AllowEach pipelines it.
var allowNScript = redis.NewScript(`
-- this script has side-effects, so it requires replicate commands mode
redis.replicate_commands()

local rate_limit_key = KEYS[1]
local burst = ARGV[1]
local rate = ARGV[2]
local period = ARGV[3]
local cost = tonumber(ARGV[4])

local emission_interval = period / rate
local increment = emission_interval * cost
local burst_offset = emission_interval * burst

-- redis returns time as an array containing two integers: seconds of the epoch
-- time (10 digits) and microseconds (6 digits). for convenience we need to
-- convert them to a floating point number. the resulting number is 16 digits,
-- bordering on the limits of a 64-bit double-precision floating point number.
-- adjust the epoch to be relative to Jan 1, 2017 00:00:00 GMT to avoid floating
-- point problems. this approach is good until "now" is 2,483,228,799 (Wed, 09
-- Sep 2048 01:46:39 GMT), when the adjusted value is 16 digits.
local jan_1_2017 = 1483228800
local now = redis.call("TIME")
now = (now[1] - jan_1_2017) + (now[2] / 1000000)

local tat = redis.call("GET", rate_limit_key)

if not tat then
  tat = now
else
  tat = tonumber(tat)
end

tat = math.max(tat, now)

local new_tat = tat + increment
local allow_at = new_tat - burst_offset

local diff = now - allow_at
local remaining = diff / emission_interval

if remaining < 0 then
  local reset_after = tat - now
  local retry_after = diff * -1
  return {
    0, -- allowed
    0, -- remaining
    tostring(retry_after),
    tostring(reset_after),
  }
end

local reset_after = new_tat - now
if reset_after > 0 then
  redis.call("SET", rate_limit_key, new_tat, "EX", math.ceil(reset_after))
end
local retry_after = -1
return {cost, remaining, tostring(retry_after), tostring(reset_after)}
`)

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
	run := func() ([]redis.Cmder, error) {
		pipe := l.rdb.Pipeline()
		for _, id := range ids {
			allowNScript.EvalSha(ctx, pipe, []string{"rate:" + l.key(kind, id)}, lim.Burst, lim.Rate, lim.Period.Seconds(), counts[id])
		}
		return pipe.Exec(ctx)
	}
	cmds, err := run()
	if err != nil && strings.Contains(err.Error(), "NOSCRIPT") {
		if err := allowNScript.Load(ctx, l.rdb).Err(); err != nil {
			return nil, dispatch.Unavailable("redis", err)
		}
		cmds, err = run()
	}
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
