package redisstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

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

// hailLastKey is a rider's last press (hash lat, lng, at: WGS84 degrees and unix ms, Redis's clock),
// kept dispatch.HailRiderMemory to judge her next press by the GPS-jump rule.
func (s *Store) hailLastKey(id string) string { return s.prefix + "hail:last:" + id }

// hailTriesKey counts side's id's wrong short codes in the current lockout window.
func (s *Store) hailTriesKey(side dispatch.HailSide, id string) string {
	return s.prefix + "hail:tries:" + string(side) + ":" + id
}

// hailKeys are the hail script's first six keys: own side's GEO, expiries, entries, then the other
// side's.
func (s *Store) hailKeys(side dispatch.HailSide) []string {
	o := side.Other()
	return []string{s.hailGeoKey(side), s.hailExpKey(side), s.hailEntryKey(side), s.hailGeoKey(o), s.hailExpKey(o), s.hailEntryKey(o)}
}

// hailScript is one press, atomic with every other press and with the offer lock (scripts/hail.lua:
// its KEYS, ARGV and rules; the helpers in scripts/hail_prelude.lua).
var hailScript = loadScript(nowLua, availableLua, gpsJumpLua, hailPreludeLua, "hail.lua")

// restoreHailScript puts a taken entry back with its original expiry (scripts/restore_hail.lua).
var restoreHailScript = loadScript(nowLua, hailPreludeLua, "restore_hail.lua")

// releaseHoldScript ends a driver's hail hold and re-applies the available-set rule to him
// (scripts/release_hold.lua).
var releaseHoldScript = loadScript(nowLua, availableLua, "release_hold.lua")

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
	HailRefused     = "refused"
)

// Rules a press can break (HailResult.Refusal, HailRefused).
const (
	// RefusedCodeTries: the presser is locked out for wrong short codes (Figure: ms left).
	RefusedCodeTries = "code_tries"
	// RefusedStale: the driver's last accepted ping is too old or missing (Figure: its age, ms; -1
	// when none).
	RefusedStale = "stale"
	// RefusedFar: the driver's press is farther than radius + slack from his last ping (Figure:
	// metres; Elapsed: the ping's age, ms).
	RefusedFar = "far"
	// RefusedGPSJump: the press is a GPS jump from the presser's last fix (Figure: metres;
	// Elapsed: ms since that fix).
	RefusedGPSJump = "gps_jump"
)

// HailResult is what one press did.
type HailResult struct {
	// Outcome is HailWaiting, HailPaired, HailAmbiguous, HailUnavailable or HailRefused.
	Outcome string
	// Refusal is the rule a refused press broke (Refused*), Figure and Elapsed its numbers (see
	// each rule).
	Refusal string
	Figure  float64
	Elapsed float64
	// ExpiresAt is when the waiting entry expires (Redis's clock), and ExpiresIn how long from the
	// press that is (HailWaiting).
	ExpiresAt time.Time
	ExpiresIn time.Duration
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

// Hail runs one press p under rules (see hailScript), judging moves by the pings' GPS-jump rule
// (MaxSpeedMPS, GPSNoiseM); a paired driver is held for hold. Errors are CodeUnavailable (Redis) or
// CodeInternal (an entry that does not decode).
func (s *Store) Hail(ctx context.Context, p dispatch.HailPress, rules dispatch.HailRules, hold time.Duration) (HailResult, error) {
	entry, err := json.Marshal(HailEntry{Lat: p.Position.Lat, Lng: p.Position.Lng, Code: p.Code, Dropoff: p.Dropoff})
	if err != nil {
		return HailResult{}, dispatch.Internal(err)
	}
	presser := s.hailLastKey(p.ID)
	if p.Side == dispatch.HailDriver {
		presser = s.driverKey(p.ID)
	}
	keys := append(s.hailKeys(p.Side), s.geoKey(), presser, s.hailTriesKey(p.Side, p.ID))
	v, err := hailScript.Run(ctx, s.rdb, keys, string(p.Side), p.ID,
		strconv.FormatFloat(p.Position.Lat, 'f', -1, 64), strconv.FormatFloat(p.Position.Lng, 'f', -1, 64),
		p.Code, entry, max(rules.Window.Milliseconds(), 1), rules.RadiusM, max(hold.Milliseconds(), 1),
		s.prefix+"driver:", s.prefix+"hb:", s.prefix+"offer:",
		max(rules.PingMaxAge.Milliseconds(), 1), rules.GPSSlackM,
		strconv.FormatFloat(s.MaxSpeedMPS, 'f', -1, 64), GPSNoiseM,
		max(rules.CodeMaxWrong, 1), max(rules.CodeLockout.Milliseconds(), 1), dispatch.HailRiderMemory.Milliseconds()).Slice()
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
	case HailRefused:
		res.Refusal = str(v[1])
		res.Figure = num(v[2])
		if len(v) > 3 {
			res.Elapsed = num(v[3])
		}
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

// num is a script's number reply as a float64 (Redis truncates Lua numbers to integers: metres
// and ms here).
func num(v any) float64 {
	n, _ := v.(int64)
	return float64(n)
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

// hailWaitingScript tells whether an id has a live waiting entry (scripts/hail_waiting.lua).
var hailWaitingScript = loadScript(nowLua, "hail_waiting.lua")
