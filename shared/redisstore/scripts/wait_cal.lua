-- wait_cal.lua: folds one pickup's residual into a wait calibration (dispatch.FoldWaitResidual): an
-- exponentially weighted mean of the residuals whose first samples give their plain mean.
--
-- KEYS[1] cal_key   P waitcal:{cell}:{hour}, the calibration hash (fields e: mean residual in
--                   seconds, n: samples folded)
-- ARGV[1] resid_s   the actual request → pickup time less the quoted wait without its
--                   calibration part, seconds
-- ARGV[2] alpha     the weight of a new sample once there are more than 1/alpha (0..1)
-- ARGV[3] ttl_s     how long the calibration is kept without a new sample, seconds
-- Returns the new mean residual in seconds, as a string.
local cal_key = KEYS[1]
local resid_s, alpha, ttl_s = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]

local e = tonumber(redis.call('HGET', cal_key, 'e')) or 0
local n = tonumber(redis.call('HGET', cal_key, 'n')) or 0
local w = math.max(alpha, 1 / (n + 1))
e = e + w * (resid_s - e)
redis.call('HSET', cal_key, 'e', tostring(e), 'n', n + 1)
redis.call('EXPIRE', cal_key, ttl_s)
return tostring(e)
