package redisstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flagdown/flagdown/shared/dispatch"
)

// Street-hail entries (dispatch.HailPress, see the rules in shared/dispatch/hail.go) live in three
// structures per side, written together by one script: a GEO set of the entries' positions, a
// sorted set of their expiry times (unix ms, Redis's clock: the per-member TTL Redis 7.0's hashes
// and sets lack) and a hash of their payloads. Every hail script first trims the expired members of
// both sides (a bounded ZRANGEBYSCORE), and a member found by the search counts only while its
// expiry is in the future, so a member left untrimmed never pairs; each of the three keys also
// carries a TTL as long as its latest-expiring entry, so the whole side disappears by itself once
// nobody hails. Entries are found by GEOSEARCH around the press, never by scanning keys.
func (s *Store) hailGeoKey(side dispatch.HailSide) string {
	return s.prefix + "hail:geo:" + string(side)
}
func (s *Store) hailExpKey(side dispatch.HailSide) string {
	return s.prefix + "hail:exp:" + string(side)
}
func (s *Store) hailEntryKey(side dispatch.HailSide) string {
	return s.prefix + "hail:entry:" + string(side)
}

// hailKeys are the hail script's first six keys: own side's GEO, expiries, entries, then the other
// side's.
func (s *Store) hailKeys(side dispatch.HailSide) []string {
	o := side.Other()
	return []string{s.hailGeoKey(side), s.hailExpKey(side), s.hailEntryKey(side), s.hailGeoKey(o), s.hailExpKey(o), s.hailEntryKey(o)}
}

// hailMaxCandidates bounds the GEOSEARCH of one press (COUNT): far more than a pairing needs (two
// candidates already make it ambiguous), so only the reply is bounded, not the rule.
const hailMaxCandidates = 64

// hailTrimMax bounds how many expired entries of one side a press removes; the rest go with the
// next presses (an expired entry never pairs meanwhile, and the keys expire as a whole anyway).
const hailTrimMax = 256

// hailPrelude declares the helpers of the hail scripts. ARGV[10..12] are the key prefixes of a
// driver's hash, heartbeat and offer lock (P driver:, P hb:, P offer:): the scripts read the state
// of the drivers they find, whose ids only the search gives (like the ride-position keys of
// assignScript, these keys are built in the script).
var hailPrelude = redisNowMs + `
local function trim(geo, exp, ent)
  local gone = redis.call('ZRANGEBYSCORE', exp, '-inf', now, 'LIMIT', 0, ` + strconv.Itoa(hailTrimMax) + `)
  if #gone > 0 then
    redis.call('ZREM', geo, unpack(gone))
    redis.call('ZREM', exp, unpack(gone))
    redis.call('HDEL', ent, unpack(gone))
  end
end
local function drop(geo, exp, ent, id)
  redis.call('ZREM', geo, id)
  redis.call('ZREM', exp, id)
  redis.call('HDEL', ent, id)
end
local function extend(k, ms)
  local t = redis.call('PTTL', k)
  if t < ms then redis.call('PEXPIRE', k, ms) end
end
local function driverState(id)
  if redis.call('EXISTS', ARGV[11] .. id) == 0 then return 'offline' end
  local st = redis.call('HMGET', ARGV[10] .. id, 'status', 'ride', 'hailhold')
  if st[2] and st[2] ~= '' then return 'on_ride' end
  if st[1] ~= 'available' then return 'not_available' end
  if redis.call('EXISTS', ARGV[12] .. id) == 1 then return 'offer' end
  if st[3] and tonumber(st[3]) > now then return 'pairing' end
  return ''
end
`

