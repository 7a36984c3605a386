-- ping.lua: applies one driver ping atomically, its rate budget included (ApplyPings pipelines one
-- call per ping). Needs now.lua, available.lua, gps_jump.lua and ping_budget.lua before it.
--
-- KEYS[1] driver_key     P driver:{id}, the driver hash
-- KEYS[2] hb_key         P hb:{id}, the heartbeat (a timed key)
-- KEYS[3] geo_key        P geo:available, the GEO set of available drivers
-- KEYS[4] offer_key      P offer:{id}, the driver's offer lock
-- KEYS[5] deadlines_key  P deadlines, every timed key by its deadline (score unix ms)
-- KEYS[6] onride_key     P onride, the drivers whose hash holds a ride
-- KEYS[7] hbidx_key      P hbidx, every pinging driver by his heartbeat deadline (score unix ms),
--                        the population the offline brake counts (health.lua)
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
-- ARGV[15] pings_per_min    the driver's ping budget: pings per minute, with a burst of as many
--                           (0 = unlimited)
-- Returns {applied (1 or 0), rejected ('', 'stale', 'gps_jump' or 'rate_limited'), status after
-- the ping ('unknown' when he named none and Redis held no state of his), the offer lock's JSON or '', the ride whose rider is due a position push or '', ms to
-- wait before the next ping is within the budget (0 unless rate_limited)}.
--
-- The one key not in KEYS is the live position of the driver's ride, P ridepos:{ride}
-- (ride_pos_key): its name is the ride the driver hash holds, known only inside the script; it
-- carries the prefix's hash tag, so on a Redis Cluster it is in the slot of the declared keys
-- (CheckPrefix).
--
-- Rate budget (ping_budget.lua): its state is field rl of the driver hash, read with the fields the
-- ping reads anyway and written with them: no key and no command of its own. A ping past the
-- budget changes nothing (not even the heartbeat) and spends nothing. spend_ping.lua spends the
-- same budget.
--
-- The heartbeat expires at Redis's clock + TTL (SET PXAT ... GET). Its deadline is indexed only
-- when the key did not live before this ping (SET's GET answered nil): while a heartbeat lives the
-- index holds an entry for it at or before its expire time (written when it was created; the
-- expiry source's sweeper moves an entry that comes due to the live key's own expire time,
-- expiry/scripts/correct.lua, and removes entries only of keys gone), so a living driver's ping
-- writes no index entry. A re-created heartbeat overwrites any entry left by the last one (a
-- deferral of presence.lua, or an entry of a published expiry not yet retired): the new entry is
-- the new key's deadline. A ping not newer than the last accepted one is stale: it still proves the
-- driver alive (heartbeat refreshed) but changes nothing else; a ping implying a speed above the
-- maximum is a GPS jump (gps_jump.lua, the rule street-hail presses are judged by too): it
-- refreshes the heartbeat but not the position. Drivers on a ride keep
-- the status flagdown gave them, and only the driver a ride's live position was handed to (field
-- driver, see assign.lua) writes it. GEO set membership follows the available-set rule
-- (available.lua's why_not_free, on the values read here): a free driver is (re-)placed at his
-- position; a driver not free is taken out unless he was not free before this ping either (every
-- script that makes a driver not free takes him out, so he is not a member). The heartbeat index
-- P hbidx holds every driver's latest heartbeat deadline (a driver who set himself offline leaves
-- it): the offline brake (health.lua) counts in it how many drivers went silent together; it is
-- the one command a ping spends for the brake. A driver whose hash
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
local hbidx_key = KEYS[7]
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
local pings_per_min = tonumber(ARGV[15])

local cur = redis.call('HMGET', driver_key, 'ts', 'lat', 'lng', 'status', 'ride', 'resume', 'hailhold', 'rl')
-- No state (Redis restarted empty, or the hash expired) and no status asked: nothing says whether he
-- is online. He is kept as offline (offered nothing) and answered 'unknown', never 'offline', so his
-- app says its status with the next ping; no status is written, so every status-less ping is
-- answered 'unknown' until his state is known (a driver on a ride names none), and he stays in the
-- heartbeat index (he is pinging: he did not set himself offline).
local unknown = cur[4] == false and asked_status == ''
local status = cur[4] or 'offline'
local ride = cur[5] or ''

local fields = {}
if pings_per_min > 0 then
  local rl, wait_ms = spend_ping_budget(cur[8], pings_per_min)
  if not rl then return {0, 'rate_limited', status, '', '', wait_ms} end
  fields = {'rl', rl}
end

local offer = redis.call('GET', offer_key)
local hb_deadline = now + hb_ttl_ms
local was_alive = redis.call('SET', hb_key, ts_arg, 'PXAT', hb_deadline, 'GET')
if not was_alive then redis.call('ZADD', deadlines_key, hb_deadline, hb_key) end
table.insert(fields, 'hbdl'); table.insert(fields, hb_deadline)

local ts = tonumber(ts_arg)
local last_ts = tonumber(cur[1])
if last_ts and ts <= last_ts then
  if status == 'offline' and not unknown then redis.call('ZREM', hbidx_key, driver_id) else redis.call('ZADD', hbidx_key, hb_deadline, driver_id) end
  redis.call('HSET', driver_key, unpack(fields))
  redis.call('PEXPIRE', driver_key, state_ttl_ms)
  return {0, 'stale', status, offer or '', '', 0}
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
  status = cur[6] or 'navigating'
end
-- An unknown status stays unknown (no status field): offline was not observed, so the next
-- status-less ping is answered unknown too.
if not unknown or ride ~= '' then table.insert(fields, 'status'); table.insert(fields, status) end
table.insert(fields, 'seen'); table.insert(fields, ts_arg)
local glat, glng = cur[2], cur[3]
if applied == 1 then
  glat, glng = lat_arg, lng_arg
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
if status == 'offline' and not unknown then redis.call('ZREM', hbidx_key, driver_id) else redis.call('ZADD', hbidx_key, hb_deadline, driver_id) end
redis.call('PEXPIRE', driver_key, state_ttl_ms)

local offered = offer ~= false and offer ~= nil
local free = why_not_free(true, status, ride, offered, cur[7]) == ''
local was_free = why_not_free(was_alive ~= false and was_alive ~= nil, prev, ride, offered, cur[7]) == ''
if free then
  place_available(geo_key, driver_id, true, glat, glng)
elseif was_free or not was_alive then
  place_available(geo_key, driver_id, false)
end
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
local answered = status
if unknown and ride == '' then answered = 'unknown' end
return {applied, rejected, answered, offer or '', push, 0}
