package replay

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// The send rule over one driver's ride cycle, in simulated time (pingDue is given t; no platform:
// the jobs are dropped and each ping counts as answered before the next tick): a stationary or
// carrying driver's due ping is held until he moved 50 m or 15 s passed since his last sent one, a
// driver on his way to a pickup sends every interval, a change of his ride phase goes at once (off
// the 4 s interval), a ping whose answer failed makes the next one go, and a ping asking for a
// status is never held. The summary counts what was sent and saved; with the rule off every due
// ping goes and nothing is sent off the interval.
func TestSendRuleOverARideCycle(t *testing.T) {
	const sec = time.Second
	here := LatLng{Lat: 40.75, Lng: -73.98}
	north := func(from LatLng, m float64) LatLng { return LatLng{Lat: from.Lat + m/111_195, Lng: from.Lng} }
	pickup := north(here, 64)       // 8 s at 8 m/s
	dropoff := north(pickup, 2_000) // far: he is still driving at the end
	type step struct {
		at    time.Duration
		do    func(s *sim, d *driver)
		ruled bool // sent with the rule on
		name  string
	}
	steps := []step{
		{0, nil, true, "first ping"},
		{4 * sec, nil, false, "idle, stationary, 4 s"},
		{8 * sec, nil, false, "idle, stationary, 8 s"},
		{12 * sec, nil, false, "idle, stationary, 12 s"},
		{16 * sec, nil, true, "idle, stationary, 16 s ≥ 15 s since the last sent"},
		{18 * sec, func(s *sim, d *driver) {
			d.state, d.rideID = stToPickup, "r-1"
			d.leg = &Leg{From: here, To: pickup, Start: 18 * sec, SpeedMPS: 8}
		}, true, "accepted: a phase change, sent at once"},
		{20 * sec, nil, true, "driving to the pickup, 16 m"},
		{24 * sec, nil, true, "driving to the pickup, 48 m"},
		{26 * sec, func(s *sim, d *driver) { d.pos, d.leg = pickup, nil }, false, "arrived (not due)"},
		{28 * sec, nil, false, "waiting at the pickup, 16 m from the last sent"},
		{30 * sec, func(s *sim, d *driver) {
			d.state = stToDropoff
			d.leg = &Leg{From: pickup, To: dropoff, Start: 30 * sec, SpeedMPS: 8}
		}, true, "started: a phase change, sent at once"},
		{32 * sec, nil, false, "carrying, 16 m"},
		{36 * sec, nil, false, "carrying, 48 m"},
		{40 * sec, nil, true, "carrying, 80 m ≥ 50 m"},
		{44 * sec, nil, false, "carrying, 32 m"},
		{48 * sec, nil, true, "carrying, 64 m"},
		{50 * sec, func(s *sim, d *driver) {
			d.pos, d.leg = d.position(50*sec), nil
			d.state, d.rideID = stIdle, ""
		}, true, "completed: a phase change, sent at once"},
		{52 * sec, nil, false, "idle at the dropoff (not due)"},
		{53 * sec, func(s *sim, d *driver) {
			s.pingResults([]*driver{d}, []Ping{{DriverID: d.id}}, nil, errors.New("connection reset"), time.Now())
		}, false, "his last ping got no answer (not due)"},
		{56 * sec, nil, true, "idle, stationary, 6 s, but the last ping was not delivered"},
		{60 * sec, func(s *sim, d *driver) { d.online = false }, true, "asks to be available (status): never held"},
	}
	run := func(rule bool) (*sim, []string) {
		o := DefaultOptions()
		o.SendRule = rule
		s := newTestSim(o)
		d := testDriver("d-1", 0, o)
		d.pos, d.online = here, true
		s.drivers = []*driver{d}
		var sentAt []string
		for _, st := range steps {
			if st.do != nil {
				st.do(s, d)
			}
			d.inFlight = false // the previous ping was answered
			s.pingDue(st.at)
			if d.inFlight {
				sentAt = append(sentAt, st.name)
			}
		}
		return s, sentAt
	}

	s, sent := run(true)
	var want []string
	held := 0
	for _, st := range steps {
		if st.ruled {
			want = append(want, st.name)
		} else if st.at%(4*sec) == 0 {
			held++
		}
	}
	if strings.Join(sent, "\n") != strings.Join(want, "\n") {
		t.Errorf("rule on: sent at\n  %s\nwant\n  %s", strings.Join(sent, "\n  "), strings.Join(want, "\n  "))
	}
	sum := s.summary(0, 0, 0)
	if !sum.SendRule || sum.PingsSent != int64(len(want)) || sum.PingsSavedBySendRule != int64(held) {
		t.Errorf("rule on: summary send_rule %v, pings_sent %d, saved %d; want true, %d, %d",
			sum.SendRule, sum.PingsSent, sum.PingsSavedBySendRule, len(want), held)
	}
	if wantPct := 100 * float64(held) / float64(len(want)+held); math.Abs(sum.SendRuleSavedPct-wantPct) > 1e-9 {
		t.Errorf("rule on: saved %.3f %%, want %.3f %%", sum.SendRuleSavedPct, wantPct)
	}
	var table bytes.Buffer
	sum.WriteTable(&table)
	if line := fmt.Sprintf("%d writes saved (%.1f %% of %d sent + saved", held, sum.SendRuleSavedPct, len(want)+held); !strings.Contains(table.String(), line) ||
		!strings.Contains(table.String(), fmt.Sprintf("%d sent, ", len(want))) {
		t.Errorf("rule on: table lacks %q or the pings sent:\n%s", line, table.String())
	}

	s, sent = run(false)
	due := 0
	for _, st := range steps {
		if st.at%(4*sec) == 0 {
			due++
		}
	}
	sum = s.summary(0, 0, 0)
	if len(sent) != due || sum.SendRule || sum.PingsSent != int64(due) || sum.PingsSavedBySendRule != 0 || sum.SendRuleSavedPct != 0 {
		t.Errorf("rule off: %d sent (%v), summary send_rule %v, pings_sent %d, saved %d (%.1f %%); want every one of %d due, off, 0 saved",
			len(sent), sent, sum.SendRule, sum.PingsSent, sum.PingsSavedBySendRule, sum.SendRuleSavedPct, due)
	}
}