// hailScript is one press, atomic with every other press and with the offer lock (lockScript):
// trim both sides; a driver who cannot hail (driverState) is refused; the press replaces the
// presser's own waiting entry; GEOSEARCH the other side within the radius and keep the live entries
// with the same code (waiting drivers who can no longer be paired are dropped); none: the press
// waits (entry added, keys' TTL extended); two or more: refused as ambiguous, nothing else changes;
// one: its entry is taken and the pair's driver is held (field hailhold = now + hold, and out of the
// available set) so match cannot offer him a ride while the pairing is written to PostgreSQL.
//
// KEYS: hailKeys, then the available GEO set. ARGV: side, presser id, lat, lng, code, entry JSON,
// window ms, radius m, hold ms, driver-hash prefix, heartbeat prefix, offer-lock prefix.
// Returns {'waiting', expiry ms, now ms}, {'ambiguous', candidates}, {'unavailable', driver state}
// or {'paired', counterpart id, counterpart entry JSON, counterpart expiry ms, distance m}.
var hailScript = redis.NewScript(hailPrelude + `
trim(KEYS[1], KEYS[2], KEYS[3])
trim(KEYS[4], KEYS[5], KEYS[6])
drop(KEYS[1], KEYS[2], KEYS[3], ARGV[2])
if ARGV[1] == 'driver' then
  local s = driverState(ARGV[2])
  if s ~= '' then return {'unavailable', s} end
end
local hits = redis.call('GEOSEARCH', KEYS[4], 'FROMLONLAT', ARGV[4], ARGV[3], 'BYRADIUS', ARGV[8], 'm', 'ASC', 'COUNT', ` + strconv.Itoa(hailMaxCandidates) + `, 'WITHDIST')
local found = {}
for _, h in ipairs(hits) do
  local id, dist = h[1], h[2]
  local exp = tonumber(redis.call('ZSCORE', KEYS[5], id) or '0')
  local raw = redis.call('HGET', KEYS[6], id)
  if exp > now and raw then
    local ok, e = pcall(cjson.decode, raw)
    if ok and type(e) == 'table' and (e['code'] or '') == ARGV[5] then
      if ARGV[1] == 'rider' and driverState(id) ~= '' then
        drop(KEYS[4], KEYS[5], KEYS[6], id)
      else
        found[#found + 1] = {id, dist, raw, exp}
      end
    end
  end
end
if #found == 0 then
  local w = tonumber(ARGV[7])
  redis.call('GEOADD', KEYS[1], ARGV[4], ARGV[3], ARGV[2])
  redis.call('ZADD', KEYS[2], now + w, ARGV[2])
  redis.call('HSET', KEYS[3], ARGV[2], ARGV[6])
  for k = 1, 3 do extend(KEYS[k], w) end
  return {'waiting', now + w, now}
end
if #found > 1 then return {'ambiguous', #found} end
local c = found[1]
drop(KEYS[4], KEYS[5], KEYS[6], c[1])
local driver = c[1]
if ARGV[1] == 'driver' then driver = ARGV[2] end
redis.call('HSET', ARGV[10] .. driver, 'hailhold', now + tonumber(ARGV[9]))
redis.call('ZREM', KEYS[7], driver)
return {'paired', c[1], c[3], c[4], c[2]}
`)

// restoreHailScript puts a taken entry back (a pairing that failed in PostgreSQL for a reason that
// is not the entry's) with its original expiry, unless that expiry has passed or the same person
// pressed again meanwhile. KEYS: own side's GEO, expiries, entries. ARGV: id, lat, lng, entry JSON,
// expiry ms. Returns 1 when restored.
var restoreHailScript = redis.NewScript(redisNowMs + `
local exp = tonumber(ARGV[5])
if exp <= now or redis.call('HEXISTS', KEYS[3], ARGV[1]) == 1 then return 0 end
redis.call('GEOADD', KEYS[1], ARGV[3], ARGV[2], ARGV[1])
redis.call('ZADD', KEYS[2], exp, ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[4])
for k = 1, 3 do
  local t = redis.call('PTTL', KEYS[k])
  if t < exp - now then redis.call('PEXPIRE', KEYS[k], exp - now) end
end
return 1
`)

// releaseHoldScript ends a driver's hail hold and, when he is still alive, available, without a
// ride and without an offer lock, puts him back in the available set (a pairing that failed); a
// driver the pairing gave a ride stays out of it. KEYS: driver hash, heartbeat, GEO, offer lock.
// ARGV: driver id.
var releaseHoldScript = redis.NewScript(`
if redis.call('HDEL', KEYS[1], 'hailhold') == 0 then return 0 end
if redis.call('EXISTS', KEYS[2]) == 1 and redis.call('EXISTS', KEYS[4]) == 0 then
  local st = redis.call('HMGET', KEYS[1], 'status', 'ride', 'lat', 'lng')
  if st[1] == 'available' and (st[2] == false or st[2] == '') and st[3] and st[4] then
    redis.call('GEOADD', KEYS[3], st[4], st[3], ARGV[1])
  end
end
return 1
`)

// HailEntry is a waiting hail entry as stored (the payload of its member).
type HailEntry struct {
	// Lat and Lng are where the press was made, WGS84 degrees.
	Lat float64 `json:"lat"`
	Lng float64 `json:"lng"`
	// Code is the normalized short code, empty when none.
	Code string `json:"code,omitempty"`
	// Dropoff is the rider's destination (riders only).
	Dropoff *dispatch.Point `json:"dropoff,omitempty"`
}

// Hail outcomes (HailResult.Outcome).
const (
	HailWaiting     = "waiting"
	HailPaired      = "paired"
	HailAmbiguous   = "ambiguous"
	HailUnavailable = "unavailable"
)

