-- drive_pace.lua: folds one pickup into the learned drive pace (dispatch.FoldDrivePace): two
-- exponentially weighted means, of the drive time and of the distance, whose first samples give
-- their plain means. The key lives a week (WaitCalibrationTTL) without pickups.
--
-- KEYS[1] pace_key  P drivepace, hash s (mean seconds from an accept to the pickup), m (mean
--                   straight-line metres driver → pickup at the offer), n (samples folded)
-- ARGV[1] drive_s   this pickup's seconds from the accept to the pickup (riders' time)
-- ARGV[2] dist_m    this pickup's straight-line metres at the offer
-- ARGV[3] alpha     the weight of a new sample once there are more than 1/alpha (0..1)
-- ARGV[4] ttl_s     how long the pace is kept without a new sample, seconds
-- Returns the number of samples folded.
local pace_key = KEYS[1]
local drive_s, dist_m, alpha, ttl_s = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]

local s = tonumber(redis.call('HGET', pace_key, 's')) or 0
local m = tonumber(redis.call('HGET', pace_key, 'm')) or 0
local n = tonumber(redis.call('HGET', pace_key, 'n')) or 0
local w = math.max(alpha, 1 / (n + 1))
s = s + w * (drive_s - s)
m = m + w * (dist_m - m)
redis.call('HSET', pace_key, 's', tostring(s), 'm', tostring(m), 'n', n + 1)
redis.call('EXPIRE', pace_key, ttl_s)
return n + 1
