-- miss.lua: counts an offer a driver let expire, restarting the count when his last miss is older
-- than the memory (Redis's clock). Needs now.lua before it.
--
-- KEYS[1] driver_key  P driver:{id}, the driver hash (fields missed, missed_at in unix ms)
-- ARGV[1] memory_ms   how long a miss counts, ms
-- Returns 1.
local driver_key = KEYS[1]
local memory_ms = tonumber(ARGV[1])

local last = tonumber(redis.call('HGET', driver_key, 'missed_at') or '0')
if now - last > memory_ms then redis.call('HSET', driver_key, 'missed', 0) end
redis.call('HINCRBY', driver_key, 'missed', 1)
redis.call('HSET', driver_key, 'missed_at', now)
return 1
