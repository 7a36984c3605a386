package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// TestPingWithoutStateIsUnknown: a ping that names no status, from a driver of whom Redis holds no
// state (Redis restarted empty, or the hash expired), is answered "unknown", never "offline": the
// platform does not know whether he is online, and his app must say it with its next ping. Until
// then he is offered nothing; a ping naming available makes him available.
func TestPingWithoutStateIsUnknown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	res, err := s.ApplyPings(ctx, []redisstore.Ping{{DriverID: "d-1", Position: midtown, At: time.Now()}})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Status != "unknown" {
		t.Errorf("status after a status-less ping without state = %q; want unknown (never offline: nothing was observed)", res[0].Status)
	}
	if inGeo(t, s, "d-1") {
		t.Errorf("a driver of unknown status is in the available set")
	}
	if r := ping(t, s, "d-1", midtown, time.Now().Add(time.Second), dispatch.DriverAvailable); r.Status != dispatch.DriverAvailable {
		t.Errorf("status after a ping naming available = %q; want available", r.Status)
	}
	if !inGeo(t, s, "d-1") {
		t.Errorf("an available driver is not in the available set")
	}
	res, err = s.ApplyPings(ctx, []redisstore.Ping{{DriverID: "d-1", Position: midtown, At: time.Now().Add(2 * time.Second)}})
	if err != nil || res[0].Status != dispatch.DriverAvailable {
		t.Errorf("status after a status-less ping with state = %q, %v; want available", res[0].Status, err)
	}
}

// TestRideEndWithoutHeartbeatIsNotOffline: a ride that ends (complete, or a re-opening applied by
// reconcile) while its driver's heartbeat is gone, because Redis was stopped or his pings did not
// reach it, tells nothing about whether he is online: no liveness decision was taken (that is
// lapse.lua's, with positive evidence). He leaves his ride available, out of the available set
// until he pings, and his next status-less ping is answered available, never offline. A driver a
// decision took offline stays offline.
func TestRideEndWithoutHeartbeatIsNotOffline(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	at := time.Now()
	s := newStore(t)
	ping(t, s, "d-1", midtown, at, dispatch.DriverAvailable)
	assign(t, s, dispatch.Assignment{DriverID: "d-1", Epoch: 1, RideID: "ride-1", RideStatus: dispatch.RideInProgress, RideVersion: 3},
		redisstore.AssignApplied)
	// Redis was stopped longer than the heartbeat TTL: the heartbeat expired, nobody decided anything.
	if err := s.Client().Del(ctx, s.Prefix()+"hb:d-1").Err(); err != nil {
		t.Fatal(err)
	}
	// He completes the ride (the effect reaches Redis before his next ping does).
	assign(t, s, dispatch.Assignment{DriverID: "d-1", Epoch: 2, RideID: "", RideVersion: 4}, redisstore.AssignApplied)
	if st := state(t, s, "d-1"); st.Status == dispatch.DriverOffline || st.InAvailable {
		t.Errorf("after a ride ended without a heartbeat: status %q, in the available set %v; want not offline (no decision "+
			"was taken), not in the available set (no heartbeat)", st.Status, st.InAvailable)
	}
	res, err := s.ApplyPings(ctx, []redisstore.Ping{{DriverID: "d-1", Position: midtown, At: at.Add(time.Second)}})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Status != dispatch.DriverAvailable {
		t.Errorf("status-less ping after the ride ended without a heartbeat answered %q; want available (nobody took him offline)", res[0].Status)
	}
	if !inGeo(t, s, "d-1") {
		t.Errorf("the driver back after his ride is not in the available set")
	}

	// A driver a decision took offline (MarkOffline after his lapse) while on his ride stays
	// offline when the ride is re-opened without him.
	ping(t, s, "d-2", midtown, at, dispatch.DriverAvailable)
	assign(t, s, dispatch.Assignment{DriverID: "d-2", Epoch: 1, RideID: "ride-2", RideStatus: dispatch.RideAccepted, RideVersion: 2},
		redisstore.AssignApplied)
	if err := s.Client().Del(ctx, s.Prefix()+"hb:d-2").Err(); err != nil {
		t.Fatal(err)
	}
	if _, alive, err := s.MarkOffline(ctx, "d-2"); err != nil || alive {
		t.Fatalf("MarkOffline: alive %v, %v", alive, err)
	}
	assign(t, s, dispatch.Assignment{DriverID: "d-2", Epoch: 2, RideID: "", RideVersion: 3}, redisstore.AssignApplied)
	if st := state(t, s, "d-2").Status; st != dispatch.DriverOffline {
		t.Errorf("status of a driver taken offline whose ride was re-opened = %q, want offline", st)
	}
}

// TestPingsWithoutStateStayUnknown: a driver on a ride names no status in his pings (his status is
// the ride's), so after Redis restarted empty every ping of his is status-less: each is answered
// unknown until Redis learns his state (reconcile re-creates his assignment, or he names a status),
// never offline: the first ping must not record the offline it did not observe.
func TestPingsWithoutStateStayUnknown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	at := time.Now()
	for i := range 3 {
		res, err := s.ApplyPings(ctx, []redisstore.Ping{{DriverID: "d-1", Position: midtown, At: at.Add(time.Duration(i) * time.Second)}})
		if err != nil {
			t.Fatal(err)
		}
		if res[0].Status != "unknown" {
			t.Fatalf("status-less ping %d without state answered %q; want unknown (nothing said he went offline)", i+1, res[0].Status)
		}
	}
	if inGeo(t, s, "d-1") {
		t.Errorf("a driver of unknown status is in the available set")
	}
	// Reconcile re-creates his assignment: his next ping answers his on-ride status.
	assign(t, s, dispatch.Assignment{DriverID: "d-1", Epoch: 1, RideID: "ride-1", RideStatus: dispatch.RideInProgress, RideVersion: 3},
		redisstore.AssignApplied)
	res, err := s.ApplyPings(ctx, []redisstore.Ping{{DriverID: "d-1", Position: midtown, At: at.Add(4 * time.Second)}})
	if err != nil || res[0].Status != dispatch.DriverBusy {
		t.Errorf("status-less ping after the assignment was re-created = %q, %v; want busy", res[0].Status, err)
	}
}
