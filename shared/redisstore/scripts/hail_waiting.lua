-- hail_waiting.lua: tells whether an id has a live waiting street-hail entry (by Redis's clock).
-- Needs now.lua before it.
--
-- KEYS[1] exp_key  P hail:exp:{side}, the side's entry expiries (score unix ms)
-- ARGV[1] id       the rider's or driver's id
-- Returns 1 when its expiry is in the future, 0 otherwise.
local exp_key = KEYS[1]
local id = ARGV[1]

local expiry_ms = tonumber(redis.call('ZSCORE', exp_key, id) or '0')
if expiry_ms > now then return 1 end
return 0
