package replay

import "testing"

// TestPushOutcomeTellsLostFromLate: an offer whose push never came is lost unless its end came by
// push (the platform reached it after its window) or the driver answered it from a ping answer; an ACCEPTED that never came is lost unless the
// rider's socket dropped after the accept and a later status came.
func TestPushOutcomeTellsLostFromLate(t *testing.T) {
	up := &socket{}
	up.up.Store(true)
	lost := &driver{id: "d-lost", pushed: map[string]bool{}, ended: map[string]bool{}}
	late := &driver{id: "d-late", pushed: map[string]bool{}, ended: map[string]bool{"o-late": true}}
	got := &driver{id: "d-got", pushed: map[string]bool{"o-got": true}, ended: map[string]bool{}}
	answered := &driver{id: "d-answered", answered: map[string]bool{"o-answered": true}}
	dropped := &socket{}
	dropped.downs.Store(1)
	s := &sim{
		pingOffers: []pingOffer{
			{d: lost, offerID: "o-lost", sock: up, expected: true},
			{d: late, offerID: "o-late", sock: up, expected: true},
			{d: got, offerID: "o-got", sock: up, expected: true},
			{d: answered, offerID: "o-answered", sock: up, expected: true},
			{d: lost, offerID: "o-unexpected", sock: up, expected: false},
		},
		rides: map[string]*ride{
			"r-lost":    {acceptExpectPush: true, riderSockAtAccept: up, pushedStatus: []string{"REQUESTED"}},
			"r-got":     {acceptExpectPush: true, riderSockAtAccept: up, pushedStatus: []string{"ACCEPTED"}},
			"r-dropped": {acceptExpectPush: true, riderSockAtAccept: dropped, riderDownsAtAccept: 0, pushedStatus: []string{"IN_PROGRESS"}},
		},
	}
	offers, statuses, lateN, examples := s.pushOutcome()
	if offers != 1 || statuses != 1 || lateN != 2 {
		t.Fatalf("lost offers %d, lost statuses %d, late %d; want 1, 1, 2", offers, statuses, lateN)
	}
	if len(examples) != 2 {
		t.Fatalf("examples %q, want the lost offer and the lost status", examples)
	}
}
