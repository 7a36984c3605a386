-- spend_ping.lua: spends one ping of a driver's ping budget (ping_budget.lua, the one ping.lua
-- spends) for a report of where he is that is not a ping (a hail press). A driver whose hash does
-- not exist spends nothing (no hash is created). Needs now.lua and ping_budget.lua before it.
--
-- KEYS[1] driver_key  P driver:{id}, the driver hash
-- ARGV[1] pings_per_min  the budget: pings per minute, with a burst of as many (> 0)
-- Returns 0 when spent (or nothing to spend), else the ms to wait before a unit is free.
local driver_key = KEYS[1]
local pings_per_min = tonumber(ARGV[1])

if redis.call('EXISTS', driver_key) == 0 then return 0 end
local rl, wait_ms = spend_ping_budget(redis.call('HGET', driver_key, 'rl'), pings_per_min)
if rl then redis.call('HSET', driver_key, 'rl', rl) end
return wait_ms
