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
