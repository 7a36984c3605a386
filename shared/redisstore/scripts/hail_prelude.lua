-- hail_prelude.lua (snippet): the helpers of the street-hail scripts, over one side's three keys
-- (geo_key P hail:geo:{side}, exp_key P hail:exp:{side}, entry_key P hail:entry:{side}; see
-- hail.go). Needs now.lua before it; touches only the keys its callers pass.

-- hail_trim_max bounds how many expired entries of one side a press removes; the rest go with the
-- next presses (an expired entry never pairs meanwhile, and the keys expire as a whole anyway).
local hail_trim_max = 256

-- trim removes up to hail_trim_max entries whose expiry (score of exp_key, unix ms) has passed.
local function trim(geo_key, exp_key, entry_key)
  local gone = redis.call('ZRANGEBYSCORE', exp_key, '-inf', now, 'LIMIT', 0, hail_trim_max)
  if #gone > 0 then
    redis.call('ZREM', geo_key, unpack(gone))
    redis.call('ZREM', exp_key, unpack(gone))
    redis.call('HDEL', entry_key, unpack(gone))
  end
end

-- drop removes the entry of id.
local function drop(geo_key, exp_key, entry_key, id)
  redis.call('ZREM', geo_key, id)
  redis.call('ZREM', exp_key, id)
  redis.call('HDEL', entry_key, id)
end

-- extend makes key live at least ttl_ms more (ms).
local function extend(key, ttl_ms)
  local t = redis.call('PTTL', key)
  if t < ttl_ms then redis.call('PEXPIRE', key, ttl_ms) end
end
