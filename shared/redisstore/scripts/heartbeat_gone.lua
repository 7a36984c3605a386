-- heartbeat_gone.lua: tells, for each driver, whether his heartbeat is gone since more than grace
-- (by Redis's clock, from the heartbeat deadline ping.lua keeps in field hbdl; a driver without
-- that field counts as gone long ago). Needs now.lua before it.
--
-- KEYS[2i-1], KEYS[2i] (i = 1, 2, ...)  pairs of P hb:{id} (heartbeat), P driver:{id} (driver hash)
-- ARGV[1] grace_ms  ms
-- Returns one integer per pair, in order: 1 gone for longer than grace, 0 otherwise.
local grace_ms = tonumber(ARGV[1])

local out = {}
for i = 1, #KEYS, 2 do
  local hb_key, driver_key = KEYS[i], KEYS[i + 1]
  local gone = 0
  if redis.call('EXISTS', hb_key) == 0 then
    local deadline = tonumber(redis.call('HGET', driver_key, 'hbdl') or '0')
    if deadline + grace_ms < now then gone = 1 end
  end
  out[#out + 1] = gone
end
return out
