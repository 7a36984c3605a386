package redisstore

import (
	"context"
	"strconv"
	"time"

	"github.com/google/uuid"
)

// healthScript marks Redis healthy and reports generations and gaps (scripts/health.lua).
var healthScript = loadScript(nowLua, "health.lua")

// HealthEvent is what one health mark saw (MarkHealthy).
type HealthEvent string

// Events of MarkHealthy.
const (
	// HealthSteady: Redis was healthy at the previous mark too.
	HealthSteady HealthEvent = ""
	// HealthNewGeneration: P health was missing: Redis restarted without its data or was flushed.
	HealthNewGeneration HealthEvent = "generation"
	// HealthGap: the previous mark is older than the gap threshold: Redis, or its observer, was
	// away in between.
	HealthGap HealthEvent = "gap"
)

// Health is the result of one health mark.
type Health struct {
	// Now is Redis's clock at the mark.
	Now time.Time
	// Event is what the mark saw.
	Event HealthEvent
	// Since is when the current healthy period began (Redis's clock): a heartbeat deadline before
	// it fell inside an outage.
	Since time.Time
	// Generation is the id of Redis's current generation (a new one after every empty restart or
	// flush).
	Generation string
	// Brake reports whether the offline brake holds after this mark: an abnormal share of the
	// drivers lapsed together, and no offline decision is taken (see health.lua).
	Brake bool
	// BrakeChange is BrakeEngaged or BrakeReleased when this mark changed the brake, else "".
	BrakeChange string
	// Population is the number of drivers the brake judged: those whose heartbeat deadline is less
	// than a heartbeat TTL ago or ahead (while the brake holds, a TTL before it engaged), and not
	// before Since (a deadline inside an outage is unknown).
	Population int64
	// Lapsing is how many of them lapsed or have been silent for more than half a TTL.
	Lapsing int64
}

// Changes of the offline brake (Health.BrakeChange).
const (
	BrakeEngaged  = "engaged"
	BrakeReleased = "released"
)

// MarkHealthy writes the health mark P health (see health.lua) that liveness decisions require,
// and judges the offline brake (OfflineBrakeShare, OfflineBrakeMinDrivers) on the heartbeat index:
// the expiry source's sweeper calls it once per sweep, with gap (its threshold: a mark later than
// gap after the previous one opens a new healthy period). Errors are CodeUnavailable.
func (s *Store) MarkHealthy(ctx context.Context, gap time.Duration) (Health, error) {
	v, err := healthScript.Run(ctx, s.rdb, []string{s.healthKey(), s.hbIdxKey()}, gap.Milliseconds(), uuid.NewString(),
		s.HeartbeatTTL.Milliseconds(), strconv.FormatFloat(s.OfflineBrakeShare, 'f', -1, 64), max(s.OfflineBrakeMinDrivers, 1)).Slice()
	if err != nil {
		return Health{}, unavailable(err)
	}
	now, _ := v[0].(int64)
	since, _ := v[2].(int64)
	on, _ := v[4].(int64)
	pop, _ := v[6].(int64)
	lapsing, _ := v[7].(int64)
	return Health{Now: time.UnixMilli(now), Event: HealthEvent(str(v[1])), Since: time.UnixMilli(since), Generation: str(v[3]),
		Brake: on == 1, BrakeChange: str(v[5]), Population: pop, Lapsing: lapsing}, nil
}

// healthKey is P health.
func (s *Store) healthKey() string { return s.prefix + "health" }

// hbIdxKey is P hbidx, the heartbeat index the offline brake counts.
func (s *Store) hbIdxKey() string { return s.prefix + "hbidx" }
