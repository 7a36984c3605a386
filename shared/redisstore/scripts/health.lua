-- health.lua: the expiry source's sweeper marks Redis healthy, once per sweep; the liveness decision
-- (lapse.lua) reads the mark. Needs now.lua before it.
--
-- KEYS[1] health_key  P health, hash: gen (random id written when the hash is created: its absence
--                     means Redis restarted empty or was flushed), seen (ms, Redis's clock, of the
--                     last healthy sweep), since (ms, Redis's clock, when the current healthy period
--                     began), gap (ms, the observer's gap threshold, which lapse.lua reads)
-- ARGV[1] gap_ms   a sweep later than this after the previous one means an outage (of Redis or of
--                  the observer) happened in between, ms
-- ARGV[2] new_gen  the id a new generation gets
-- Returns {now (ms), event ('' steady, 'generation' new generation, 'gap' outage seen), since (ms),
-- gen}.
local health_key = KEYS[1]
local gap_ms = tonumber(ARGV[1])
local new_gen = ARGV[2]

local h = redis.call('HMGET', health_key, 'gen', 'seen', 'since')
local event = ''
local gen, since = h[1], tonumber(h[3])
if not gen then
  gen, since, event = new_gen, now, 'generation'
  redis.call('HSET', health_key, 'gen', gen, 'since', since)
elseif not since or now - tonumber(h[2] or '0') > gap_ms then
  since, event = now, 'gap'
  redis.call('HSET', health_key, 'since', since)
end
redis.call('HSET', health_key, 'seen', now, 'gap', gap_ms)
return {now, event, since, gen}
