package redisstore

import (
	"log/slog"
	"sync/atomic"

	"github.com/flagdown/flagdown/shared/metrics"
)

// Degradation follows one Redis-backed check of a process that goes on without Redis while it
// does not answer (a rate limit enforced locally, a ride priced at the base fare, a view without
// live data, effects left to reconcile): each decision taken without Redis is counted in
// flagdown_redis_degraded_total{check}, and an episode (from the first such decision to the next
// success) is logged once when it begins and once when it ends. Safe for concurrent use.
type Degradation struct {
	check string
	log   *slog.Logger
	on    atomic.Bool
}

// NewDegradation returns the follower of check (a bounded label: rate_limit, pricing, ride_view,
// effects) logging to log (nil: nothing logged).
func NewDegradation(check string, log *slog.Logger) *Degradation {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Degradation{check: check, log: log}
}

// Degraded records one decision taken without Redis because of err; the first of an episode is
// logged at warning level with what the check does instead (how).
func (d *Degradation) Degraded(err error, how string) {
	metrics.RedisDegraded.WithLabelValues(d.check).Inc()
	if d.on.CompareAndSwap(false, true) {
		d.log.Warn("redis unavailable: degraded until it answers again", "check", d.check, "instead", how, "err", err)
	}
}

// Recovered records that Redis answered the check again; it logs the end of an episode, if one
// was open.
func (d *Degradation) Recovered() {
	if d.on.Load() && d.on.CompareAndSwap(true, false) {
		d.log.Info("redis answers again: check no longer degraded", "check", d.check)
	}
}
