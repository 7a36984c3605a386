-- available.lua (snippet): who may be offered a ride and who belongs in the GEO set of available
-- drivers (P geo:available), written once. Needs now.lua before it; touches only the keys its
-- callers pass.

-- driver_state(driver_key, hb_key, offer_key) tells why the driver of hash driver_key (P driver:{id}),
-- heartbeat hb_key (P hb:{id}) and offer lock offer_key (P offer:{id}) can be offered nothing now,
-- checked in this order: 'offline' (heartbeat gone), 'on_ride' (his hash holds a ride),
-- 'not_available' (status other than available), 'offer' (a live offer lock holds him), 'pairing'
-- (a street-hail pairing holds him: field hailhold, a deadline in ms on Redis's clock, is after now);
-- '' when he is free. Also returns his last position from the hash, lat and lng (WGS84 degrees as
-- stored; nil when unknown).
local function driver_state(driver_key, hb_key, offer_key)
  if redis.call('EXISTS', hb_key) == 0 then return 'offline' end
  local d = redis.call('HMGET', driver_key, 'status', 'ride', 'hailhold', 'lat', 'lng')
  if d[2] and d[2] ~= '' then return 'on_ride', d[4], d[5] end
  if d[1] ~= 'available' then return 'not_available', d[4], d[5] end
  if redis.call('EXISTS', offer_key) == 1 then return 'offer', d[4], d[5] end
  if d[3] and tonumber(d[3]) > now then return 'pairing', d[4], d[5] end
  return '', d[4], d[5]
end

-- sync_available(geo_key, driver_key, hb_key, offer_key, driver_id) applies the available-set rule
-- to driver_id: he is a member of geo_key (at his hash's position) exactly when driver_state says
-- he is free and his position is known; otherwise he is taken out. Returns true when he is in.
local function sync_available(geo_key, driver_key, hb_key, offer_key, driver_id)
  local state, lat, lng = driver_state(driver_key, hb_key, offer_key)
  if state == '' and lat and lng then
    redis.call('GEOADD', geo_key, lng, lat, driver_id)
    return true
  end
  redis.call('ZREM', geo_key, driver_id)
  return false
end
