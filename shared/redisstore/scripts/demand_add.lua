-- demand_add.lua: records one ride request in a surge cell's demand at Redis's time, trimming the
-- requests older than the window and keeping the key one window. Needs now.lua before it.
--
-- KEYS[1] demand_key  P surge:demand:{cell}, sorted set ride id -> request time (unix ms)
-- ARGV[1] ride_id
-- ARGV[2] window_ms   the surge window, ms
-- Returns now (unix ms, Redis's clock).
local demand_key = KEYS[1]
local ride_id = ARGV[1]
local window_ms = ARGV[2]

redis.call('ZADD', demand_key, now, ride_id)
redis.call('ZREMRANGEBYSCORE', demand_key, '-inf', now - tonumber(window_ms))
redis.call('PEXPIRE', demand_key, window_ms)
return now
