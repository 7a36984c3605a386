package replay

import "time"

// SilentShare is the share of its pinging drivers without an answered ping for half a heartbeat
// TTL at which the replay counts itself silent (watchSilence). The platform's offline brake
// engages at 0.55 of a city's drivers lapsing within half a TTL (redisstore OfflineBrakeShare);
// a little lower here, so a span the brake may take for a mass lapse is never left out.
const SilentShare = 0.5

// silentEvery is how often watchSilence looks (wall time).
const silentEvery = 250 * time.Millisecond

// watchSilence records the spans in which the replay itself, not a fault, left most of its drivers
// silent: a client or platform too loaded to carry the pings (skipped because the previous was in
// flight, or answered late) looks to the platform like a fleet that lapsed together, which the
// offline brake holds. Such a span is an outage for the ground truth ("replay_silent"): a driver
// who really stopped inside it is judged against its end + 2 × TTL, as after any outage. It looks
// every silentEvery, only when the heartbeat TTL is known.
func (s *sim) watchSilence(now time.Time) {
	if s.opts.HeartbeatTTL <= 0 || now.Sub(s.silentChecked) < silentEvery {
		return
	}
	s.silentChecked = now
	half := s.opts.HeartbeatTTL / 2
	pinging, silent := 0, 0
	for _, d := range s.drivers {
		if d.offline || d.lastPingOK.IsZero() {
			continue
		}
		pinging++
		if now.Sub(d.lastPingOK) > half {
			silent++
		}
	}
	open := len(s.silentSpans) > 0 && s.silentSpans[len(s.silentSpans)-1].To.IsZero()
	isSilent := pinging > 0 && float64(silent) >= SilentShare*float64(pinging)
	switch {
	case isSilent && !open:
		s.silentSpans = append(s.silentSpans, Outage{What: "replay_silent", From: now})
	case !isSilent && open:
		s.silentSpans[len(s.silentSpans)-1].To = now
	}
}
