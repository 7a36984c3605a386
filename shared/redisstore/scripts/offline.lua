-- offline.lua: marks a driver offline unless his heartbeat lives again (a ping raced the expiry).
-- A driver on a ride keeps the status he had (navigating or busy) in the field resume, so his
-- first ping back restores it.
--
-- KEYS[1] hb_key      P hb:{id}, the heartbeat
-- KEYS[2] driver_key  P driver:{id}, the driver hash
-- KEYS[3] geo_key     P geo:available, the GEO set of available drivers
-- ARGV[1] driver_id
-- Returns {0, status} when he is alive (nothing changed), {1, previous status} otherwise.
local hb_key = KEYS[1]
local driver_key = KEYS[2]
local geo_key = KEYS[3]
local driver_id = ARGV[1]

local st = redis.call('HGET', driver_key, 'status') or ''
if redis.call('EXISTS', hb_key) == 1 then return {0, st} end
redis.call('ZREM', geo_key, driver_id)
if redis.call('EXISTS', driver_key) == 1 then
  redis.call('HSET', driver_key, 'status', 'offline')
  if st == 'navigating' or st == 'busy' then redis.call('HSET', driver_key, 'resume', st) end
end
return {1, st}
