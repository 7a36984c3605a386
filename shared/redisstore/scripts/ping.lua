-- ping.lua: applies a batch of driver pings, each atomically with its rate budget, in one call
-- (ApplyPings sends up to pingsPerCall pings per call, pipelined): the call's own cost (the script
-- invocation, its arguments, Redis's clock, the effects' replication block) is paid once per batch,
-- not once per ping. Pings are applied in order, each reading what the ones before it wrote, so a
-- driver's two pings of one batch are judged as two calls would judge them. Needs now.lua,
-- available.lua, gps_jump.lua and ping_budget.lua before it.
--
-- KEYS[1] geo_key        P geo:available, the GEO set of available drivers
-- KEYS[2] deadlines_key  P deadlines, every timed key by its deadline (score unix ms)
-- KEYS[3] onride_key     P onride, the drivers whose hash holds a ride
-- KEYS[4] hbidx_key      P hbidx, every pinging driver by his heartbeat deadline (score unix ms),
--                        the population the offline brake counts (health.lua)
-- then, for the i-th ping (i = 1..n, k = 4 + 3(i-1)):
-- KEYS[k+1] driver_key   P driver:{id}, the driver hash
-- KEYS[k+2] hb_key       P hb:{id}, the heartbeat (a timed key)
-- KEYS[k+3] offer_key    P offer:{id}, the driver's offer lock
-- ARGV[1]  hb_ttl_ms        heartbeat TTL, ms
-- ARGV[2]  max_speed_mps    implied speed above which a ping is a GPS jump, metres per second
-- ARGV[3]  noise_m          distance always allowed between two pings, metres
-- ARGV[4]  ride_pos_prefix  P ridepos:
-- ARGV[5]  ride_pos_ttl_ms  TTL of a ride's live position, ms
-- ARGV[6]  state_ttl_ms     the driver hash's TTL after the last ping, ms
-- ARGV[7]  push_every_ms    least time between two position pushes of one ride, ms (0 = none due)
-- ARGV[8]  pings_per_min    the driver's ping budget: pings per minute, with a burst of as many
--                           (0 = unlimited)
-- ARGV[9]  state_refresh_ms how stale the driver hash's expiry may grow before a ping renews it, ms
--                           (the hash lives at least state_ttl_ms - state_refresh_ms after the last
--                           ping, and at most state_ttl_ms)
-- then, for the i-th ping (j = 9 + 7(i-1)):
-- ARGV[j+1] driver_id
-- ARGV[j+2] lat              WGS84 degrees
-- ARGV[j+3] lng              WGS84 degrees
-- ARGV[j+4] ts               when the device took the fix, unix ms
-- ARGV[j+5] asked_status     the status the driver's app asks for, '' keeps the current one
-- ARGV[j+6] heading          degrees clockwise from north, '' when unknown
-- ARGV[j+7] speed            metres per second (device-reported), '' when unknown
-- Returns one reply per ping, in order, each {applied (1 or 0), rejected ('', 'stale', 'gps_jump'
-- or 'rate_limited'), status after the ping ('unknown' when he named none and Redis held no state
-- of his), the offer lock's JSON or '', the ride whose rider is due a position push or '', ms to
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
-- Retention: field xp of the driver hash is when the hash expires (ms, Redis's clock), as the last
-- PEXPIRE set it; a ping renews the expiry (PEXPIRE, xp) only when xp is missing or less than
-- state_ttl_ms - state_refresh_ms ahead, so a steady driver's ping spends no PEXPIRE. Only this
-- script sets the hash's expiry on a hash that has one (assign.lua sets it only on a hash without),
-- so xp never claims more than the key's TTL; a hash re-created elsewhere has no xp and is renewed
-- by its next ping.
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
-- set was lost or predates him. A ride
-- position written at least push_every_ms after the last one marked due (field pushed, Redis's
-- clock) is marked due again and its ride returned, so its rider gets at most one position push per
-- interval.
local geo_key = KEYS[1]
local deadlines_key = KEYS[2]
local onride_key = KEYS[3]
local hbidx_key = KEYS[4]
local hb_ttl_ms = tonumber(ARGV[1])
local max_speed_mps = tonumber(ARGV[2])
local noise_m = tonumber(ARGV[3])
local ride_pos_prefix = ARGV[4]
local ride_pos_ttl_ms = ARGV[5]
local state_ttl_ms = tonumber(ARGV[6])
local push_every_ms = tonumber(ARGV[7])
local pings_per_min = tonumber(ARGV[8])
local state_refresh_ms = tonumber(ARGV[9])
local hb_deadline = now + hb_ttl_ms

-- keep_state(driver_key, fields, xp) writes fields to the driver hash and renews its expiry when
-- its known expiry xp (field xp, ms; false when missing) is due (see Retention above).
local function keep_state(driver_key, fields, xp)
  local renew = not xp or tonumber(xp) - now < state_ttl_ms - state_refresh_ms
  if renew then
    table.insert(fields, 'xp'); table.insert(fields, now + state_ttl_ms)
  end
  redis.call('HSET', driver_key, unpack(fields))
  if renew then redis.call('PEXPIRE', driver_key, state_ttl_ms) end
end

-- apply_ping applies one ping (the i-th of the call's KEYS and ARGV, see above) and returns its reply.
local function apply_ping(driver_key, hb_key, offer_key, driver_id, lat_arg, lng_arg, ts_arg, asked_status, heading, speed)
  local cur = redis.call('HMGET', driver_key, 'ts', 'lat', 'lng', 'status', 'ride', 'resume', 'hailhold', 'rl', 'xp')
  -- No state (Redis restarted empty, or the hash expired) and no status asked: nothing says whether
  -- he is online. He is kept as offline (offered nothing) and answered 'unknown', never 'offline',
  -- so his app says its status with the next ping; no status is written, so every status-less ping
  -- is answered 'unknown' until his state is known (a driver on a ride names none), and he stays in
  -- the heartbeat index (he is pinging: he did not set himself offline).
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
  local was_alive = redis.call('SET', hb_key, ts_arg, 'PXAT', hb_deadline, 'GET')
  if not was_alive then redis.call('ZADD', deadlines_key, hb_deadline, hb_key) end
  table.insert(fields, 'hbdl'); table.insert(fields, hb_deadline)

  local ts = tonumber(ts_arg)
  local last_ts = tonumber(cur[1])
  if last_ts and ts <= last_ts then
    if status == 'offline' and not unknown then redis.call('ZREM', hbidx_key, driver_id) else redis.call('ZADD', hbidx_key, hb_deadline, driver_id) end
    keep_state(driver_key, fields, cur[9])
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
  keep_state(driver_key, fields, cur[9])
  if status == 'offline' and not unknown then redis.call('ZREM', hbidx_key, driver_id) else redis.call('ZADD', hbidx_key, hb_deadline, driver_id) end

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
end

local replies = {}
for i = 1, (#KEYS - 4) / 3 do
  local k, j = 4 + 3 * (i - 1), 9 + 7 * (i - 1)
  local driver_key, hb_key, offer_key = KEYS[k + 1], KEYS[k + 2], KEYS[k + 3]
  replies[i] = apply_ping(driver_key, hb_key, offer_key, ARGV[j + 1], ARGV[j + 2], ARGV[j + 3], ARGV[j + 4], ARGV[j + 5], ARGV[j + 6], ARGV[j + 7])
end
return replies
