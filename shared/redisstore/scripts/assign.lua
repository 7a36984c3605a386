-- assign.lua: applies a driver's assignment from PostgreSQL, compare-and-set on its fencing token
-- (the epoch): it does nothing unless the token is newer than the driver's fence, the highest token
-- Redis applied for him, so a late, repeated or snapshot-based write never moves Redis backwards,
-- even after the driver hash was lost. Needs now.lua and available.lua before it.
--
-- KEYS[1] driver_key     P driver:{id}, the driver hash
-- KEYS[2] geo_key        P geo:available, the GEO set of available drivers
-- KEYS[3] onride_key     P onride, the drivers whose hash holds a ride
-- KEYS[4] hb_key         P hb:{id}, the heartbeat
-- KEYS[5] offer_key      P offer:{id}, the driver's offer lock
-- KEYS[6] fence_key      P fence:{id}, the highest token applied for the driver (no TTL: it outlives
--                        the hash, which expires with the driver state TTL or may be evicted)
-- KEYS[7] fence_max_key  P fence:max, the highest token applied for any driver (reconcile moves
--                        PostgreSQL's sequence past it when PostgreSQL moved backwards)
-- KEYS[8] deadlines_key  P deadlines, every timed key by its deadline (score unix ms)
-- KEYS[9] ride_pos_key   P ridepos:{ride}, the live position of ride (only when ride is not '')
-- ARGV[1]  driver_id
-- ARGV[2]  epoch            the fencing token PostgreSQL gave the change (sequence assignment_token)
-- ARGV[3]  ride             the ride id, '' = free
-- ARGV[4]  ride_status      the driver's on-ride status (navigating or busy)
-- ARGV[5]  ride_version     the ride's version
-- ARGV[6]  lat              WGS84 degrees to move a free driver to, '' keeps his position
-- ARGV[7]  lng              WGS84 degrees
-- ARGV[8]  ride_pos_prefix  P ridepos:
-- ARGV[9]  ride_pos_ttl_ms  TTL of a ride's live position, ms
-- ARGV[10] state_ttl_ms     the driver hash's TTL when it has none, ms
-- ARGV[11] hb_ttl_ms        heartbeat TTL, ms
-- Returns 1 applied, 2 only fixed (taken out of the GEO set or given his on-ride status back), 0
-- nothing to do.
--
-- The fence is the greater of P fence:{id} and the hash's epoch field (a hash written before the
-- fence key existed). A token above it is applied; a token below it is a no-op. A token equal to it
-- is applied only when the hash has lost its epoch (Redis lost the hash after applying this very
-- change: re-applying the change the fence names restores it); otherwise it is a duplicate, which
-- at most fixes the driver's availability as said below.
--
-- The one key not in KEYS is the live position of the ride the driver leaves (old_pos_key: its name
-- is the ride the hash holds, known only inside the script), built from the prefix: it carries the
-- prefix's hash tag, so on a Redis Cluster it is in the slot of the declared keys (CheckPrefix).
--
-- Whatever the epoch, a driver whose hash holds a ride is taken out of the available set (a driver
-- on a ride is never offered another), and at the same epoch and ride an alive driver shown
-- available or paused gets his on-ride status back. On a ride: ride and epoch set, status
-- ride_status (offline with resume set when he was offline already, by a decision or his own, and
-- his heartbeat is gone), member of the on-ride set;
-- the ride's live position is handed to him if the ride version is newer than the position's
-- (starting at his last position, or none when Redis has none, never the previous driver's). Free:
-- ride cleared, available since now (an offline driver whose heartbeat is gone stays offline; a
-- heartbeat gone is never read as offline: only lapse.lua decides that), optionally moved to
-- lat/lng; a hash without a status gets none (his ping answers unknown). Either way GEO set membership then follows the available-set rule (available.lua). The
-- live position of the ride he leaves is tombstoned (driver '') if it was his. A hash without a
-- heartbeat deadline (re-created by a repair after Redis lost it) gets hbdl = now + TTL: he has a
-- full TTL to ping before a lapse can be decided (lapse.lua), and that deadline is indexed in
-- P deadlines for his heartbeat key, so the expiry source asks then (his first ping re-indexes it).
local driver_key = KEYS[1]
local geo_key = KEYS[2]
local onride_key = KEYS[3]
local hb_key = KEYS[4]
local offer_key = KEYS[5]
local fence_key = KEYS[6]
local fence_max_key = KEYS[7]
local deadlines_key = KEYS[8]
local ride_pos_key = KEYS[9]
local driver_id = ARGV[1]
local epoch_arg = ARGV[2]
local epoch = tonumber(epoch_arg)
local ride = ARGV[3]
local ride_status = ARGV[4]
local ride_version = tonumber(ARGV[5])
local lat_arg, lng_arg = ARGV[6], ARGV[7]
local ride_pos_prefix = ARGV[8]
local ride_pos_ttl_ms = ARGV[9]
local state_ttl_ms = ARGV[10]
local hb_ttl_ms = tonumber(ARGV[11])

local hash_epoch = redis.call('HGET', driver_key, 'epoch')
local cur = math.max(tonumber(hash_epoch or '0'), tonumber(redis.call('GET', fence_key) or '0'))
if epoch < cur or (epoch == cur and hash_epoch) then
  local r = redis.call('HGET', driver_key, 'ride')
  local fixed = 0
  if r and r ~= '' then
    if redis.call('ZREM', geo_key, driver_id) == 1 then fixed = 2 end
    local st = redis.call('HGET', driver_key, 'status')
    if epoch == cur and r == ride and (st == 'available' or st == 'paused') and redis.call('EXISTS', hb_key) == 1 then
      redis.call('HSET', driver_key, 'status', ride_status)
      fixed = 2
    end
  end
  return fixed
end
local old = redis.call('HGET', driver_key, 'ride') or ''
local raw_status = redis.call('HGET', driver_key, 'status') -- false when he has none
local st = raw_status or 'offline'
local alive = redis.call('EXISTS', hb_key) == 1
if old ~= '' and old ~= ride then
  local old_pos_key = ride_pos_prefix .. old
  if redis.call('HGET', old_pos_key, 'driver') == driver_id then
    local ov = tonumber(redis.call('HGET', old_pos_key, 'ver') or '0')
    if ride == '' and ride_version > ov then ov = ride_version end
    redis.call('HSET', old_pos_key, 'driver', '', 'ver', ov)
    redis.call('PEXPIRE', old_pos_key, ride_pos_ttl_ms)
  end
end
redis.call('HSET', driver_key, 'epoch', epoch_arg, 'ride', ride)
redis.call('SET', fence_key, epoch_arg)
if epoch > tonumber(redis.call('GET', fence_max_key) or '0') then redis.call('SET', fence_max_key, epoch_arg) end
if redis.call('HEXISTS', driver_key, 'hbdl') == 0 then
  redis.call('HSET', driver_key, 'hbdl', now + hb_ttl_ms)
  if not alive then redis.call('ZADD', deadlines_key, now + hb_ttl_ms, hb_key) end
end
if ride ~= '' then
  -- Offline (with resume) only when he already was offline (a decision took him offline, or he
  -- asked) and his heartbeat is gone: a heartbeat that merely expired (while Redis was away, say)
  -- is no decision, and marking him offline here would keep him offline once the ride frees him.
  if alive or raw_status ~= 'offline' then
    redis.call('HSET', driver_key, 'status', ride_status)
    redis.call('HDEL', driver_key, 'resume')
  else
    redis.call('HSET', driver_key, 'status', 'offline', 'resume', ride_status)
  end
  redis.call('SADD', onride_key, driver_id)
  if ride_version > tonumber(redis.call('HGET', ride_pos_key, 'ver') or '0') then
    redis.call('HSET', ride_pos_key, 'driver', driver_id, 'ver', ride_version)
    local p = redis.call('HMGET', driver_key, 'lat', 'lng', 'ts')
    if p[1] and p[2] and p[3] then redis.call('HSET', ride_pos_key, 'lat', p[1], 'lng', p[2], 'ts', p[3])
    else redis.call('HDEL', ride_pos_key, 'lat', 'lng', 'ts') end
    redis.call('PEXPIRE', ride_pos_key, ride_pos_ttl_ms)
  end
else
  redis.call('SREM', onride_key, driver_id)
  redis.call('HDEL', driver_key, 'resume')
  -- A missing heartbeat is no decision (lapse.lua takes those): only a driver already offline
  -- (a decision took him offline, or he asked) stays offline.
  if (old ~= '' or st == 'navigating' or st == 'busy') and not (st == 'offline' and not alive) then
    redis.call('HSET', driver_key, 'status', 'available', 'since', now)
  end
  if lat_arg ~= '' then redis.call('HSET', driver_key, 'lat', lat_arg, 'lng', lng_arg) end
end
sync_available(geo_key, driver_key, hb_key, offer_key, driver_id)
if redis.call('PTTL', driver_key) == -1 then redis.call('PEXPIRE', driver_key, state_ttl_ms) end
return 1
