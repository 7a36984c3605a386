-- restore_hail.lua: puts a taken street-hail entry back (a pairing that failed in PostgreSQL for a
-- reason that is not the entry's) with its original expiry, unless that expiry has passed or the
-- same person pressed again meanwhile. Needs now.lua and hail_prelude.lua before it.
--
-- KEYS[1] geo_key    P hail:geo:{side}, the side's GEO set of waiting entries
-- KEYS[2] exp_key    P hail:exp:{side}, their expiries (score unix ms, Redis's clock)
-- KEYS[3] entry_key  P hail:entry:{side}, their payloads (JSON)
-- ARGV[1] id          the rider's or driver's id
-- ARGV[2] lat         WGS84 degrees
-- ARGV[3] lng         WGS84 degrees
-- ARGV[4] entry_json  the entry (HailEntry as JSON)
-- ARGV[5] expiry_ms   its original expiry, unix ms (Redis's clock)
-- Returns 1 when restored, 0 otherwise.
local geo_key, exp_key, entry_key = KEYS[1], KEYS[2], KEYS[3]
local id = ARGV[1]
local lat, lng = ARGV[2], ARGV[3]
local entry_json = ARGV[4]
local expiry_ms = tonumber(ARGV[5])

if expiry_ms <= now or redis.call('HEXISTS', entry_key, id) == 1 then return 0 end
redis.call('GEOADD', geo_key, lng, lat, id)
redis.call('ZADD', exp_key, expiry_ms, id)
redis.call('HSET', entry_key, id, entry_json)
extend(geo_key, expiry_ms - now)
extend(exp_key, expiry_ms - now)
extend(entry_key, expiry_ms - now)
return 1
