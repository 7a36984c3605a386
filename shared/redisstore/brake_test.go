package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// The offline brake: when an abnormal share of the city's drivers lapses together (FLAGDOWN_OFFLINE_BRAKE_SHARE
// of those seen in the last two heartbeat TTLs, 55 % by default, with at least
// FLAGDOWN_OFFLINE_BRAKE_MIN_DRIVERS of them), the fault is the platform's, not the drivers': the
// liveness decision holds everybody "unknown" until the share is normal again.

// fleet pings n drivers named prefix-0 … prefix-(n-1) at midtown and returns their ids.
func fleet(t *testing.T, s *redisstore.Store, prefix string, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%d", prefix, i)
		ping(t, s, ids[i], midtown, time.Now(), dispatch.DriverAvailable)
	}
	return ids
}

// lapseAt makes driverID's heartbeat lapse as if his last ping came a heartbeat TTL before dl: the
// key gone, hbdl and his entry in the heartbeat index P hbidx at dl.
func lapseAt(t *testing.T, s *redisstore.Store, driverID string, dl time.Time) {
	t.Helper()
	ctx := context.Background()
	if err := s.Client().Del(ctx, s.Prefix()+"hb:"+driverID).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Client().HSet(ctx, s.Prefix()+"driver:"+driverID, "hbdl", dl.UnixMilli()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Client().ZAdd(ctx, s.Prefix()+"hbidx", redis.Z{Score: float64(dl.UnixMilli()), Member: driverID}).Err(); err != nil {
		t.Fatal(err)
	}
}

// markLongHealthy marks Redis healthy since long ago (a lapse a second ago was seen while healthy).
func markLongHealthy(t *testing.T, s *redisstore.Store) {
	t.Helper()
	markHealthy(t, s, redisstore.HealthNewGeneration)
	if err := s.Client().HSet(context.Background(), s.Prefix()+"health", "since", 1).Err(); err != nil {
		t.Fatal(err)
	}
}

// braked reports whether P health holds the brake (its field brake: engaged since, ms).
func braked(t *testing.T, s *redisstore.Store) bool {
	t.Helper()
	n, err := s.Client().HExists(context.Background(), s.Prefix()+"health", "brake").Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// massLapse pings a fleet of 30 on a Redis long healthy, makes the first 20 lapse within a second
// of each other, marks Redis healthy (the brake's judgement) and returns the 30 ids.
func massLapse(t *testing.T, s *redisstore.Store) []string {
	t.Helper()
	markLongHealthy(t, s)
	ids := fleet(t, s, "d", 30)
	now := redisNow(t, s)
	for i, id := range ids[:20] {
		lapseAt(t, s, id, now.Add(-time.Duration(i)*50*time.Millisecond))
	}
	markHealthy(t, s, redisstore.HealthSteady)
	return ids
}

func TestASingleLapseAmongManyIsTakenOffline(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	markLongHealthy(t, s)
	ids := fleet(t, s, "d", 30)
	lapseAt(t, s, ids[0], redisNow(t, s).Add(-time.Second))
	markHealthy(t, s, redisstore.HealthSteady)
	if p := presence(t, s, ids[0]); p.State != redisstore.PresenceLapsed {
		t.Errorf("presence of the one lapsed driver = %+v, want lapsed", p)
	}
}

func TestAMassLapseTakesNobodyOffline(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	// 20 of 30 (67 %) lapse within a second of each other, as when their pings stop reaching the
	// platform; one of them (ids[0]) really left.
	ids := massLapse(t, s)
	if !braked(t, s) {
		t.Errorf("P health has no brake after a mass lapse, want it engaged")
	}
	for _, id := range ids[:20] {
		if p := presence(t, s, id); p.State != redisstore.PresenceUnknown || p.Reason != "mass_lapse" {
			t.Fatalf("presence of %s during a mass lapse = %+v, want unknown (mass_lapse)", id, p)
		}
	}
	gone, err := s.HeartbeatsGone(context.Background(), ids[:20], 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range gone {
		if g {
			t.Errorf("HeartbeatsGone(%s) during a mass lapse = true, want false", ids[i])
		}
	}

	// The platform recovers: all but ids[0] ping again, the share is normal and the brake lets go.
	for _, id := range ids[1:20] {
		ping(t, s, id, midtown, time.Now(), dispatch.DriverAvailable)
	}
	markHealthy(t, s, redisstore.HealthSteady)
	if braked(t, s) {
		t.Fatalf("P health holds the brake after the recovery, want it released")
	}
	// ids[0]'s lapse fell inside the braked period: he gets a heartbeat TTL from the release to
	// ping, like after a Redis outage, and only then is he offline.
	if p := presence(t, s, ids[0]); p.State != redisstore.PresenceUnknown || p.Reason != "mass_lapse" {
		t.Errorf("presence of the driver who left, right after the release = %+v, want unknown (mass_lapse)", p)
	}
	ctx := context.Background()
	if err := s.Client().HSet(ctx, s.Prefix()+"health", "brake_off", redisNow(t, s).Add(-s.HeartbeatTTL-time.Second).UnixMilli()).Err(); err != nil {
		t.Fatal(err)
	}
	if p := presence(t, s, ids[0]); p.State != redisstore.PresenceLapsed {
		t.Errorf("presence of the driver who left, a TTL after the release = %+v, want lapsed", p)
	}
}

// Below FLAGDOWN_OFFLINE_BRAKE_MIN_DRIVERS the brake never engages: a small fleet leaving together
// is not a platform fault.
func TestASmallFleetLapsingTogetherIsTakenOffline(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	markLongHealthy(t, s)
	ids := fleet(t, s, "d", 5)
	for _, id := range ids[:4] {
		lapseAt(t, s, id, redisNow(t, s).Add(-time.Second))
	}
	markHealthy(t, s, redisstore.HealthSteady)
	if p := presence(t, s, ids[0]); p.State != redisstore.PresenceLapsed {
		t.Errorf("presence in a fleet of 5 = %+v, want lapsed", p)
	}
}

// Heartbeats whose deadline fell inside a Redis outage are unknown (lapse.lua defers them a TTL
// after Redis came back), not a mass lapse: the brake does not count them, and it does not engage
// when Redis answers again after a stop longer than the TTL. Had it engaged, its release would hold
// every driver who really stopped after the outage a further TTL.
func TestAnOutageIsNotAMassLapse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	markLongHealthy(t, s)
	ids := fleet(t, s, "d", 30)
	// Redis was stopped 40 s (longer than the 30 s TTL): 20 of the 30 heartbeats lapsed inside the
	// stop, the others' deadlines are still ahead; the sweeper's previous mark is 40 s old.
	now := redisNow(t, s)
	for i, id := range ids[:20] {
		lapseAt(t, s, id, now.Add(-5*time.Second-time.Duration(i)*100*time.Millisecond))
	}
	if err := s.Client().HSet(ctx, s.Prefix()+"health", "seen", now.Add(-40*time.Second).UnixMilli()).Err(); err != nil {
		t.Fatal(err)
	}
	h := markHealthy(t, s, redisstore.HealthGap)
	if h.Brake || braked(t, s) {
		t.Errorf("the first mark after a 40 s stop engaged the brake (lapsing %d of %d): deadlines inside the outage "+
			"are unknown, not a mass lapse", h.Lapsing, h.Population)
	}
	if h.Lapsing != 0 {
		t.Errorf("lapsing after the stop = %d of %d, want 0 (the 20 deadlines inside the outage are unknown)", h.Lapsing, h.Population)
	}
	if p := presence(t, s, ids[0]); p.State != redisstore.PresenceUnknown || p.Reason != "outage" {
		t.Errorf("presence of a driver whose deadline fell inside the stop = %+v, want unknown (outage)", p)
	}
	// All but ids[0] ping again; ids[0] really stopped during the stop. He is offline a TTL after
	// Redis came back, never held longer by a brake.
	for _, id := range ids[1:20] {
		ping(t, s, id, midtown, time.Now(), dispatch.DriverAvailable)
	}
	if h := markHealthy(t, s, redisstore.HealthSteady); h.Brake {
		t.Errorf("the brake engaged after the drivers pinged again (lapsing %d of %d)", h.Lapsing, h.Population)
	}
	if err := s.Client().HSet(ctx, s.Prefix()+"health", "since", redisNow(t, s).Add(-s.HeartbeatTTL-time.Second).UnixMilli()).Err(); err != nil {
		t.Fatal(err)
	}
	if p := presence(t, s, ids[0]); p.State != redisstore.PresenceLapsed {
		t.Errorf("presence of the driver who stopped, a TTL after Redis came back = %+v, want lapsed", p)
	}
}

// A gap while the brake holds (the sweeper or Redis away for a moment: a loaded host) is no
// evidence that the mass lapse ended: the drivers the brake holds are still silent, so it keeps
// holding them. Before, the gap's new healthy period left them out of the population (their
// deadlines came before it), the population was 0, the brake was released, and a TTL later every
// driver it had held was taken offline at once (121 false offline decisions in one loaded chaos
// run, the replay's drivers still pinging as far as the replay knew).
func TestAGapWhileBrakedKeepsTheBrake(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	ids := massLapse(t, s)
	if !braked(t, s) {
		t.Fatalf("P health has no brake after a mass lapse, want it engaged")
	}
	// The sweeper's previous mark is 5 s old: the next one sees a gap.
	if err := s.Client().HSet(ctx, s.Prefix()+"health", "seen", redisNow(t, s).Add(-5*time.Second).UnixMilli()).Err(); err != nil {
		t.Fatal(err)
	}
	h := markHealthy(t, s, redisstore.HealthGap)
	if !h.Brake || !braked(t, s) {
		t.Errorf("a gap while braked released the brake (lapsing %d of %d), want it held: the drivers it holds are still silent",
			h.Lapsing, h.Population)
	}
	// A TTL after the gap, the drivers it held are still held, not lapsed.
	if err := s.Client().HSet(ctx, s.Prefix()+"health", "since", redisNow(t, s).Add(-s.HeartbeatTTL-time.Second).UnixMilli()).Err(); err != nil {
		t.Fatal(err)
	}
	markHealthy(t, s, redisstore.HealthSteady)
	if p := presence(t, s, ids[1]); p.State != redisstore.PresenceUnknown || p.Reason != "mass_lapse" {
		t.Errorf("presence of a held driver a TTL after the gap = %+v, want unknown (mass_lapse)", p)
	}
}
