package replay

import (
	"sync/atomic"
	"time"
)

// The seed's send rule (Options.SendRule), as a driver's app applies it: while the driver is
// stationary (idle and not moving, waiting at the pickup, or any other moment he is not driving a
// leg) or carrying a passenger (driving to the dropoff), his app sends a position only once he
// moved SendRuleMinMoveM from the last position it sent or SendRuleMaxQuiet passed since it sent
// it; otherwise (driving to a pickup, when his position matters most to dispatch and to the
// waiting rider) it sends at every ping interval. A change of his ride phase (accepted, started,
// ended) is sent at once, and a ping that carries a status (going available) is never held back.
const (
	// SendRuleMinMoveM is the movement, metres (haversine, from the last sent position), after
	// which a stationary or carrying driver sends.
	SendRuleMinMoveM = 50
	// SendRuleMaxQuiet is the longest a stationary or carrying driver goes without sending
	// (simulated time); the platform's heartbeat TTL and hail freshness must allow it plus slack
	// (FLAGDOWN_HEARTBEAT_TTL, FLAGDOWN_HAIL_PING_MAX_AGE: at least 20 s in a real city).
	SendRuleMaxQuiet = 15 * time.Second
)

// phase is what the platform knows of a driver's ride cycle: free, on his way to a pickup, or
// carrying a passenger. The send rule sends a change of it at once.
type phase int

const (
	phaseFree phase = iota
	phaseToPickup
	phaseCarrying
)

// phase is d's ride phase: an accept in flight is still free, a start in flight still on his
// way, a complete in flight still carrying.
func (d *driver) phase() phase {
	switch d.state {
	case stToPickup:
		return phaseToPickup
	case stToDropoff:
		return phaseCarrying
	}
	return phaseFree
}

// sendRuleState is what the send rule remembers of each driver: his last sent ping (simulated
// time, position, phase) and how many pings it saved. Owned by the scheduler goroutine, but for
// saved.
type sendRuleState struct {
	last  map[*driver]sentPing
	saved atomic.Int64
}

// sentPing is a driver's last sent ping as the send rule sees it. undelivered is set when its
// answer failed (or was rate_limited): the platform may not have it, so the next due ping goes.
type sentPing struct {
	pos         LatLng
	at          time.Duration
	phase       phase
	undelivered bool
}

// ruleHolds reports whether the send rule holds back d's ping due at simulated time t at position
// p: he is stationary or carrying, his last sent ping was delivered, and he moved less than
// SendRuleMinMoveM from it less than SendRuleMaxQuiet ago. Always false with the rule off, before
// his first ping, and after a phase change.
func (s *sim) ruleHolds(d *driver, t time.Duration, p LatLng) bool {
	if !s.opts.SendRule {
		return false
	}
	last, ok := s.rule.last[d]
	if !ok || last.undelivered || last.phase != d.phase() {
		return false
	}
	moving := d.leg != nil && d.leg.End() > t
	if moving && d.state != stToDropoff { // driving to a pickup: every ping interval
		return false
	}
	return t-last.at < SendRuleMaxQuiet && Haversine(last.pos, p) < SendRuleMinMoveM
}

// phaseChanged reports whether d's ride phase changed since his last sent ping (with the rule on,
// and only once he sent one): that ping is sent at once, off the ping interval.
func (s *sim) phaseChanged(d *driver) bool {
	if !s.opts.SendRule {
		return false
	}
	last, ok := s.rule.last[d]
	return ok && last.phase != d.phase()
}

// sent records d's ping at simulated time t at position p as his last sent one.
func (s *sim) sent(d *driver, t time.Duration, p LatLng) {
	if !s.opts.SendRule {
		return
	}
	if s.rule.last == nil {
		s.rule.last = map[*driver]sentPing{}
	}
	s.rule.last[d] = sentPing{pos: p, at: t, phase: d.phase()}
}

// undelivered records that d's last sent ping got no usable answer: the rule sends his next due
// ping whatever he moved.
func (s *sim) undelivered(d *driver) {
	if last, ok := s.rule.last[d]; ok {
		last.undelivered = true
		s.rule.last[d] = last
	}
}
