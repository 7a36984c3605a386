-- hail.lua: one street-hail press, atomic with every other press and with the offer lock
-- (lock_offer.lua). Needs now.lua, available.lua, gps_jump.lua and hail_prelude.lua before it.
--
-- KEYS[1] own_geo_key      P hail:geo:{side}, GEO set of the presser's side's waiting entries
-- KEYS[2] own_exp_key      P hail:exp:{side}, their expiries (score unix ms, Redis's clock)
-- KEYS[3] own_entry_key    P hail:entry:{side}, their payloads (JSON)
-- KEYS[4] other_geo_key    the same three keys of the other side
-- KEYS[5] other_exp_key
-- KEYS[6] other_entry_key
-- KEYS[7] available_key    P geo:available, the GEO set of available drivers
-- KEYS[8] presser_key      a driver's hash P driver:{id} (his last accepted ping: ts, lat, lng);
--                          a rider's last press P hail:last:{id} (hash lat, lng, at)
-- KEYS[9] tries_key        P hail:tries:{side}:{id}, the presser's wrong short codes in the window
-- ARGV[1]  side            'rider' or 'driver', the presser's
-- ARGV[2]  presser_id      the rider's or driver's id
-- ARGV[3]  lat             where the press was made, WGS84 degrees
-- ARGV[4]  lng             WGS84 degrees
-- ARGV[5]  code            the normalized short code, '' when none
-- ARGV[6]  entry_json      the presser's entry (HailEntry as JSON)
-- ARGV[7]  window_ms       how long an entry waits, ms
-- ARGV[8]  radius_m        how far a counterpart may be, metres
-- ARGV[9]  hold_ms         how long a paired driver is held, ms
-- ARGV[10] driver_prefix   P driver:
-- ARGV[11] hb_prefix       P hb:
-- ARGV[12] offer_prefix    P offer:
-- ARGV[13] ping_max_age_ms how old a driver's last accepted ping may be, ms (its fix time, ts)
-- ARGV[14] gps_slack_m     GPS error allowed on top of radius_m around a driver's last ping, metres
-- ARGV[15] max_speed_mps   the GPS-jump rule's maximum speed, metres per second
-- ARGV[16] noise_m         the GPS-jump rule's jitter always allowed, metres
-- ARGV[17] code_max_wrong  wrong short codes allowed per window
-- ARGV[18] code_lockout_ms the window wrong codes are counted in, ms
-- ARGV[19] rider_memory_ms how long a rider's last press is remembered, ms
-- Returns {'waiting', expiry ms, now ms}, {'ambiguous'}, {'unavailable', driver state (driver_state
-- of available.lua)}, {'refused', rule, figure} (rule 'code_tries' with the lockout's remaining ms,
-- 'stale' with the last ping's age in ms, 'far' or 'gps_jump' with the move's metres and ms)
-- or {'paired', counterpart id, counterpart entry JSON, counterpart expiry ms, distance m}.
--
-- Keys not in KEYS: the hash, heartbeat and offer lock of the drivers the press concerns (the
-- presser when he is a driver, the drivers the search finds, the paired driver: found_driver_key,
-- found_hb_key, found_offer_key, held_driver_key), whose ids only the search gives; they are built
-- from the prefix, whose hash tag puts them in the slot of the declared keys on a Redis Cluster
-- (CheckPrefix).
--
-- A presser locked out for wrong codes is refused first, changing nothing. Trim both sides; a
-- driver who cannot hail (driver_state) is refused; a driver's press is bound to his last accepted
-- ping (fresh, within radius + slack, no GPS jump from it), a rider's to her previous press (no GPS
-- jump), else refused changing nothing; a rider's accepted press is remembered. The press replaces
-- the presser's own waiting entry; GEOSEARCH the other side within the radius and keep the live
-- entries with the same code whose driver's last ping is fresh and within radius + slack of the
-- rider (waiting drivers who can no longer be paired are dropped); none: the press waits (entry
-- added, keys' TTL extended), and when it carried a code while coded counterparts near it carried
-- others, that is one wrong code (the count lives code_lockout_ms from the first); two or more:
-- refused as ambiguous, nothing else changes; one: its entry is taken and the pair's driver is held
-- (field hailhold = now + hold, and out of the available set) so match cannot offer him a ride
-- while the pairing is written to PostgreSQL.
local own_geo_key, own_exp_key, own_entry_key = KEYS[1], KEYS[2], KEYS[3]
local other_geo_key, other_exp_key, other_entry_key = KEYS[4], KEYS[5], KEYS[6]
local available_key = KEYS[7]
local presser_key, tries_key = KEYS[8], KEYS[9]
local side = ARGV[1]
local presser_id = ARGV[2]
local lat, lng = ARGV[3], ARGV[4]
local code = ARGV[5]
local entry_json = ARGV[6]
local window_ms = tonumber(ARGV[7])
local radius_m = ARGV[8]
local hold_ms = tonumber(ARGV[9])
local driver_prefix, hb_prefix, offer_prefix = ARGV[10], ARGV[11], ARGV[12]
local ping_max_age_ms = tonumber(ARGV[13])
local reach_m = tonumber(radius_m) + tonumber(ARGV[14])
local max_speed_mps, noise_m = tonumber(ARGV[15]), tonumber(ARGV[16])
local code_max_wrong, code_lockout_ms = tonumber(ARGV[17]), tonumber(ARGV[18])
local rider_memory_ms = tonumber(ARGV[19])
local plat, plng = tonumber(lat), tonumber(lng)

-- hail_max_candidates bounds the GEOSEARCH of one press (COUNT): far more than a pairing needs (two
-- candidates already make it ambiguous), so only the reply is bounded, not the rule.
local hail_max_candidates = 64

-- state_of is driver_state of the driver id, whose keys are built from the prefixes.
local function state_of(id)
  local found_driver_key = driver_prefix .. id
  local found_hb_key = hb_prefix .. id
  local found_offer_key = offer_prefix .. id
  return driver_state(found_driver_key, found_hb_key, found_offer_key)
end

-- last_ping tells the last accepted ping of the driver whose hash is key: fix time (unix ms), lat,
-- lng; nil when he has none.
local function last_ping(key)
  local p = redis.call('HMGET', key, 'ts', 'lat', 'lng')
  local ts, la, ln = tonumber(p[1]), tonumber(p[2]), tonumber(p[3])
  if not (ts and la and ln) then return nil end
  return ts, la, ln
end

-- ping_near tells whether driver id's last accepted ping is fresh and within reach_m of (la, ln).
local function ping_near(id, la, ln)
  local found_driver_key = driver_prefix .. id
  local ts, dla, dln = last_ping(found_driver_key)
  return ts ~= nil and now - ts <= ping_max_age_ms and distance_m(dla, dln, la, ln) <= reach_m
end

local wrong = tonumber(redis.call('GET', tries_key) or '0')
if wrong >= code_max_wrong then
  return {'refused', 'code_tries', math.max(redis.call('PTTL', tries_key), 1)}
end
trim(own_geo_key, own_exp_key, own_entry_key)
trim(other_geo_key, other_exp_key, other_entry_key)
-- The presser's own fix to pair around: a driver's last accepted ping, a rider's press.
local flat, flng = plat, plng
if side == 'driver' then
  local s = state_of(presser_id)
  if s ~= '' then return {'unavailable', s} end
  local ts, dla, dln = last_ping(presser_key)
  if not ts or now - ts > ping_max_age_ms then
    return {'refused', 'stale', ts and (now - ts) or -1}
  end
  local jump, d = gps_jump(dla, dln, ts, plat, plng, now, max_speed_mps, noise_m)
  if d > reach_m then return {'refused', 'far', d, now - ts} end
  if jump then return {'refused', 'gps_jump', d, now - ts} end
  flat, flng = dla, dln
else
  local last = redis.call('HMGET', presser_key, 'lat', 'lng', 'at')
  local la, ln, at = tonumber(last[1]), tonumber(last[2]), tonumber(last[3])
  if la and ln and at then
    local jump, d = gps_jump(la, ln, at, plat, plng, now, max_speed_mps, noise_m)
    if jump then return {'refused', 'gps_jump', d, now - at} end
  end
  redis.call('HSET', presser_key, 'lat', lat, 'lng', lng, 'at', now)
  redis.call('PEXPIRE', presser_key, rider_memory_ms)
end
drop(own_geo_key, own_exp_key, own_entry_key, presser_id)
local mismatched = false
local hits = redis.call('GEOSEARCH', other_geo_key, 'FROMLONLAT', lng, lat, 'BYRADIUS', radius_m, 'm', 'ASC', 'COUNT', hail_max_candidates, 'WITHDIST')
local found = {}
for _, h in ipairs(hits) do
  local id, dist = h[1], h[2]
  local exp = tonumber(redis.call('ZSCORE', other_exp_key, id) or '0')
  local raw = redis.call('HGET', other_entry_key, id)
  if exp > now and raw then
    local ok, e = pcall(cjson.decode, raw)
    local their = ok and type(e) == 'table' and (e['code'] or '') or nil
    if their == code then
      if side == 'rider' and state_of(id) ~= '' then
        drop(other_geo_key, other_exp_key, other_entry_key, id)
      elseif side == 'rider' and not ping_near(id, plat, plng) then
        -- His last ping left her (or is stale): he is not where his press said any more.
      elseif side == 'driver' and distance_m(flat, flng, tonumber(e['lat']), tonumber(e['lng'])) > reach_m then
        -- She is not near where his last ping puts him.
      else
        found[#found + 1] = {id, dist, raw, exp}
      end
    elseif their and their ~= '' and code ~= '' then
      mismatched = true
    end
  end
end
if #found == 0 and mismatched then
  if redis.call('INCR', tries_key) == 1 then redis.call('PEXPIRE', tries_key, code_lockout_ms) end
end
if #found == 0 then
  redis.call('GEOADD', own_geo_key, lng, lat, presser_id)
  redis.call('ZADD', own_exp_key, now + window_ms, presser_id)
  redis.call('HSET', own_entry_key, presser_id, entry_json)
  extend(own_geo_key, window_ms)
  extend(own_exp_key, window_ms)
  extend(own_entry_key, window_ms)
  return {'waiting', now + window_ms, now}
end
if #found > 1 then return {'ambiguous'} end
local c = found[1]
drop(other_geo_key, other_exp_key, other_entry_key, c[1])
local driver = c[1]
if side == 'driver' then driver = presser_id end
local held_driver_key = driver_prefix .. driver
redis.call('HSET', held_driver_key, 'hailhold', now + hold_ms)
redis.call('ZREM', available_key, driver)
return {'paired', c[1], c[3], c[4], c[2]}
