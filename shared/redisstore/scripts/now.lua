-- now.lua (snippet): Redis's own clock as `now`, unix ms, for every script that stamps or
-- schedules, so no host clock (which may be off by seconds) reaches a deadline. Prefixed to the
-- scripts that use `now`; it touches no key.
local redis_time = redis.call('TIME')
local now = tonumber(redis_time[1]) * 1000 + math.floor(tonumber(redis_time[2]) / 1000)