// A ping the send rule lets through but that is not sent (the driver's previous ping is still in
// flight) is not his last sent one: the rule keeps counting 15 s from the ping the platform got, so
// the next due ping goes out. Simulated time is passed to pingDue; no platform (the jobs are dropped).
func TestSendRuleCountsFromThePingActuallySent(t *testing.T) {
	o := DefaultOptions()
	o.SendRule = true
	s := newTestSim(o)
	d := testDriver("d-1", 0, o)
	d.pos, d.online = LatLng{Lat: 40.75, Lng: -73.98}, true
	s.drivers = []*driver{d}
	sent := func(at time.Duration, inFlightBefore bool) bool {
		d.inFlight = inFlightBefore
		s.pingDue(at)
		return d.inFlight && !inFlightBefore
	}
	if !sent(0, false) {
		t.Fatal("first ping not sent")
	}
	for _, at := range []time.Duration{4, 8, 12} {
		if sent(at*time.Second, false) {
			t.Fatalf("stationary ping at %v s sent; want held (4–12 s after the last sent)", at)
		}
	}
	// 16 s: due and not held, but his 0 s ping is still unanswered: skipped, not sent.
	if sent(16*time.Second, true) {
		t.Fatal("ping at 16 s sent while the previous one is in flight")
	}
	if !sent(20*time.Second, false) {
		t.Error("ping at 20 s held back: the rule counted the skipped 16 s ping as sent (last ping the platform got: 0 s)")
	}
}

// An offer seen first in a ping answer after a quiet stretch of the send rule may have been made
// any time since his previous answered ping: if his socket came up after that, the offer is not one
// push should have carried (else a reconnect during the quiet stretch counts as a push lost).
func TestOfferByPingAfterQuietStretchNotExpectedByPush(t *testing.T) {
	o := DefaultOptions()
	o.SendRule = true
	s := newTestSim(o)
	d := testDriver("d-1", 0, o)
	d.online = true
	now := time.Now()
	// His previous ping was answered 2 s ago (16 s simulated at 8×: a stationary driver's quiet
	// stretch); his socket reconnected 1.7 s ago.
	d.lastPingOK = now.Add(-2 * time.Second)
	d.sock = &socket{}
	d.sock.up.Store(true)
	d.sock.since.Store(now.Add(-1700 * time.Millisecond).UnixNano())
	offer := &Offer{OfferID: "o-1", RideID: "r-1", ExpiresAt: now.Add(10 * time.Second).Format(time.RFC3339Nano)}
	s.pingResults([]*driver{d}, []Ping{{DriverID: d.id}}, []PingResult{{DriverID: d.id, Applied: true, Status: "available", Offer: offer}}, nil, now)
	if len(s.pingOffers) != 1 {
		t.Fatalf("%d offers by ping recorded, want 1", len(s.pingOffers))
	}
	if s.pingOffers[0].expected {
		t.Error("offer seen in a ping answer counted as expected by push although the socket came up after the previous answered ping")
	}
	if lost, _, _, _ := s.pushOutcome(); lost != 0 {
		t.Errorf("push lost %d, want 0", lost)
	}
}

// The replay warns when its moving drivers would be gps_jump rejected; with the send rule a
// carrying driver sends two 32 m steps at once, which the default rule allows at 8× (64 m in 1 s
// wall against 105 m) but not at 32× (64 m in 0.25 s against 63.75 m), where one step still passes.
func TestGPSJumpCheckCountsTheSendRulesLongerSteps(t *testing.T) {
	for _, tc := range []struct {
		speedup float64
		rule    bool
		jump    bool
	}{
		{8, false, false}, {8, true, false}, {32, false, false}, {32, true, true},
	} {
		o := DefaultOptions()
		o.Speedup, o.SendRule = tc.speedup, tc.rule
		step, allowed, _ := gpsJumpCheck(o)
		if got := step > allowed; got != tc.jump {
			t.Errorf("speedup %g, send rule %v: step %.1f m, allowed %.1f m: warns %v, want %v", tc.speedup, tc.rule, step, allowed, got, tc.jump)
		}
	}
}
