package replay

import (
	"strings"
	"testing"
	"time"
)

// TestJudge checks each count of the ground truth on a hand-made run: a TTL of 10 s, grace 2 s.
func TestJudge(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	in := truthInput{
		ttl: 10 * time.Second, grace: 2 * time.Second, judgedAt: at(300),
		drivers: []driverTruth{
			{id: "pinging", lastPingOK: at(299)},                                     // never stopped
			{id: "stopped-ok", stopped: at(20), lastPingOK: at(19)},                  // taken offline at 30
			{id: "stopped-late", stopped: at(20), lastPingOK: at(19)},                // taken offline at 40: late
			{id: "stopped-never", stopped: at(20), lastPingOK: at(19)},               // never, Redis says available
			{id: "stopped-gone", stopped: at(20), lastPingOK: at(19)},                // never, Redis holds nothing
			{id: "stopped-outage", stopped: at(100), lastPingOK: at(99)},             // outage 105..140: until 160
			{id: "stopped-recent", stopped: at(295), lastPingOK: at(294)},            // deadline after judgedAt
			{id: "alerted", lastPingOK: at(299)},                                     // pinging, trip alert
			{id: "reopened", stopped: at(200), lastPingOK: at(199)},                  // reopened at 150: false
			{id: "seen-offline", lastPingOK: at(299)},                                // ping answer said offline
			{id: "signed-off", stopped: at(50), signedOff: true, lastPingOK: at(50)}, // not judged
		},
		decisions: []offlineDecision{
			{kind: "driver_offline", driverID: "stopped-ok", at: at(30)},
			{kind: "driver_offline", driverID: "stopped-late", at: at(40)},
			{kind: "driver_offline", driverID: "stopped-outage", at: at(155)},
			{kind: "ride_driver_offline", driverID: "alerted", rideID: "r1", at: at(60)},
			{kind: "ride_reopened", driverID: "reopened", rideID: "r2", reason: "driver_offline", at: at(150)},
			{kind: "ride_reopened", driverID: "stopped-ok", rideID: "r3", reason: "driver_cancelled", at: at(35)},
			{kind: "ping_answer", driverID: "seen-offline", at: at(70)},
		},
		presence: map[string]string{"stopped-never": "available", "stopped-gone": ""},
		outages:  []Outage{{What: "redis_sigstop", From: at(105), To: at(140)}},
		acks: []ack{
			{action: "accept", rideID: "r4", driverID: "a"}, {action: "start", rideID: "r4", driverID: "a"},
			{action: "complete", rideID: "r4", driverID: "a"},
			{action: "accept", rideID: "r5", driverID: "b"},   // not in the outbox
			{action: "complete", rideID: "r6", driverID: "c"}, // still IN_PROGRESS
		},
		rides: map[string]rideFact{
			"r4": {status: "COMPLETED", driverID: "a", acceptedBy: map[string]bool{"a": true}, started: true},
			"r5": {status: "REQUESTED", acceptedBy: map[string]bool{}},
			"r6": {status: "IN_PROGRESS", driverID: "c", acceptedBy: map[string]bool{"c": true}, started: true},
		},
	}
	g := judge(in)
	want := map[string][2]int{
		"false_offline_drivers":  {g.FalseOfflineDrivers, 3},  // alerted, reopened, seen-offline
		"missed_offline_drivers": {g.MissedOfflineDrivers, 2}, // stopped-late, stopped-never
		"false_reopens":          {g.FalseReopens, 2},         // r2 (driver pinging), r3 (no cause)
		"false_trip_alerts":      {g.FalseTripAlerts, 1},
		"acked_not_reflected":    {g.AckedNotReflected, 2},
		"drivers_stopped":        {g.DriversStopped, 7},
		"offline_judged":         {g.OfflineJudged, 6}, // stopped-recent is not judged yet
		"offline_detected":       {g.OfflineDetected, 4},
		"offline_detection":      {g.OfflineDetectionCount, 2},
	}
	for k, v := range want {
		if v[0] != v[1] {
			t.Errorf("%s = %d, want %d (examples %v)", k, v[0], v[1], g.Examples)
		}
	}
	if g.OfflineDetectionP50S != 11 || g.OfflineDetectionP99S != 56 {
		t.Errorf("detection p50/p99 = %g / %g s, want 11 / 56", g.OfflineDetectionP50S, g.OfflineDetectionP99S)
	}
	if f := g.Failures(); len(f) != 5 {
		t.Errorf("failures %v, want all five counts", f)
	}
}

