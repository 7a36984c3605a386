-- allow_n.lua: spends cost units of one id's budget (GCRA), or none when the budget is short.
-- redis_rate v10.0.1's allowN script: everything after this header (from the first blank line on)
-- is that script byte for byte, so the loader (batch.go) strips the header and the script keeps
-- redis_rate's SHA1: both share Redis's script cache and the same "rate:"-prefixed keys, and a
-- budget spent by one is spent for the other. The script is Copyright (c) 2017 Pavel Pravosud
-- (https://github.com/rwz/redis-gcra), BSD-2-Clause as redis_rate.
--
-- KEYS[1] rate_limit_key  rate:P rl:{kind}:{id}, the theoretical arrival time (TAT: seconds since
--                         2017-01-01 UTC); expires once the budget is whole again
-- ARGV[1] burst   the most units spendable at once
-- ARGV[2] rate    units per period
-- ARGV[3] period  the period, seconds
-- ARGV[4] cost    units to spend
-- Returns {allowed units (cost, or 0), remaining units, retry_after seconds (-1 when allowed) as a
-- string, reset_after seconds as a string}.

-- this script has side-effects, so it requires replicate commands mode
redis.replicate_commands()

local rate_limit_key = KEYS[1]
local burst = ARGV[1]
local rate = ARGV[2]
local period = ARGV[3]
local cost = tonumber(ARGV[4])

local emission_interval = period / rate
local increment = emission_interval * cost
local burst_offset = emission_interval * burst

-- redis returns time as an array containing two integers: seconds of the epoch
-- time (10 digits) and microseconds (6 digits). for convenience we need to
-- convert them to a floating point number. the resulting number is 16 digits,
-- bordering on the limits of a 64-bit double-precision floating point number.
-- adjust the epoch to be relative to Jan 1, 2017 00:00:00 GMT to avoid floating
-- point problems. this approach is good until "now" is 2,483,228,799 (Wed, 09
-- Sep 2048 01:46:39 GMT), when the adjusted value is 16 digits.
local jan_1_2017 = 1483228800
local now = redis.call("TIME")
now = (now[1] - jan_1_2017) + (now[2] / 1000000)

local tat = redis.call("GET", rate_limit_key)

if not tat then
  tat = now
else
  tat = tonumber(tat)
end

tat = math.max(tat, now)

local new_tat = tat + increment
local allow_at = new_tat - burst_offset

local diff = now - allow_at
local remaining = diff / emission_interval

if remaining < 0 then
  local reset_after = tat - now
  local retry_after = diff * -1
  return {
    0, -- allowed
    0, -- remaining
    tostring(retry_after),
    tostring(reset_after),
  }
end

local reset_after = new_tat - now
if reset_after > 0 then
  redis.call("SET", rate_limit_key, new_tat, "EX", math.ceil(reset_after))
end
local retry_after = -1
return {cost, remaining, tostring(retry_after), tostring(reset_after)}
