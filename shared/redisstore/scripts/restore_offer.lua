-- restore_offer.lua: puts back a PENDING offer's lock and timer after Redis lost them (reconcile's
-- rebuild when Redis's generation changed: restarted empty or flushed). PostgreSQL holds the offer,
-- so the lock is written without the tentative mark and without the eligibility check of
-- lock_offer.lua (the driver's state is what was lost); SET NX leaves alone a lock that holds him
-- already. The driver leaves the GEO set, and the offer's timer gets the deadline its remaining
-- window gives on Redis's clock. A window already closed indexes the timer at now without its key,
-- so the sweep publishes its expiry at once. Needs now.lua before it.
--
-- KEYS[1] offer_key      P offer:{driver id}, the offer lock
-- KEYS[2] geo_key        P geo:available, the GEO set of available drivers
-- KEYS[3] deadlines_key  P deadlines, every timed key by its deadline (score unix ms)
-- KEYS[4] timer_key      P offertimer:{offer id}, the offer's timer (value: the driver id)
-- ARGV[1] offer_json    the lock's value (dispatch.LiveOffer as JSON)
-- ARGV[2] remaining_ms  what is left of the offer window, ms (PostgreSQL's expires_at - now)
-- ARGV[3] driver_id
-- Returns 1 lock and timer restored, 0 timer only (another lock holds him, or the window closed).
local offer_key = KEYS[1]
local geo_key = KEYS[2]
local deadlines_key = KEYS[3]
local timer_key = KEYS[4]
local offer_json = ARGV[1]
local remaining_ms = tonumber(ARGV[2])
local driver_id = ARGV[3]

if remaining_ms < 1 then
  redis.call('ZADD', deadlines_key, now, timer_key)
  return 0
end
local deadline = now + remaining_ms
redis.call('SET', timer_key, driver_id, 'PXAT', deadline)
redis.call('ZADD', deadlines_key, deadline, timer_key)
if redis.call('SET', offer_key, offer_json, 'NX', 'PXAT', deadline) then
  redis.call('ZREM', geo_key, driver_id)
  return 1
end
return 0
