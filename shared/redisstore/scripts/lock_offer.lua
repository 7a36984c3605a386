-- lock_offer.lua: takes a driver's offer lock only if he can be offered a ride (driver_state of
-- available.lua: alive, available, no ride, no other offer, no street-hail pairing in progress),
-- checked in the same atomic step. The lock (SET NX PXAT) gives exclusion; the offer's timeout is
-- its own timer, P offertimer:{offer id}, set to the same deadline and indexed with it, so a new
-- lock of the same driver never touches an earlier offer's timer. Only if it got the lock does it
-- take him out of the GEO set (so concurrent searches stop finding him). The value carries the
-- tentative mark: nobody is shown the offer until match has recorded it (confirm_offer.lua).
-- Needs now.lua and available.lua before it.
--
-- KEYS[1] offer_key      P offer:{id}, the offer lock
-- KEYS[2] geo_key        P geo:available, the GEO set of available drivers
-- KEYS[3] deadlines_key  P deadlines, every timed key by its deadline (score unix ms)
-- KEYS[4] driver_key     P driver:{id}, the driver hash
-- KEYS[5] hb_key         P hb:{id}, the heartbeat
-- KEYS[6] timer_key      P offertimer:{offer id}, the offer's timer (value: the driver id)
-- ARGV[1] offer_json  the lock's value (dispatch.LiveOffer as JSON after the tentative mark "~")
-- ARGV[2] ttl_ms      the offer window, ms (at least 1)
-- ARGV[3] driver_id
-- Returns 1 locked, 0 another offer or a hail pairing holds him, -1 no longer eligible (offline,
-- on a ride, or not available).
local offer_key = KEYS[1]
local geo_key = KEYS[2]
local deadlines_key = KEYS[3]
local driver_key = KEYS[4]
local hb_key = KEYS[5]
local timer_key = KEYS[6]
local offer_json = ARGV[1]
local ttl_ms = tonumber(ARGV[2])
local driver_id = ARGV[3]

local state = driver_state(driver_key, hb_key, offer_key)
if state == 'offline' or state == 'on_ride' or state == 'not_available' then return -1 end
if state ~= '' then return 0 end
local deadline = now + ttl_ms
if redis.call('SET', offer_key, offer_json, 'NX', 'PXAT', deadline) then
  redis.call('ZREM', geo_key, driver_id)
  redis.call('SET', timer_key, driver_id, 'PXAT', deadline)
  redis.call('ZADD', deadlines_key, deadline, timer_key)
  return 1
end
return 0
