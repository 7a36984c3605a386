-- hail.lua: one street-hail press, atomic with every other press and with the offer lock
-- (lock_offer.lua). Needs now.lua, available.lua and hail_prelude.lua before it.
--
-- KEYS[1] own_geo_key      P hail:geo:{side}, GEO set of the presser's side's waiting entries
-- KEYS[2] own_exp_key      P hail:exp:{side}, their expiries (score unix ms, Redis's clock)
-- KEYS[3] own_entry_key    P hail:entry:{side}, their payloads (JSON)
-- KEYS[4] other_geo_key    the same three keys of the other side
-- KEYS[5] other_exp_key
-- KEYS[6] other_entry_key
-- KEYS[7] available_key    P geo:available, the GEO set of available drivers
-- ARGV[1]  side           'rider' or 'driver', the presser's
-- ARGV[2]  presser_id     the rider's or driver's id
-- ARGV[3]  lat            where the press was made, WGS84 degrees
-- ARGV[4]  lng            WGS84 degrees
-- ARGV[5]  code           the normalized short code, '' when none
-- ARGV[6]  entry_json     the presser's entry (HailEntry as JSON)
-- ARGV[7]  window_ms      how long an entry waits, ms
-- ARGV[8]  radius_m       how far a counterpart may be, metres
-- ARGV[9]  hold_ms        how long a paired driver is held, ms
-- ARGV[10] driver_prefix  P driver:
-- ARGV[11] hb_prefix      P hb:
-- ARGV[12] offer_prefix   P offer:
-- Returns {'waiting', expiry ms, now ms}, {'ambiguous', candidates}, {'unavailable', driver state
-- (driver_state of available.lua)} or {'paired', counterpart id, counterpart entry JSON,
-- counterpart expiry ms, distance m}.
--
-- Keys not in KEYS: the hash, heartbeat and offer lock of the drivers the press concerns (the
-- presser when he is a driver, the drivers the search finds, the paired driver: found_driver_key,
-- found_hb_key, found_offer_key, held_driver_key), whose ids only the search gives; they are built
-- from the prefix, whose hash tag puts them in the slot of the declared keys on a Redis Cluster
-- (CheckPrefix).
--
-- Trim both sides; a driver who cannot hail (driver_state) is refused; the press replaces the
-- presser's own waiting entry; GEOSEARCH the other side within the radius and keep the live
-- entries with the same code (waiting drivers who can no longer be paired are dropped); none: the
-- press waits (entry added, keys' TTL extended); two or more: refused as ambiguous, nothing else
-- changes; one: its entry is taken and the pair's driver is held (field hailhold = now + hold, and
-- out of the available set) so match cannot offer him a ride while the pairing is written to
-- PostgreSQL.
local own_geo_key, own_exp_key, own_entry_key = KEYS[1], KEYS[2], KEYS[3]
local other_geo_key, other_exp_key, other_entry_key = KEYS[4], KEYS[5], KEYS[6]
local available_key = KEYS[7]
local side = ARGV[1]
local presser_id = ARGV[2]
local lat, lng = ARGV[3], ARGV[4]
local code = ARGV[5]
local entry_json = ARGV[6]
local window_ms = tonumber(ARGV[7])
local radius_m = ARGV[8]
local hold_ms = tonumber(ARGV[9])
local driver_prefix, hb_prefix, offer_prefix = ARGV[10], ARGV[11], ARGV[12]

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

trim(own_geo_key, own_exp_key, own_entry_key)
trim(other_geo_key, other_exp_key, other_entry_key)
drop(own_geo_key, own_exp_key, own_entry_key, presser_id)
if side == 'driver' then
  local s = state_of(presser_id)
  if s ~= '' then return {'unavailable', s} end
end
local hits = redis.call('GEOSEARCH', other_geo_key, 'FROMLONLAT', lng, lat, 'BYRADIUS', radius_m, 'm', 'ASC', 'COUNT', hail_max_candidates, 'WITHDIST')
local found = {}
for _, h in ipairs(hits) do
  local id, dist = h[1], h[2]
  local exp = tonumber(redis.call('ZSCORE', other_exp_key, id) or '0')
  local raw = redis.call('HGET', other_entry_key, id)
  if exp > now and raw then
    local ok, e = pcall(cjson.decode, raw)
    if ok and type(e) == 'table' and (e['code'] or '') == code then
      if side == 'rider' and state_of(id) ~= '' then
        drop(other_geo_key, other_exp_key, other_entry_key, id)
      else
        found[#found + 1] = {id, dist, raw, exp}
      end
    end
  end
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
if #found > 1 then return {'ambiguous', #found} end
local c = found[1]
drop(other_geo_key, other_exp_key, other_entry_key, c[1])
local driver = c[1]
if side == 'driver' then driver = presser_id end
local held_driver_key = driver_prefix .. driver
redis.call('HSET', held_driver_key, 'hailhold', now + hold_ms)
redis.call('ZREM', available_key, driver)
return {'paired', c[1], c[3], c[4], c[2]}
