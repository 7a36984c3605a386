package replay

import (
	"testing"
	"time"
)

// The send rule holds back a stationary or carrying driver's ping until he moved 50 m or 15 s
// passed since his last sent one, never one that must carry a status change, and nothing when off.
func TestSendRuleHoldsBackStationaryAndCarryingPings(t *testing.T) {
	here := LatLng{Lat: 40.75, Lng: -73.98}
	moved := func(m float64) LatLng { return LatLng{Lat: here.Lat + m/111_195, Lng: here.Lng} }
	s := &sim{opts: Options{SendRule: true}}
	d := &driver{id: "d-1", state: stIdle}
	steps := []struct {
		name     string
		at       time.Duration
		pos      LatLng
		state    driverState
		mustSend bool
		held     bool
	}{
		{"first ping is sent", 0, here, stIdle, false, false},
		{"stationary 4 s later, same place: held", 4 * time.Second, here, stIdle, false, true},
		{"stationary, 40 m moved: held", 8 * time.Second, moved(40), stIdle, false, true},
		{"a status change is always sent", 12 * time.Second, here, stIdle, true, false},
		{"14 s after the last sent: held", 26 * time.Second, here, stIdle, false, true},
		{"15 s after the last sent: sent", 27 * time.Second, here, stIdle, false, false},
		{"carrying, 30 m moved: held", 31 * time.Second, moved(30), stToDropoff, false, true},
		{"carrying, 60 m moved: sent", 35 * time.Second, moved(60), stToDropoff, false, false},
	}
	for _, st := range steps {
		d.state = st.state
		if got := s.holdBack(d, st.at, st.pos, st.mustSend); got != st.held {
			t.Errorf("%s: held = %v, want %v", st.name, got, st.held)
		}
	}
	if got := s.rule.saved.Load(); got != 4 {
		t.Errorf("saved = %d, want 4", got)
	}
	off := &sim{}
	for i := range 3 {
		if off.holdBack(d, time.Duration(i)*time.Second, here, false) {
			t.Errorf("rule off: ping %d held back", i)
		}
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
