-- join_batch.lua: adds rides to a batch (keeping the join time of a ride already waiting) and,
-- unless the batch is armed, arms a new window: the timer P batch:{name}:{now} and the armed
-- marker, both expiring at now + window (SET PXAT, the very deadline the timer is indexed with).
-- Needs now.lua before it.
--
-- KEYS[1] queue_key      P batchq:{name}, sorted set of the waiting rides (score = join time, unix ms)
-- KEYS[2] armed_key      P batcharmed:{name}, the name of the armed timer
-- KEYS[3] deadlines_key  P deadlines, every timed key by its deadline (score unix ms)
-- ARGV[1]    window_ms     the batch window, ms
-- ARGV[2]    timer_prefix  P batch:{name}:
-- ARGV[3...] ride ids
-- Returns 1 when it armed the timer, 0 when the batch was armed already.
--
-- The timer key (timer_key) is the one key not in KEYS: it is built in the script (its name
-- carries Redis's clock) from the prefix, whose hash tag puts it in the slot of the declared keys
-- on a Redis Cluster (CheckPrefix).
local queue_key = KEYS[1]
local armed_key = KEYS[2]
local deadlines_key = KEYS[3]
local window_ms = tonumber(ARGV[1])
local timer_prefix = ARGV[2]

for i = 3, #ARGV do redis.call('ZADD', queue_key, 'NX', now, ARGV[i]) end
if redis.call('EXISTS', armed_key) == 1 then return 0 end
local timer_key = timer_prefix .. now
local deadline = now + window_ms
redis.call('SET', timer_key, now, 'PXAT', deadline)
redis.call('SET', armed_key, timer_key, 'PXAT', deadline)
redis.call('ZADD', deadlines_key, deadline, timer_key)
return 1
