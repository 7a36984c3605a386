-- surge_store.lua: stores a surge cell's new multiplier compare-and-set on the time of the one it
-- was computed from, and only when at least the update interval has passed since that one: so two
-- estimates racing for one update make one step, not two. Needs now.lua before it.
--
-- KEYS[1] mult_key  P surge:mult:{cell}, hash m (multiplier), at (unix ms, Redis's clock)
-- ARGV[1] multiplier   the new multiplier
-- ARGV[2] prev_at_ms   the at of the multiplier it was computed from, unix ms (0 = none)
-- ARGV[3] interval_ms  least time between two updates, ms
-- ARGV[4] ttl_ms       the key's TTL after an update, ms
-- Returns {multiplier, at ms, 1 if stored}: the stored value when another update won.
local mult_key = KEYS[1]
local multiplier = ARGV[1]
local prev_at_ms = tonumber(ARGV[2])
local interval_ms = tonumber(ARGV[3])
local ttl_ms = ARGV[4]

local cur = redis.call('HMGET', mult_key, 'm', 'at')
local at = tonumber(cur[2]) or 0
if at ~= prev_at_ms or (at > 0 and now - at < interval_ms) then
  return {cur[1] or '1', at, 0}
end
redis.call('HSET', mult_key, 'm', multiplier, 'at', now)
redis.call('PEXPIRE', mult_key, ttl_ms)
return {multiplier, now, 1}
