-- lapse.lua (snippet): the liveness decision on one driver, written once for every script that
-- decides whether a driver went offline (presence.lua, heartbeat_gone.lua). Needs now.lua before it.
--
-- A driver is offline ('lapsed') only on positive evidence: his driver hash holds hbdl (the
-- heartbeat deadline ping.lua writes, Redis's clock), hbdl <= now and his heartbeat key is gone,
-- Redis's health mark P health (health.lua) exists and was written within its gap threshold (the
-- observer is healthy now), and the lapse was observed while healthy: hbdl >= since (the start of
-- the current healthy period), or a full heartbeat TTL of that period has passed (now >= since +
-- TTL: he had the time to ping again), and the offline brake (health.lua) neither holds nor was
-- released less than a TTL after his deadline (a mass lapse is the platform's fault: like an
-- outage, it gives every driver it held a TTL after the release). Anything else is 'unknown' and changes nothing; with it
-- comes the time (ms, Redis's clock; 0 = none) at which the decision is worth taking again: since +
-- TTL when the lapse fell inside an outage, now + TTL while the observer is unhealthy or unknown.
--
-- decide(hb_key, driver_key, health_key, hb_ttl_ms) returns state ('alive', 'lapsed' or
-- 'unknown'), reason ('' or, for unknown: no_state, early, no_health, unhealthy, mass_lapse, outage), the
-- deferral time (ms) and hbdl (ms, 0 when missing).
local function decide(hb_key, driver_key, health_key, hb_ttl_ms)
  if redis.call('EXISTS', hb_key) == 1 then return 'alive', '', 0, 0 end
  local hbdl = tonumber(redis.call('HGET', driver_key, 'hbdl') or '')
  if not hbdl then return 'unknown', 'no_state', 0, 0 end
  if hbdl > now then return 'unknown', 'early', 0, hbdl end
  local h = redis.call('HMGET', health_key, 'seen', 'since', 'gap', 'brake', 'brake_off')
  local seen, since, gap = tonumber(h[1]), tonumber(h[2]), tonumber(h[3])
  if not seen or not since or not gap then return 'unknown', 'no_health', now + hb_ttl_ms, hbdl end
  if now - seen > gap then return 'unknown', 'unhealthy', now + hb_ttl_ms, hbdl end
  if h[4] then return 'unknown', 'mass_lapse', now + hb_ttl_ms, hbdl end
  local brake_off = tonumber(h[5] or '')
  if brake_off and hbdl < brake_off and now < brake_off + hb_ttl_ms then
    return 'unknown', 'mass_lapse', brake_off + hb_ttl_ms, hbdl
  end
  if hbdl < since and now < since + hb_ttl_ms then return 'unknown', 'outage', since + hb_ttl_ms, hbdl end
  return 'lapsed', '', 0, hbdl
end
