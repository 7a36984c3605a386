-- confirm_offer.lua: makes a driver's offer lock an offer he is shown, once match has recorded the
-- offer in PostgreSQL. lock_offer.lua stores the lock value with the tentative mark ("~" before
-- the offer's JSON): it keeps every other offer away at once, but a ping answer and the push sync
-- show it only after this drops the mark. The lock's deadline is kept.
--
-- KEYS[1] offer_key  P offer:{id}, the offer lock
-- ARGV[1] offer_id   the offer recorded
-- Returns 1 confirmed, 0 the lock no longer holds that offer (it ended, or another holds him).
local offer_key = KEYS[1]
local offer_id = ARGV[1]

local v = redis.call('GET', offer_key)
if not v or string.sub(v, 1, 1) ~= '~' then return 0 end
local json = string.sub(v, 2)
local ok, o = pcall(cjson.decode, json)
if not ok or type(o) ~= 'table' or o['offer_id'] ~= offer_id then return 0 end
redis.call('SET', offer_key, json, 'KEEPTTL')
return 1
