package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// The liveness tests write P health (store.go) as the expiry source's sweeper would, and lapse a
// heartbeat on demand: the key deleted and hbdl moved just before Redis's clock, as when it expired.

// lapse makes driverID's heartbeat expire now: its key is gone, its deadline (hbdl) 1 ms ago.
func lapse(t *testing.T, s *redisstore.Store, driverID string) {
	t.Helper()
	ctx := context.Background()
	if err := s.Client().Del(ctx, s.Prefix()+"hb:"+driverID).Err(); err != nil {
		t.Fatal(err)
	}
	dl := redisNow(t, s).Add(-time.Millisecond).UnixMilli()
	if err := s.Client().HSet(ctx, s.Prefix()+"driver:"+driverID, "hbdl", dl).Err(); err != nil {
		t.Fatal(err)
	}
}

// markHealthy runs one health mark with a 1 s gap threshold and fails unless it saw want.
func markHealthy(t *testing.T, s *redisstore.Store, want redisstore.HealthEvent) redisstore.Health {
	t.Helper()
	h, err := s.MarkHealthy(context.Background(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if h.Event != want {
		t.Fatalf("MarkHealthy event = %q, want %q", h.Event, want)
	}
	return h
}

// presence reads driverID's presence.
func presence(t *testing.T, s *redisstore.Store, driverID string) redisstore.Presence {
	t.Helper()
	p, err := s.DriverPresence(context.Background(), driverID)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// hbDeadline is the deadline indexed for driverID's heartbeat in P deadlines (0 when none).
func hbDeadline(t *testing.T, s *redisstore.Store, driverID string) int64 {
	t.Helper()
	v, err := s.Client().ZScore(context.Background(), s.DeadlinesKey(), s.Prefix()+"hb:"+driverID).Result()
	if err != nil {
		return 0
	}
	return int64(v)
}

func TestHealthMarkSeesGenerationsAndGaps(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	first := markHealthy(t, s, redisstore.HealthNewGeneration)
	if again := markHealthy(t, s, redisstore.HealthSteady); again.Generation != first.Generation || !again.Since.Equal(first.Since) {
		t.Fatalf("steady mark = %+v, want generation %s since %v", again, first.Generation, first.Since)
	}
	ctx := context.Background()
	// The previous sweep was 5 s ago: Redis or its observer was away.
	if err := s.Client().HSet(ctx, s.Prefix()+"health", "seen", redisNow(t, s).Add(-5*time.Second).UnixMilli()).Err(); err != nil {
		t.Fatal(err)
	}
	gap := markHealthy(t, s, redisstore.HealthGap)
	if gap.Generation != first.Generation || !gap.Since.After(first.Since) && !gap.Since.Equal(gap.Now) {
		t.Fatalf("gap mark = %+v, want generation %s and a new healthy period", gap, first.Generation)
	}
	if err := s.Client().Del(ctx, s.Prefix()+"health").Err(); err != nil { // a flush, or an empty restart
		t.Fatal(err)
	}
	if next := markHealthy(t, s, redisstore.HealthNewGeneration); next.Generation == first.Generation {
		t.Fatalf("generation after a flush = %s, want a new one", next.Generation)
	}
}

// A driver hash without its heartbeat deadline (Redis lost or evicted his state) is no evidence
// that he went silent.
func TestMissingHeartbeatDeadlineIsUnknown(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	markHealthy(t, s, redisstore.HealthNewGeneration)
	ping(t, s, "d-1", midtown, time.Now(), dispatch.DriverAvailable)
	ctx := context.Background()
	if err := s.Client().Del(ctx, s.Prefix()+"hb:d-1").Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Client().HDel(ctx, s.Prefix()+"driver:d-1", "hbdl").Err(); err != nil {
		t.Fatal(err)
	}
	if p := presence(t, s, "d-1"); p.State != redisstore.PresenceUnknown {
		t.Errorf("presence without hbdl = %+v, want unknown", p)
	}
	if p := presence(t, s, "d-never"); p.State != redisstore.PresenceUnknown {
		t.Errorf("presence without a driver hash = %+v, want unknown", p)
	}
	gone, err := s.HeartbeatsGone(ctx, []string{"d-1", "d-never"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if gone[0] || gone[1] {
		t.Errorf("HeartbeatsGone without hbdl = %v, want [false false]", gone)
	}
}

// A lapse Redis saw while healthy is a lapse; the control for the tests below.
func TestHealthyLapseIsLapsed(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	h := markHealthy(t, s, redisstore.HealthNewGeneration)
	// The healthy period began a second ago: the lapse below (1 ms before Redis's now) falls inside
	// it even on a machine fast enough to run all of this within that millisecond.
	if err := s.Client().HSet(context.Background(), s.Prefix()+"health", "since", h.Since.Add(-time.Second).UnixMilli()).Err(); err != nil {
		t.Fatal(err)
	}
	ping(t, s, "d-1", midtown, time.Now(), dispatch.DriverAvailable)
	if p := presence(t, s, "d-1"); p.State != redisstore.PresenceAlive {
		t.Fatalf("presence after a ping = %+v, want alive", p)
	}
	lapse(t, s, "d-1")
	markHealthy(t, s, redisstore.HealthSteady)
	if p := presence(t, s, "d-1"); p.State != redisstore.PresenceLapsed {
		t.Fatalf("presence after a healthy lapse = %+v, want lapsed", p)
	}
}

// After Redis restarted empty or was flushed (P health gone: a new generation), a deadline before
// the new healthy period is deferred a full heartbeat TTL, re-indexed so the expiry source fires
// again then, and decided only after that.
func TestNewGenerationDefersDecisionsForATTL(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	markHealthy(t, s, redisstore.HealthNewGeneration)
	ping(t, s, "d-1", midtown, time.Now(), dispatch.DriverAvailable)
	lapse(t, s, "d-1")
	ctx := context.Background()
	if err := s.Client().Del(ctx, s.Prefix()+"health").Err(); err != nil {
		t.Fatal(err)
	}
	if p := presence(t, s, "d-1"); p.State != redisstore.PresenceUnknown {
		t.Fatalf("presence without a health mark = %+v, want unknown", p)
	}
	h := markHealthy(t, s, redisstore.HealthNewGeneration)
	if p := presence(t, s, "d-1"); p.State != redisstore.PresenceUnknown || p.Reason != "outage" {
		t.Fatalf("presence right after a new generation = %+v, want unknown (outage)", p)
	}
	if got, want := hbDeadline(t, s, "d-1"), h.Since.Add(s.HeartbeatTTL).UnixMilli(); got != want {
		t.Errorf("deferred heartbeat deadline = %d, want since + TTL = %d", got, want)
	}
	// A full TTL of the healthy period has passed: the lapse is his.
	if err := s.Client().HSet(ctx, s.Prefix()+"health", "since", h.Since.Add(-s.HeartbeatTTL).UnixMilli()).Err(); err != nil {
		t.Fatal(err)
	}
	if p := presence(t, s, "d-1"); p.State != redisstore.PresenceLapsed {
		t.Fatalf("presence a TTL after the new generation = %+v, want lapsed", p)
	}
}

// Deadlines that fell inside a Redis outage take nobody offline: while the health mark is stale
// every decision is unknown, and after the gap the decisions wait a TTL, during which drivers who
// keep pinging are alive again.
func TestDeadlineInsideAnOutageTakesNobodyOffline(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	markHealthy(t, s, redisstore.HealthNewGeneration)
	ids := []string{"d-1", "d-2", "d-3"}
	for _, id := range ids {
		ping(t, s, id, midtown, time.Now(), dispatch.DriverAvailable)
	}
	ctx := context.Background()
	// Redis was away for 40 s: the last sweep before it is that old, and every heartbeat lapsed.
	if err := s.Client().HSet(ctx, s.Prefix()+"health", "seen", redisNow(t, s).Add(-40*time.Second).UnixMilli()).Err(); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		lapse(t, s, id)
	}
	for _, id := range ids {
		if p := presence(t, s, id); p.State != redisstore.PresenceUnknown {
			t.Errorf("%s during the outage = %+v, want unknown", id, p)
		}
	}
	markHealthy(t, s, redisstore.HealthGap)
	for _, id := range ids {
		if p := presence(t, s, id); p.State != redisstore.PresenceUnknown {
			t.Errorf("%s right after the outage = %+v, want unknown", id, p)
		}
	}
	gone, err := s.HeartbeatsGone(ctx, ids, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range gone {
		if g {
			t.Errorf("HeartbeatsGone(%s) right after the outage = true, want false", ids[i])
		}
	}
	for _, id := range ids {
		ping(t, s, id, midtown, time.Now(), dispatch.DriverAvailable)
		if p := presence(t, s, id); p.State != redisstore.PresenceAlive {
			t.Errorf("%s pinging after the outage = %+v, want alive", id, p)
		}
	}
}

// Reconcile's repair of a lost driver hash gives him a full heartbeat TTL to ping: he is not gone,
// and the expiry source will ask at that deadline.
func TestRepairedHashIsNotGone(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	markHealthy(t, s, redisstore.HealthNewGeneration)
	assign(t, s, dispatch.Assignment{DriverID: "d-1", Epoch: 3, RideID: "ride-1", RideStatus: dispatch.RideAccepted, RideVersion: 2}, redisstore.AssignApplied)
	gone, err := s.HeartbeatsGone(context.Background(), []string{"d-1"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if gone[0] {
		t.Errorf("HeartbeatsGone after repairing his lost hash = true, want false")
	}
	dl, err := s.Client().HGet(context.Background(), s.Prefix()+"driver:d-1", "hbdl").Int64()
	if err != nil {
		t.Fatalf("hbdl after repair: %v", err)
	}
	if min := redisNow(t, s).Add(s.HeartbeatTTL - time.Second).UnixMilli(); dl < min {
		t.Errorf("hbdl after repair = %d, want about now + TTL (>= %d)", dl, min)
	}
	// And that deadline is a timer: indexed in P deadlines, so the expiry source asks at it (a
	// driver who never pings again is decided a TTL after the repair, not a reconcile grace later).
	score, err := s.Client().ZScore(context.Background(), s.DeadlinesKey(), s.Prefix()+"hb:d-1").Result()
	if err != nil || int64(score) != dl {
		t.Errorf("heartbeat deadline in P deadlines after repair = %v (%v), want hbdl %d", score, err, dl)
	}
}
