package redisstore

import (
	"context"
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
}

// MarkHealthy writes the health mark P health (see health.lua) that liveness decisions require:
// the expiry source's sweeper calls it once per sweep, with gap (its threshold: a mark later than
// gap after the previous one opens a new healthy period). Errors are CodeUnavailable.
func (s *Store) MarkHealthy(ctx context.Context, gap time.Duration) (Health, error) {
	v, err := healthScript.Run(ctx, s.rdb, []string{s.healthKey()}, gap.Milliseconds(), uuid.NewString()).Slice()
	if err != nil {
		return Health{}, unavailable(err)
	}
	now, _ := v[0].(int64)
	since, _ := v[2].(int64)
	return Health{Now: time.UnixMilli(now), Event: HealthEvent(str(v[1])), Since: time.UnixMilli(since), Generation: str(v[3])}, nil
}

// healthKey is P health.
func (s *Store) healthKey() string { return s.prefix + "health" }
