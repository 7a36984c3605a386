-- health.lua: the expiry source's sweeper marks Redis healthy, once per sweep, and judges the
-- offline brake; the liveness decision (lapse.lua) reads the mark. Needs now.lua before it.
--
-- KEYS[1] health_key  P health, hash: gen (random id written when the hash is created: its absence
--                     means Redis restarted empty or was flushed), seen (ms, Redis's clock, of the
--                     last healthy sweep), since (ms, Redis's clock, when the current healthy period
--                     began), gap (ms, the observer's gap threshold, which lapse.lua reads), brake
--                     (ms, when the offline brake engaged; absent while it is released), brake_off
--                     (ms, when it was last released)
-- KEYS[2] hbidx_key   P hbidx, every pinging driver by his heartbeat deadline (ping.lua)
-- ARGV[1] gap_ms      a sweep later than this after the previous one means an outage (of Redis or
--                     of the observer) happened in between, ms
-- ARGV[2] new_gen     the id a new generation gets
-- ARGV[3] hb_ttl_ms   heartbeat TTL, ms
-- ARGV[4] brake_share the share (0..1) of the population that, lapsing together, engages the brake;
--                     0 turns it off
-- ARGV[5] brake_min   the least population for which the brake may engage
-- Returns {now (ms), event ('' steady, 'generation' new generation, 'gap' outage seen), since (ms),
-- gen, brake (1 engaged, 0 released), brake change ('' none, 'engaged', 'released'), population,
-- lapsing}.
--
-- The offline brake (the model is Kubernetes' node lifecycle controller, which stops evictions in a
-- zone whose nodes are mostly NotReady): the population is the drivers whose heartbeat deadline is
-- less than a TTL ago or ahead (they pinged within the last two TTLs); lapsing are those among them
-- whose deadline is less than half a TTL ahead (silent for more than half a TTL) or passed; a
-- deadline before since (it fell inside an outage: unknown, lapse.lua) counts in neither, except
-- while the brake holds (a gap then is no evidence that the mass lapse ended). When
-- lapsing >= brake_share × population and the population is at least brake_min, the drivers did not
-- all leave at once: the platform lost them, and no offline decision is taken while the brake holds.
-- While it holds, the window starts a TTL before the brake engaged, so the drivers it holds stay
-- counted until they ping again; it is released when the share is normal, and a lapse before the
-- release is decided only a TTL after it (lapse.lua), as after an outage. Entries older than the
-- window are pruned.
local health_key = KEYS[1]
local hbidx_key = KEYS[2]
local gap_ms = tonumber(ARGV[1])
local new_gen = ARGV[2]
local hb_ttl_ms = tonumber(ARGV[3])
local brake_share = tonumber(ARGV[4])
local brake_min = tonumber(ARGV[5])

local h = redis.call('HMGET', health_key, 'gen', 'seen', 'since', 'brake')
local event = ''
local gen, since = h[1], tonumber(h[3])
local brake = tonumber(h[4] or '')
if not gen then
  gen, since, event, brake = new_gen, now, 'generation', nil
  redis.call('HSET', health_key, 'gen', gen, 'since', since)
elseif not since or now - tonumber(h[2] or '0') > gap_ms then
  since, event = now, 'gap'
  redis.call('HSET', health_key, 'since', since)
end
redis.call('HSET', health_key, 'seen', now, 'gap', gap_ms)

local start = now - hb_ttl_ms
if brake then start = math.min(start, brake - hb_ttl_ms) end
redis.call('ZREMRANGEBYSCORE', hbidx_key, '-inf', '(' .. start)
-- A deadline before since fell inside an outage (of Redis or of its observer): whether that driver
-- lapsed is unknown (lapse.lua defers him a TTL), so he is counted neither way. Not while the brake
-- holds: the drivers it holds lapsed before the gap and are still silent, and leaving them out
-- would empty the population and release the brake on no evidence (a TTL later every driver it
-- held would be taken offline at once).
local low = '(' .. start
if since > start and not brake then low = since end
local population = redis.call('ZCOUNT', hbidx_key, low, '+inf')
local lapsing = redis.call('ZCOUNT', hbidx_key, low, '(' .. (now + math.floor(hb_ttl_ms / 2)))
local mass = brake_share > 0 and population >= brake_min and lapsing >= brake_share * population
local change = ''
if mass and not brake then
  brake, change = now, 'engaged'
  redis.call('HSET', health_key, 'brake', brake)
elseif brake and not mass then
  brake, change = nil, 'released'
  redis.call('HDEL', health_key, 'brake')
  redis.call('HSET', health_key, 'brake_off', now)
end
local on = 0
if brake then on = 1 end
return {now, event, since, gen, on, change, population, lapsing}
