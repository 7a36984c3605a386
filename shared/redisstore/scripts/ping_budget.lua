-- ping_budget.lua (snippet): a driver's ping budget, written once for ping.lua and spend_ping.lua:
-- a GCRA (the algorithm of redis_rate, which the other budgets use) of pings_per_min pings per
-- minute with a burst of as many, whose theoretical arrival time (TAT, ms on Redis's clock) is
-- field rl of the driver hash, so it needs no key of its own. Needs now.lua before it.

-- spend_ping_budget(rl, pings_per_min) spends one ping of the budget whose TAT is rl (the field's
-- value; nil or false when none yet). Returns the new TAT to write to field rl and 0 when the ping
-- is within the budget, or nil and the ms to wait until it is (nothing to write: nothing spent).
local function spend_ping_budget(rl, pings_per_min)
  local emission_ms = 60000 / pings_per_min
  local tat = math.max(tonumber(rl or '') or now, now)
  local allow_at = tat + emission_ms - 60000
  if now < allow_at then return nil, math.ceil(allow_at - now) end
  return tat + emission_ms, 0
end
