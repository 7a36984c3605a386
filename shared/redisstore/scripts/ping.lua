-- ping.lua: applies one driver ping atomically (ApplyPings pipelines one call per ping). Needs
-- now.lua, available.lua and gps_jump.lua before it.
--
-- KEYS[1] driver_key     P driver:{id}, the driver hash
-- KEYS[2] hb_key         P hb:{id}, the heartbeat (a timed key)
-- KEYS[3] geo_key        P geo:available, the GEO set of available drivers
-- KEYS[4] offer_key      P offer:{id}, the driver's offer lock
-- KEYS[5] deadlines_key  P deadlines, every timed key by its deadline (score unix ms)
-- KEYS[6] onride_key     P onride, the drivers whose hash holds a ride
-- ARGV[1]  driver_id
-- ARGV[2]  lat              WGS84 degrees
-- ARGV[3]  lng              WGS84 degrees
-- ARGV[4]  ts               when the device took the fix, unix ms
-- ARGV[5]  asked_status     the status the driver's app asks for, '' keeps the current one
-- ARGV[6]  heading          degrees clockwise from north, '' when unknown
-- ARGV[7]  speed            metres per second (device-reported), '' when unknown
-- ARGV[8]  hb_ttl_ms        heartbeat TTL, ms
-- ARGV[9]  max_speed_mps    implied speed above which a ping is a GPS jump, metres per second
-- ARGV[10] noise_m          distance always allowed between two pings, metres
-- ARGV[11] ride_pos_prefix  P ridepos:
-- ARGV[12] ride_pos_ttl_ms  TTL of a ride's live position, ms
-- ARGV[13] state_ttl_ms     the driver hash's TTL after the last ping, ms
-- ARGV[14] push_every_ms    least time between two position pushes of one ride, ms (0 = none due)
-- Returns {applied (1 or 0), rejected ('', 'stale' or 'gps_jump'), status after the ping, the offer
-- lock's JSON or '', the ride whose rider is due a position push or ''}.
--
-- The one key not in KEYS is the live position of the driver's ride, P ridepos:{ride}
-- (ride_pos_key): its name is the ride the driver hash holds, known only inside the script; it
-- carries the prefix's hash tag, so on a Redis Cluster it is in the slot of the declared keys
-- (CheckPrefix).
--
-- The heartbeat expires at Redis's clock + TTL (SET PXAT). Its deadline is indexed only when the
-- index has no entry for it (ZADD NX): an earlier entry stays, and when it comes due the expiry
-- source's sweeper finds the key alive and moves the entry to the key's own expire time
-- (expiry/scripts/correct.lua, atomically), so a ping writes the index about once per TTL and the
-- entry equals the key's deadline whenever the key is gone. A ping not newer than the last accepted one is stale: it still proves the driver alive (heartbeat
-- refreshed) but changes nothing else; a ping implying a speed above the maximum is a GPS jump
-- (gps_jump.lua, the rule street-hail presses are judged by too): it refreshes the heartbeat but
-- not the position. Drivers on a ride keep the status flagdown gave
-- them, and only the driver a ride's live position was handed to (field driver, see assign.lua)
-- writes it. GEO set membership follows the available-set rule (available.lua). A driver whose hash
-- holds a ride is (re-)added to the on-ride set, so reconcile finds every such driver even if the
-- set was lost or predates him. The driver hash expires state_ttl_ms after the last ping. A ride
-- position written at least push_every_ms after the last one marked due (field pushed, Redis's
-- clock) is marked due again and its ride returned, so its rider gets at most one position push per
-- interval.
local driver_key = KEYS[1]
local hb_key = KEYS[2]
local geo_key = KEYS[3]
local offer_key = KEYS[4]
local deadlines_key = KEYS[5]
local onride_key = KEYS[6]
local driver_id = ARGV[1]
local lat_arg, lng_arg = ARGV[2], ARGV[3]
local ts_arg = ARGV[4]
local asked_status = ARGV[5]
local heading, speed = ARGV[6], ARGV[7]
local hb_ttl_ms = tonumber(ARGV[8])
local max_speed_mps = tonumber(ARGV[9])
local noise_m = tonumber(ARGV[10])
local ride_pos_prefix = ARGV[11]
local ride_pos_ttl_ms = ARGV[12]
local state_ttl_ms = ARGV[13]
local push_every_ms = tonumber(ARGV[14])

local cur = redis.call('HMGET', driver_key, 'ts', 'lat', 'lng', 'status', 'ride')
local ts = tonumber(ts_arg)
local last_ts = tonumber(cur[1])
local status = cur[4] or 'offline'
local ride = cur[5] or ''
local offer = redis.call('GET', offer_key)
local hb_deadline = now + hb_ttl_ms
redis.call('SET', hb_key, ts_arg, 'PXAT', hb_deadline)
redis.call('ZADD', deadlines_key, 'NX', hb_deadline, hb_key)
if last_ts and ts <= last_ts then
  redis.call('HSET', driver_key, 'hbdl', hb_deadline)
  redis.call('PEXPIRE', driver_key, state_ttl_ms)
  return {0, 'stale', status, offer or '', ''}
end
local lat, lng = tonumber(lat_arg), tonumber(lng_arg)
local applied, rejected = 1, ''
local plat, plng = tonumber(cur[2]), tonumber(cur[3])
if plat and plng and last_ts and gps_jump(plat, plng, last_ts, lat, lng, ts, max_speed_mps, noise_m) then
  applied, rejected = 0, 'gps_jump'
end
local prev = status
if ride == '' and asked_status ~= '' then status = asked_status end
if ride ~= '' and (status == 'available' or status == 'offline' or status == 'paused') then
  status = redis.call('HGET', driver_key, 'resume') or 'navigating'
end
local fields = {'status', status, 'seen', ts_arg, 'hbdl', hb_deadline}
if applied == 1 then
  table.insert(fields, 'ts'); table.insert(fields, ts_arg)
  table.insert(fields, 'lat'); table.insert(fields, lat_arg)
  table.insert(fields, 'lng'); table.insert(fields, lng_arg)
  if heading ~= '' then table.insert(fields, 'heading'); table.insert(fields, heading) end
  if speed ~= '' then table.insert(fields, 'speed'); table.insert(fields, speed) end
end
if status == 'available' and prev ~= 'available' then
  table.insert(fields, 'since'); table.insert(fields, now)
end
redis.call('HSET', driver_key, unpack(fields))
redis.call('PEXPIRE', driver_key, state_ttl_ms)
sync_available(geo_key, driver_key, hb_key, offer_key, driver_id)
if ride ~= '' then redis.call('SADD', onride_key, driver_id) end
local push = ''
if ride ~= '' and applied == 1 then
  local ride_pos_key = ride_pos_prefix .. ride
  local rp = redis.call('HMGET', ride_pos_key, 'driver', 'pushed')
  if rp[1] == driver_id then
    if push_every_ms > 0 and now - tonumber(rp[2] or '0') >= push_every_ms then
      redis.call('HSET', ride_pos_key, 'lat', lat_arg, 'lng', lng_arg, 'ts', ts_arg, 'pushed', now)
      push = ride
    else
      redis.call('HSET', ride_pos_key, 'lat', lat_arg, 'lng', lng_arg, 'ts', ts_arg)
    end
    redis.call('PEXPIRE', ride_pos_key, ride_pos_ttl_ms)
  end
end
return {applied, rejected, status, offer or '', push}