// HailResult is what one press did.
type HailResult struct {
	// Outcome is HailWaiting, HailPaired, HailAmbiguous or HailUnavailable.
	Outcome string
	// ExpiresAt is when the waiting entry expires (Redis's clock), and ExpiresIn how long from the
	// press that is (HailWaiting).
	ExpiresAt time.Time
	ExpiresIn time.Duration
	// Candidates is how many counterparts the press found (HailAmbiguous).
	Candidates int
	// DriverState says why a driver may not hail (HailUnavailable): offline, not_available, on_ride,
	// offer or pairing.
	DriverState string
	// CounterpartID, Counterpart and CounterpartExpiry are the entry taken (HailPaired), and
	// DistanceM how far it was from the press, metres.
	CounterpartID     string
	Counterpart       HailEntry
	CounterpartExpiry time.Time
	DistanceM         float64
}

// Hail runs one press p under rules (see hailScript); a paired driver is held for hold. Errors are
// CodeUnavailable (Redis) or CodeInternal (an entry that does not decode).
func (s *Store) Hail(ctx context.Context, p dispatch.HailPress, rules dispatch.HailRules, hold time.Duration) (HailResult, error) {
	entry, err := json.Marshal(HailEntry{Lat: p.Position.Lat, Lng: p.Position.Lng, Code: p.Code, Dropoff: p.Dropoff})
	if err != nil {
		return HailResult{}, dispatch.Internal(err)
	}
	keys := append(s.hailKeys(p.Side), s.geoKey())
	v, err := hailScript.Run(ctx, s.rdb, keys, string(p.Side), p.ID,
		strconv.FormatFloat(p.Position.Lat, 'f', -1, 64), strconv.FormatFloat(p.Position.Lng, 'f', -1, 64),
		p.Code, entry, max(rules.Window.Milliseconds(), 1), rules.RadiusM, max(hold.Milliseconds(), 1),
		s.prefix+"driver:", s.prefix+"hb:", s.prefix+"offer:").Slice()
	if err != nil {
		return HailResult{}, unavailable(err)
	}
	res := HailResult{Outcome: str(v[0])}
	switch res.Outcome {
	case HailWaiting:
		exp, _ := v[1].(int64)
		now, _ := v[2].(int64)
		res.ExpiresAt, res.ExpiresIn = time.UnixMilli(exp).UTC(), time.Duration(exp-now)*time.Millisecond
	case HailAmbiguous:
		n, _ := v[1].(int64)
		res.Candidates = int(n)
	case HailUnavailable:
		res.DriverState = str(v[1])
	case HailPaired:
		res.CounterpartID = str(v[1])
		if err := json.Unmarshal([]byte(str(v[2])), &res.Counterpart); err != nil {
			return HailResult{}, dispatch.Internal(fmt.Errorf("redisstore: hail entry of %s: %w", res.CounterpartID, err))
		}
		exp, _ := v[3].(int64)
		res.CounterpartExpiry = time.UnixMilli(exp).UTC()
		res.DistanceM = f64(str(v[4]))
	default:
		return HailResult{}, dispatch.Internal(fmt.Errorf("redisstore: hail script answered %v", v))
	}
	return res, nil
}

// RestoreHail puts back the entry e of side's id that a failed pairing took, with its original
// expiry, unless that has passed or id pressed again meanwhile. It reports whether it did.
func (s *Store) RestoreHail(ctx context.Context, side dispatch.HailSide, id string, e HailEntry, expiry time.Time) (bool, error) {
	raw, err := json.Marshal(e)
	if err != nil {
		return false, dispatch.Internal(err)
	}
	n, err := restoreHailScript.Run(ctx, s.rdb, s.hailKeys(side)[:3], id,
		strconv.FormatFloat(e.Lat, 'f', -1, 64), strconv.FormatFloat(e.Lng, 'f', -1, 64), raw, expiry.UnixMilli()).Int()
	if err != nil {
		return false, unavailable(err)
	}
	return n == 1, nil
}

// ReleaseHailHold ends driverID's hail hold; a driver still free (no ride, no offer lock, alive,
// available) goes back to the available set. It reports whether he was held.
func (s *Store) ReleaseHailHold(ctx context.Context, driverID string) (bool, error) {
	n, err := releaseHoldScript.Run(ctx, s.rdb,
		[]string{s.driverKey(driverID), s.hbKey(driverID), s.geoKey(), s.offerKey(driverID)}, driverID).Int()
	if err != nil {
		return false, unavailable(err)
	}
	return n == 1, nil
}

// HailWaiting reports whether side's id has a live waiting entry (by Redis's clock).
func (s *Store) HailWaiting(ctx context.Context, side dispatch.HailSide, id string) (bool, error) {
	n, err := hailWaitingScript.Run(ctx, s.rdb, []string{s.hailExpKey(side)}, id).Int()
	if err != nil {
		return false, unavailable(err)
	}
	return n == 1, nil
}

// hailWaitingScript: 1 when ARGV[1]'s expiry in KEYS[1] is in the future.
var hailWaitingScript = redis.NewScript(redisNowMs + `
local exp = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]) or '0')
if exp > now then return 1 end
return 0
`)
