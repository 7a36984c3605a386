-- demand_count.lua: counts a surge cell's requests within the window before Redis's now; it
-- writes nothing (demand_add.lua trims). Needs now.lua before it.
--
-- KEYS[1] demand_key  P surge:demand:{cell}, sorted set ride id -> request time (unix ms)
-- ARGV[1] window_ms   the surge window, ms
-- Returns {count, now (unix ms, Redis's clock)}.
local demand_key = KEYS[1]
local window_ms = tonumber(ARGV[1])

return {redis.call('ZCOUNT', demand_key, '(' .. (now - window_ms), '+inf'), now}
