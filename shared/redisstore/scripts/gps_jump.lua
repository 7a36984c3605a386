-- gps_jump.lua (snippet): the GPS-jump rule, written once: a ping (ping.lua) and a street-hail press
-- (hail.lua) are both moves from a last known fix and are judged by it. Touches no key.

-- earth_radius_m is Redis GEO's earth radius, metres, so distance_m agrees with GEODIST/GEOSEARCH.
local earth_radius_m = 6372797.560856

-- distance_m(lat1, lng1, lat2, lng2) is the great-circle (haversine) distance between two WGS84
-- points (degrees), metres.
local function distance_m(lat1, lng1, lat2, lng2)
  local r = math.pi / 180
  local dlat, dlng = (lat2 - lat1) * r, (lng2 - lng1) * r
  local a = math.sin(dlat/2)^2 + math.cos(lat1*r) * math.cos(lat2*r) * math.sin(dlng/2)^2
  return 2 * earth_radius_m * math.asin(math.min(1, math.sqrt(a)))
end

-- gps_jump(from_lat, from_lng, from_ms, to_lat, to_lng, to_ms, max_speed_mps, noise_m) tells whether
-- the move from the first fix to the second (times unix ms) is a GPS jump: longer than
-- max_speed_mps (metres per second) × the elapsed time (0 when negative) + noise_m (metres, the
-- jitter always allowed). Also returns the move's distance, metres.
local function gps_jump(from_lat, from_lng, from_ms, to_lat, to_lng, to_ms, max_speed_mps, noise_m)
  local d = distance_m(from_lat, from_lng, to_lat, to_lng)
  local dt = math.max(0, (to_ms - from_ms) / 1000)
  return d > max_speed_mps * dt + noise_m, d
end
