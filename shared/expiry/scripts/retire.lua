-- retire: after a published expiry, removes the key's entry from the deadline index only if its
-- score is still the published deadline (a re-armed timer keeps its new one), and remembers the
-- deadline in the tombstone set, so a copy reading the index after this still computes the same id.
-- KEYS[1] deadlines: the deadline index (score = unix ms)
-- KEYS[2] fired: the tombstone set (score = published deadline, unix ms)
-- ARGV[1] key: the timed key whose expiry was published
-- ARGV[2] deadline_ms: the published deadline, unix ms
-- ARGV[3] retention_ms: how long the tombstone set lives (the broker's duplicate window), ms
-- Returns 1.
local deadlines, fired = KEYS[1], KEYS[2]
local key, deadline_ms, retention_ms = ARGV[1], tonumber(ARGV[2]), ARGV[3]

local score = redis.call('ZSCORE', deadlines, key)
if score and tonumber(score) == deadline_ms then redis.call('ZREM', deadlines, key) end
redis.call('ZADD', fired, 'GT', deadline_ms, key)
redis.call('PEXPIRE', fired, retention_ms)
return 1
