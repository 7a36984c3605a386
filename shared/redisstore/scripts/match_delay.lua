-- match_delay.lua: folds one match delay into the recent match delay, an EWMA; the first sample is
-- the EWMA. The key lives a day (86,400 s) without accepts.
--
-- KEYS[1] delay_key  P matchdelay, hash ewma (seconds), n (samples)
-- ARGV[1] delay_s    seconds from a ride's request to its accept
-- ARGV[2] alpha      the weight of the new sample (0..1)
-- Returns the new EWMA, seconds, as a string.
local delay_key = KEYS[1]
local delay_s = tonumber(ARGV[1])
local alpha = tonumber(ARGV[2])

local e = tonumber(redis.call('HGET', delay_key, 'ewma'))
if e == nil then e = delay_s else e = alpha * delay_s + (1 - alpha) * e end
redis.call('HSET', delay_key, 'ewma', tostring(e))
redis.call('HINCRBY', delay_key, 'n', 1)
redis.call('EXPIRE', delay_key, 86400)
return tostring(e)
