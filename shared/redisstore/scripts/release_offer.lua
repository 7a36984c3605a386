-- release_offer.lua: deletes an offer's timer, and releases a driver's offer lock, compare-and-delete
-- on the offer id inside the lock's JSON value, so nobody frees another offer's lock; with requeue, the driver's GEO set
-- membership then follows the available-set rule (available.lua: an available, alive driver
-- without a ride goes back). Needs now.lua and available.lua before it.
--
-- KEYS[1] offer_key      P offer:{id}, the offer lock (value: dispatch.LiveOffer as JSON)
-- KEYS[2] driver_key     P driver:{id}, the driver hash
-- KEYS[3] hb_key         P hb:{id}, the heartbeat
-- KEYS[4] geo_key        P geo:available, the GEO set of available drivers
-- KEYS[5] deadlines_key  P deadlines, every timed key by its deadline
-- KEYS[6] timer_key      P offertimer:{offer id}, the offer's timer
-- ARGV[1] offer_id   the offer the caller holds
-- ARGV[2] requeue    '1' to re-apply the available-set rule after the release, '0' not
-- ARGV[3] driver_id
-- Returns 1 when the lock was released, 0 when it holds another offer or none.
local offer_key = KEYS[1]
local driver_key = KEYS[2]
local hb_key = KEYS[3]
local geo_key = KEYS[4]
local deadlines_key = KEYS[5]
local timer_key = KEYS[6]
local offer_id = ARGV[1]
local requeue = ARGV[2] == '1'
local driver_id = ARGV[3]

-- The offer is decided: its timer goes whoever holds the lock now (it names this offer alone).
redis.call('DEL', timer_key)
redis.call('ZREM', deadlines_key, timer_key)
local v = redis.call('GET', offer_key)
if not v then return 0 end
if string.sub(v, 1, 1) == '~' then v = string.sub(v, 2) end -- not confirmed yet (confirm_offer.lua)
local ok, o = pcall(cjson.decode, v)
if not ok or type(o) ~= 'table' or o['offer_id'] ~= offer_id then return 0 end
redis.call('DEL', offer_key)
redis.call('ZREM', deadlines_key, offer_key) -- an entry indexed by an older version
if requeue then sync_available(geo_key, driver_key, hb_key, offer_key, driver_id) end
return 1
