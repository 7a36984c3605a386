-- claim_batch.lua: takes every waiting ride of a batch for the window named by the claim key,
-- once: if the claim exists it is returned as it is; otherwise the waiting rides (oldest first)
-- move into a new claim.
--
-- KEYS[1] claim_key  P batchrun:{name}:{deadline ms}, the claim of the window (JSON ride ids or "done")
-- KEYS[2] queue_key  P batchq:{name}, the waiting rides
-- ARGV[1] claim_ttl_ms  how long the claim is kept, ms
-- Returns {1, JSON array of the ride ids} for a new claim, {0, the claim's value} for an existing one.
local claim_key = KEYS[1]
local queue_key = KEYS[2]
local claim_ttl_ms = ARGV[1]

local v = redis.call('GET', claim_key)
if v then return {0, v} end
local ids = redis.call('ZRANGE', queue_key, 0, -1)
redis.call('DEL', queue_key)
local j = '[]'
if #ids > 0 then j = cjson.encode(ids) end
redis.call('SET', claim_key, j, 'PX', claim_ttl_ms)
return {1, j}
