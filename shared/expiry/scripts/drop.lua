-- drop: compare-and-ZREM of a deadline index entry (a key without a TTL any more).
-- KEYS[1] deadlines: the deadline index (score = unix ms)
-- ARGV[1] member: the timed key's name
-- ARGV[2] deadline_ms: the score read, unix ms
-- Returns 1 when removed, 0 when the entry changed meanwhile.
local deadlines = KEYS[1]
local member, deadline_ms = ARGV[1], tonumber(ARGV[2])

local score = redis.call('ZSCORE', deadlines, member)
if score and tonumber(score) == deadline_ms then return redis.call('ZREM', deadlines, member) end
return 0
