-- release_hold.lua: ends a driver's street-hail hold (field hailhold) and then applies the
-- available-set rule to him (available.lua): still alive, available, without a ride and without an
-- offer lock, he goes back to the GEO set (a pairing that failed); a driver the pairing gave a ride
-- stays out of it. Needs now.lua and available.lua before it.
--
-- KEYS[1] driver_key  P driver:{id}, the driver hash
-- KEYS[2] hb_key      P hb:{id}, the heartbeat
-- KEYS[3] geo_key     P geo:available, the GEO set of available drivers
-- KEYS[4] offer_key   P offer:{id}, the driver's offer lock
-- ARGV[1] driver_id
-- Returns 1 when he was held, 0 otherwise (nothing changed).
local driver_key = KEYS[1]
local hb_key = KEYS[2]
local geo_key = KEYS[3]
local offer_key = KEYS[4]
local driver_id = ARGV[1]

if redis.call('HDEL', driver_key, 'hailhold') == 0 then return 0 end
sync_available(geo_key, driver_key, hb_key, offer_key, driver_id)
return 1
