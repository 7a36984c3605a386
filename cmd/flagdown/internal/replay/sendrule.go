package replay

import (
	"sync/atomic"
	"time"
)

// The seed's send rule (Options.SendRule): a driver's app sends a position only after
// SendRuleMinMoveM of movement or SendRuleMaxQuiet since its last sent one when the driver is
// stationary (not driving a leg) or carrying a passenger, and at every ping interval otherwise
// (driving to a pickup, when his position matters most to dispatch and to the waiting rider).
const (
	// SendRuleMinMoveM is the movement, metres, after which a stationary or carrying driver sends.
	SendRuleMinMoveM = 50
	// SendRuleMaxQuiet is the longest a stationary or carrying driver goes without sending
	// (simulated time); the platform's heartbeat TTL and hail freshness must allow it plus slack.
	SendRuleMaxQuiet = 15 * time.Second
)

// sendRuleState is what the send rule remembers of each driver: his last sent position and when
// (simulated time), and how many pings it saved. Owned by the scheduler goroutine, but for saved.
type sendRuleState struct {
	last  map[*driver]sentPing
	saved atomic.Int64
}

type sentPing struct {
	pos LatLng
	at  time.Duration
}

// holdBack reports whether d's ping due at simulated time t at position p is one the send rule
// does not send (and counts it as saved); otherwise it records p as his last sent position. A ping
// that must carry a status change (he is not known online yet) is always sent.
func (s *sim) holdBack(d *driver, t time.Duration, p LatLng, mustSend bool) bool {
	if !s.opts.SendRule {
		return false
	}
	if s.rule.last == nil {
		s.rule.last = map[*driver]sentPing{}
	}
	moving := d.leg != nil && d.leg.End() > t
	carrying := d.state == stToDropoff
	last, ok := s.rule.last[d]
	if ok && !mustSend && (!moving || carrying) && t-last.at < SendRuleMaxQuiet && Haversine(last.pos, p) < SendRuleMinMoveM {
		s.rule.saved.Add(1)
		return true
	}
	s.rule.last[d] = sentPing{pos: p, at: t}
	return false
}
