-- correct: moves a key's deadline index entry to its later expire time only while the key still
-- lives with that expire time, checked in the same atomic step: once a key is gone its entry never
-- changes again, so a copy that saw it alive cannot re-date an expiry another copy is publishing.
-- KEYS[1] deadlines: the deadline index (score = unix ms)
-- KEYS[2] key: the timed key
-- ARGV[1] member: the timed key's name (its member in the index)
-- ARGV[2] expire_ms: the key's expire time as the sweeper read it (PEXPIRETIME), unix ms
-- Returns 1 when corrected, 0 otherwise.
local deadlines, key = KEYS[1], KEYS[2]
local member, expire_ms = ARGV[1], tonumber(ARGV[2])

if redis.call('PEXPIRETIME', key) ~= expire_ms then return 0 end
return redis.call('ZADD', deadlines, 'XX', 'GT', expire_ms, member)
