-- nearby.lua: the flat-cost candidate search: GEOSEARCH BYRADIUS ASC COUNT in rings of growing
-- radius, from the first ring up to the asked radius, stopping at the first ring that holds count
-- drivers.
--
-- KEYS[1] geo_key  P geo:available, the GEO set of available drivers
-- ARGV[1] lng           the search centre, WGS84 degrees
-- ARGV[2] lat           WGS84 degrees
-- ARGV[3] radius_m      the asked radius, metres
-- ARGV[4] count         how many drivers are wanted
-- ARGV[5] first_ring_m  the first ring's radius, metres (RingStartM)
-- Returns the last ring's reply ({id, distance m, {lng, lat}}, ...) and the number of rings searched.
--
-- GEOSEARCH visits every member in the geohash boxes that cover its radius, so one search of the
-- whole radius costs in proportion to how many drivers are inside it (tens of thousands at a dense
-- pickup); a ring sized to the local density visits about as many as it returns, wherever the
-- pickup is. Each next ring is sized from the density the last one saw: x 1.5 sqrt(count/found),
-- between x2 and x8 (x8 when it found nobody). The answer is exact: the count nearest within a
-- ring of radius r are the count nearest within any radius >= r, since every driver outside the
-- ring is farther than r; and the last ring is the asked radius.
local geo_key = KEYS[1]
local lng, lat = ARGV[1], ARGV[2]
local radius_m = tonumber(ARGV[3])
local count = tonumber(ARGV[4])
local first_ring_m = tonumber(ARGV[5])

local r, rings = math.min(first_ring_m, radius_m), 0
while true do
  rings = rings + 1
  local res = redis.call('GEOSEARCH', geo_key, 'FROMLONLAT', lng, lat, 'BYRADIUS', r, 'm',
    'ASC', 'COUNT', count, 'WITHDIST', 'WITHCOORD')
  if #res >= count or r >= radius_m then return {res, rings} end
  local grow = 8
  if #res > 0 then grow = math.max(2, math.min(8, 1.5 * math.sqrt(count / #res))) end
  r = math.min(r * grow, radius_m)
end