// TestDeadline: outside outages the last answered ping + TTL + grace; an outage overlapping that
// span moves it to the outage's end + 2 × TTL; an outage not over yet leaves it undecided.
func TestDeadline(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	d := driverTruth{id: "x", stopped: t0.Add(time.Second), lastPingOK: t0}
	ttl, grace := 30*time.Second, 2*time.Second
	if dl, ok := deadline(d, nil, ttl, grace); !ok || !dl.Equal(t0.Add(32*time.Second)) {
		t.Errorf("no outage: %v %v, want t0+32s", dl, ok)
	}
	before := []Outage{{From: t0.Add(-time.Minute), To: t0.Add(-time.Second)}}
	if dl, _ := deadline(d, before, ttl, grace); !dl.Equal(t0.Add(32 * time.Second)) {
		t.Errorf("outage before: %v, want t0+32s", dl)
	}
	in := []Outage{{From: t0.Add(10 * time.Second), To: t0.Add(45 * time.Second)}}
	if dl, _ := deadline(d, in, ttl, grace); !dl.Equal(t0.Add(105 * time.Second)) {
		t.Errorf("outage inside: %v, want t0+105s", dl)
	}
	open := []Outage{{From: t0.Add(10 * time.Second)}}
	if _, ok := deadline(d, open, ttl, grace); ok {
		t.Error("an outage not over yet gave a deadline")
	}
}

// TestJudgeFleetSilentAtTheEnd: when the replay ends, every driver stops pinging at once, which is,
// for the platform, a mass lapse like a lost gateway: the offline brake may engage once the drivers
// who were pinging have been silent for half a TTL (the longest gap between two of a driver's pings
// before it). A driver whose deadline falls after that is not judged (the run itself holds him);
// one whose deadline falls before it is.
func TestJudgeFleetSilentAtTheEnd(t *testing.T) {
	g := judge(fleetSilentAtTheEnd())
	if g.MissedOfflineDrivers != 1 || g.OfflineJudged != 1 {
		t.Errorf("missed %d of %d judged (examples %v), want 1 of 1: only the driver whose deadline came before the "+
			"fleet's silence could engage the brake", g.MissedOfflineDrivers, g.OfflineJudged, g.Examples)
	}
}

// fleetSilentAtTheEnd is a ground truth input with a TTL of 10 s, pings at most 1 s apart and the
// replay's pings ending at 280 s (the brake may engage from 280 + 5 − 1 = 284 s on), read at 300 s:
// driver "before" stopped at 265 s (deadline 277 s: judged), "held" at 275 s (deadline 287 s: the
// run's own brake holds him); both still available.
func fleetSilentAtTheEnd() truthInput {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	return truthInput{
		ttl: 10 * time.Second, grace: 2 * time.Second, judgedAt: at(300), fleetSilent: at(280), pingGap: time.Second,
		drivers: []driverTruth{
			{id: "before", stopped: at(265), lastPingOK: at(265)},
			{id: "held", stopped: at(275), lastPingOK: at(275)},
		},
		presence: map[string]string{"before": "available", "held": "available"},
	}
}

