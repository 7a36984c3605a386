-- presence.lua: decides one driver's presence (the rule is lapse.lua's) and, when the decision is
-- deferred, re-indexes his heartbeat at the deferral time in P deadlines, so the expiry source
-- fires again then (a deferred decision, never a burst on stale data). Needs now.lua and lapse.lua
-- before it.
--
-- KEYS[1] hb_key         P hb:{id}, the heartbeat
-- KEYS[2] driver_key     P driver:{id}, the driver hash
-- KEYS[3] health_key     P health, Redis's health mark (health.lua)
-- KEYS[4] deadlines_key  P deadlines, every timed key by its deadline (score unix ms)
-- ARGV[1] hb_ttl_ms  heartbeat TTL, ms
-- Returns {state, reason, status ('' when unknown), seen (ms of his last ping, '' when unknown)}.
local hb_key = KEYS[1]
local driver_key = KEYS[2]
local health_key = KEYS[3]
local deadlines_key = KEYS[4]
local hb_ttl_ms = tonumber(ARGV[1])

local cur = redis.call('HMGET', driver_key, 'status', 'seen')
local state, reason, defer_at = decide(hb_key, driver_key, health_key, hb_ttl_ms)
if defer_at > 0 then redis.call('ZADD', deadlines_key, 'GT', defer_at, hb_key) end
return {state, reason, cur[1] or '', cur[2] or ''}
