-- heartbeat_gone.lua: tells, for each driver, whether his heartbeat lapsed (the rule is lapse.lua's:
-- missing state, a missing or stale health mark, or a lapse inside an outage is not a lapse) more
-- than grace ago (by Redis's clock, from the heartbeat deadline hbdl). It changes nothing. Needs
-- now.lua and lapse.lua before it.
--
-- KEYS[1] health_key  P health, Redis's health mark (health.lua)
-- KEYS[2i], KEYS[2i+1] (i = 1, 2, ...)  pairs of P hb:{id} (heartbeat), P driver:{id} (driver hash)
-- ARGV[1] grace_ms   ms
-- ARGV[2] hb_ttl_ms  heartbeat TTL, ms
-- Returns one integer per pair, in order: 1 lapsed for longer than grace, 0 otherwise.
local health_key = KEYS[1]
local grace_ms = tonumber(ARGV[1])
local hb_ttl_ms = tonumber(ARGV[2])

local out = {}
for i = 2, #KEYS, 2 do
  local hb_key, driver_key = KEYS[i], KEYS[i + 1]
  local state, _, _, hbdl = decide(hb_key, driver_key, health_key, hb_ttl_ms)
  local gone = 0
  if state == 'lapsed' and hbdl + grace_ms < now then gone = 1 end
  out[#out + 1] = gone
end
return out
