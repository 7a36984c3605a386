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
