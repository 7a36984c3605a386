-- available.lua (snippet): who may be offered a ride and who belongs in the GEO set of available
-- drivers (P geo:available), written once. Needs now.lua before it; touches only the keys its
-- callers pass.

-- why_not_free(alive, status, ride, offered, hailhold) is the rule on values a caller already
-- holds: why a driver can be offered nothing now, checked in this order: 'offline' (alive false:
-- heartbeat gone), 'on_ride' (ride not empty), 'not_available' (status other than available),
-- 'offer' (offered true: a live offer lock holds him), 'pairing' (hailhold, a deadline in ms on
-- Redis's clock, is after now: a street-hail pairing holds him); '' when he is free.
local function why_not_free(alive, status, ride, offered, hailhold)
  if not alive then return 'offline' end
  if ride and ride ~= '' then return 'on_ride' end
  if status ~= 'available' then return 'not_available' end
  if offered then return 'offer' end
  if hailhold and tonumber(hailhold) > now then return 'pairing' end
  return ''
end

-- driver_state(driver_key, hb_key, offer_key) tells why the driver of hash driver_key (P driver:{id}),
-- heartbeat hb_key (P hb:{id}) and offer lock offer_key (P offer:{id}) can be offered nothing now
-- (why_not_free, read from those keys); '' when he is free. Also returns his last position from the
-- hash, lat and lng (WGS84 degrees as stored; nil when unknown).
local function driver_state(driver_key, hb_key, offer_key)
  if redis.call('EXISTS', hb_key) == 0 then return 'offline' end
  local d = redis.call('HMGET', driver_key, 'status', 'ride', 'hailhold', 'lat', 'lng')
  local why = why_not_free(true, d[1], d[2], false, d[3])
  if why == 'on_ride' or why == 'not_available' then return why, d[4], d[5] end
  if redis.call('EXISTS', offer_key) == 1 then return 'offer', d[4], d[5] end
  return why, d[4], d[5]
end

-- place_available(geo_key, driver_id, free, lat, lng) makes geo_key hold driver_id at lat, lng
-- exactly when free is true and the position is known; otherwise takes him out. Returns true when
-- he is in.
local function place_available(geo_key, driver_id, free, lat, lng)
  if free and lat and lng then
    redis.call('GEOADD', geo_key, lng, lat, driver_id)
    return true
  end
  redis.call('ZREM', geo_key, driver_id)
  return false
end

-- sync_available(geo_key, driver_key, hb_key, offer_key, driver_id) applies the available-set rule
-- to driver_id: he is a member of geo_key (at his hash's position) exactly when driver_state says
-- he is free and his position is known; otherwise he is taken out. Returns true when he is in.
local function sync_available(geo_key, driver_key, hb_key, offer_key, driver_id)
  local state, lat, lng = driver_state(driver_key, hb_key, offer_key)
  return place_available(geo_key, driver_id, state == '', lat, lng)
end
