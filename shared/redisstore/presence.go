package redisstore

import (
	"context"
	"strconv"
	"time"

	"github.com/flagdown/flagdown/shared/dispatch"
)

// offlineScript marks a driver offline unless his heartbeat lives again (scripts/offline.lua).
var offlineScript = loadScript("offline.lua")

// MarkOffline takes driverID out of the available set and sets his status offline, unless his
// heartbeat key exists (then alive is true and nothing changes). prev is the status before.
func (s *Store) MarkOffline(ctx context.Context, driverID string) (prev dispatch.DriverStatus, alive bool, err error) {
	v, err := offlineScript.Run(ctx, s.rdb, []string{s.hbKey(driverID), s.driverKey(driverID), s.geoKey()}, driverID).Slice()
	if err != nil {
		return "", false, unavailable(err)
	}
	n, _ := v[0].(int64)
	return dispatch.DriverStatus(str(v[1])), n == 0, nil
}

// missScript counts a missed offer (scripts/miss.lua).
var missScript = loadScript(nowLua, "miss.lua")

// RecordMiss counts an offer driverID let expire; misses older than s.MissMemory are forgotten.
func (s *Store) RecordMiss(ctx context.Context, driverID string) error {
	return unavailable(missScript.Run(ctx, s.rdb, []string{s.driverKey(driverID)}, s.MissMemory.Milliseconds()).Err())
}

// PresenceState is the liveness decision on a driver (DriverPresence).
type PresenceState string

// States of Presence.
const (
	// PresenceAlive: his heartbeat key exists.
	PresenceAlive PresenceState = "alive"
	// PresenceLapsed: Redis, healthy and holding his state, saw his heartbeat lapse: he is offline.
	PresenceLapsed PresenceState = "lapsed"
	// PresenceUnknown: no positive evidence either way (his state or his heartbeat deadline is
	// missing, Redis's health mark is missing or stale, or the lapse fell inside an outage):
	// nothing may change.
	PresenceUnknown PresenceState = "unknown"
)

// Presence is what Redis knows of a driver's presence.
type Presence struct {
	// Status is his status ("" when Redis knows nothing of him).
	Status dispatch.DriverStatus
	// State is the liveness decision.
	State PresenceState
	// Reason says why State is unknown ('' otherwise): no_state, early, no_health, unhealthy,
	// outage or mass_lapse.
	Reason string
	// LastPingMs is the device time of his last ping (field seen), unix ms, 0 when unknown: it names
	// the heartbeat that expired, so every handler of one expiry agrees on which one it was.
	LastPingMs int64
}

// presenceScript decides a driver's presence (scripts/presence.lua, the rule in lapse.lua).
var presenceScript = loadScript(nowLua, lapseLua, "presence.lua")

// DriverPresence decides driverID's presence in one round trip (presence.lua): alive while his
// heartbeat key exists, lapsed only on positive evidence (lapse.lua), unknown otherwise; a deferred
// decision re-indexes his heartbeat in P deadlines so the expiry source fires again when it is
// worth taking. Errors are CodeUnavailable.
func (s *Store) DriverPresence(ctx context.Context, driverID string) (Presence, error) {
	v, err := presenceScript.Run(ctx, s.rdb,
		[]string{s.hbKey(driverID), s.driverKey(driverID), s.healthKey(), s.DeadlinesKey()},
		s.HeartbeatTTL.Milliseconds()).Slice()
	if err != nil {
		return Presence{}, unavailable(err)
	}
	return Presence{State: PresenceState(str(v[0])), Reason: str(v[1]), Status: dispatch.DriverStatus(str(v[2])),
		LastPingMs: atoi64(str(v[3]))}, nil
}

// ScanAvailable returns up to about count members of the available set from cursor, and the next
// cursor (0 when the scan is complete).
func (s *Store) ScanAvailable(ctx context.Context, cursor uint64, count int64) ([]string, uint64, error) {
	kv, next, err := s.rdb.ZScan(ctx, s.geoKey(), cursor, "", count).Result()
	if err != nil {
		return nil, 0, unavailable(err)
	}
	ids := make([]string, 0, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		ids = append(ids, kv[i])
	}
	return ids, next, nil
}

// heartbeatGoneScript tells, for each driver, whether his heartbeat lapsed more than a grace ago
// (scripts/heartbeat_gone.lua, the rule in lapse.lua).
var heartbeatGoneScript = loadScript(nowLua, lapseLua, "heartbeat_gone.lua")

// HeartbeatsGone reports, for each driver, whether his heartbeat lapsed (lapse.lua: a driver
// without state, or whose lapse Redis did not see while healthy, never has) more than grace ago
// (by Redis's clock): a repair that waits that long does not race the expiry source, which acts
// within a sweep interval of the deadline. Errors are CodeUnavailable.
func (s *Store) HeartbeatsGone(ctx context.Context, ids []string, grace time.Duration) ([]bool, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	keys := make([]string, 0, 1+2*len(ids))
	keys = append(keys, s.healthKey())
	for _, id := range ids {
		keys = append(keys, s.hbKey(id), s.driverKey(id))
	}
	vals, err := heartbeatGoneScript.Run(ctx, s.rdb, keys, grace.Milliseconds(), s.HeartbeatTTL.Milliseconds()).Int64Slice()
	if err != nil {
		return nil, unavailable(err)
	}
	out := make([]bool, len(ids))
	for i, v := range vals {
		out[i] = v == 1
	}
	return out, nil
}

func atoi64(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}