// A span in which the replay itself left most drivers silent (a loaded client or platform: the
// offline brake holds it as a mass lapse) is an outage for the deadlines: a driver who stopped
// inside it is judged against its end + 2 × TTL, and Rejudge's outages do not replace it.
func TestJudgeReplaySilentSpanIsAnOutage(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	in := truthInput{
		ttl: 10 * time.Second, grace: 2 * time.Second, judgedAt: at(300),
		drivers: []driverTruth{
			{id: "inside", stopped: at(100), lastPingOK: at(100)}, // deadline 112 falls in the silent span
			{id: "after", stopped: at(200), lastPingOK: at(200)},  // deadline 212: judged as usual
		},
		presence: map[string]string{"inside": "available", "after": "available"},
		decisions: []offlineDecision{
			{kind: "driver_offline", driverID: "inside", at: at(140)}, // 15 s after the span's end: within 2 × TTL
		},
		selfSilent: []Outage{{What: "replay_silent", From: at(104), To: at(125)}},
	}
	g := judge(in)
	if g.MissedOfflineDrivers != 1 || g.OfflineJudged != 2 {
		t.Errorf("missed %d of %d judged (examples %v), want 1 of 2: the driver decided within 2 × TTL after the silent span is not missed",
			g.MissedOfflineDrivers, g.OfflineJudged, g.Examples)
	}
	if len(g.Examples["missed_offline_drivers"]) != 1 || !strings.HasPrefix(g.Examples["missed_offline_drivers"][0], "after") {
		t.Errorf("missed examples %v, want only the driver who stopped after the span", g.Examples["missed_offline_drivers"])
	}
	in.selfSilent = nil
	if g := judge(in); g.MissedOfflineDrivers != 2 {
		t.Errorf("without the silent span missed %d, want 2 (the test must tell the two apart)", g.MissedOfflineDrivers)
	}
}

// watchSilence opens a span when at least SilentShare of the pinging drivers have had no answered
// ping for half a TTL, and closes it when they have again.
func TestWatchSilenceRecordsTheReplaysOwnSilence(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	o := DefaultOptions()
	o.HeartbeatTTL = 10 * time.Second
	s := &sim{opts: o}
	for i := range 10 {
		last := now.Add(-time.Second)
		if i < 6 {
			last = now.Add(-6 * time.Second) // past half the TTL
		}
		s.drivers = append(s.drivers, &driver{lastPingOK: last})
	}
	s.watchSilence(now)
	if len(s.silentSpans) != 1 || !s.silentSpans[0].To.IsZero() {
		t.Fatalf("6 of 10 silent: spans %v, want one open", s.silentSpans)
	}
	for _, d := range s.drivers {
		d.lastPingOK = now.Add(time.Second)
	}
	s.watchSilence(now.Add(time.Second))
	if len(s.silentSpans) != 1 || s.silentSpans[0].To.IsZero() {
		t.Fatalf("all answered again: spans %v, want the span closed", s.silentSpans)
	}
}

// A ride whose driver dropped offline before starting it stays ACCEPTED until the platform takes
// him offline; while the ground truth does not judge his deadline (here the replay's own end holds
// it), the ride awaits that decision for a reason. One abandoned by a driver whose deadline is
// judged does not.
func TestRidesAwaitingOfflineFollowTheUnjudgedDrivers(t *testing.T) {
	// The fleet of TestJudgeFleetSilentAtTheEnd: "before" is judged, "held" is held by the
	// replay's end.
	in := fleetSilentAtTheEnd()
	in.presence["before"] = "offline"
	g := judge(in)
	s := &Summary{GroundTruth: &g, ridesAbandoned: map[string]string{"r-before": "before", "r-held": "held"}}
	if got := s.RidesAwaitingOffline(); len(got) != 1 || got[0] != "r-held" {
		t.Errorf("rides awaiting offline = %v, want [r-held]: only the driver the replay's end holds leaves his ride waiting", got)
	}
	if got := (&Summary{ridesAbandoned: s.ridesAbandoned}).RidesAwaitingOffline(); got != nil {
		t.Errorf("without a ground truth: %v, want none", got)
	}
}
