-- set_timer.lua: sets a timer key to expire at its deadline (Redis's clock + TTL, SET PXAT) and
-- indexes that same deadline, so the index score is exactly the key's PEXPIRETIME (the expiry
-- source's event id rests on it; a relative PX would read the clock again and can land 1 ms
-- later). Needs now.lua before it.
--
-- KEYS[1] timer_key      the timer (e.g. P retry:{ride id})
-- KEYS[2] deadlines_key  P deadlines, every timed key by its deadline (score unix ms)
-- ARGV[1] value   informational (a retry timer's attempt)
-- ARGV[2] ttl_ms  ms until the deadline (at least 1)
-- Returns 1.
local timer_key = KEYS[1]
local deadlines_key = KEYS[2]
local value = ARGV[1]
local ttl_ms = tonumber(ARGV[2])

local deadline = now + ttl_ms
redis.call('SET', timer_key, value, 'PXAT', deadline)
redis.call('ZADD', deadlines_key, deadline, timer_key)
return 1
