package push_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/push"
)

func TestRegistry(t *testing.T) { testRegistry(t, testkit.SingleRedis) }

func testRegistry(t *testing.T, newRedis testkit.RedisFunc) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix := newRedis(t)
	reg := push.NewRegistry(rdb, prefix)
	d1 := push.User{Role: auth.RoleDriver, ID: "d1"}
	r1 := push.User{Role: auth.RoleRider, ID: "d1"} // same subject, other role: another user

	for _, c := range []string{"c1", "c2+/="} {
		if ev, err := reg.Register(ctx, d1, c); err != nil || len(ev) != 0 {
			t.Fatalf("Register(%s) = %v, %v", c, ev, err)
		}
	}
	if _, err := reg.Register(ctx, r1, "c3"); err != nil {
		t.Fatal(err)
	}
	if got, _ := reg.Connections(ctx, d1); !slices.Equal(sorted(got), []string{"c1", "c2+/="}) {
		t.Errorf("Connections(driver d1) = %v, want c1 c2+/=", got)
	}
	if got, _ := reg.Connections(ctx, r1); !slices.Equal(got, []string{"c3"}) {
		t.Errorf("Connections(rider d1) = %v, want c3", got)
	}
	if u, ok, err := reg.Lookup(ctx, "c3"); err != nil || !ok || u != r1 {
		t.Errorf("Lookup(c3) = %v %v %v, want %v", u, ok, err, r1)
	}
	if u, ok, err := reg.Unregister(ctx, "c1"); err != nil || !ok || u != d1 {
		t.Errorf("Unregister(c1) = %v %v %v", u, ok, err)
	}
	if _, ok, err := reg.Unregister(ctx, "c1"); err != nil || ok {
		t.Errorf("second Unregister(c1): ok %v, %v; want false, nil", ok, err)
	}
	if got, _ := reg.Connections(ctx, d1); !slices.Equal(got, []string{"c2+/="}) {
		t.Errorf("after Unregister: Connections = %v", got)
	}
	if err := reg.Remove(ctx, d1, "c2+/="); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := reg.Lookup(ctx, "c2+/="); ok {
		t.Error("Lookup after Remove still finds the connection")
	}

	// One too many evicts the oldest, never the new one.
	u := push.User{Role: auth.RoleRider, ID: "many"}
	for i := range push.MaxConnectionsPerUser {
		if ev, err := reg.Register(ctx, u, fmt.Sprintf("m%d", i)); err != nil || len(ev) != 0 {
			t.Fatalf("Register(m%d) = %v, %v", i, ev, err)
		}
		time.Sleep(2 * time.Millisecond) // distinct expiry scores
	}
	ev, err := reg.Register(ctx, u, "newest")
	if err != nil || !slices.Equal(ev, []string{"m0"}) {
		t.Fatalf("Register past the cap evicted %v, %v; want [m0]", ev, err)
	}
	if got, _ := reg.Connections(ctx, u); len(got) != push.MaxConnectionsPerUser || !slices.Contains(got, "newest") || slices.Contains(got, "m0") {
		t.Errorf("after eviction: %v", got)
	}
	if _, ok, _ := reg.Lookup(ctx, "m0"); ok {
		t.Error("the evicted connection is still registered")
	}
	if n, err := reg.Count(ctx); err != nil || n != 1+push.MaxConnectionsPerUser {
		t.Errorf("Count = %d, %v; want %d (c3 and the rider's %d)", n, err, 1+push.MaxConnectionsPerUser, push.MaxConnectionsPerUser)
	}

	// Registrations expire with their TTL.
	short := push.NewRegistry(rdb, prefix+"short:")
	short.TTL = 300 * time.Millisecond
	if _, err := short.Register(ctx, d1, "gone-soon"); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, func() (bool, string) {
		got, _ := short.Connections(ctx, d1)
		_, ok, _ := short.Lookup(ctx, "gone-soon")
		return len(got) == 0 && !ok, fmt.Sprintf("300 ms registration still listed %v, looked up %v", got, ok)
	})

	// The ride's rider, for position pushes.
	if err := reg.SetRideRider(ctx, "ride-1", "r9"); err != nil {
		t.Fatal(err)
	}
	if got, _ := reg.RideRider(ctx, "ride-1"); got != "r9" {
		t.Errorf("RideRider = %q, want r9", got)
	}
	if got, _ := reg.RideRider(ctx, "ride-2"); got != "" {
		t.Errorf("RideRider of an unknown ride = %q", got)
	}
}

func TestValidateConnectionID(t *testing.T) {
	for _, tc := range []struct {
		id string
		ok bool
	}{{"L0SM9cOFvHcCIhw=", true}, {"a+b/c=", true}, {"", false}, {"has space", false}, {"tab\t", false}, {"é", false}, {string(make([]byte, 129)), false}} {
		if err := push.ValidateConnectionID("X-Flagdown-Connection-Id", tc.id); (err == nil) != tc.ok {
			t.Errorf("ValidateConnectionID(%q) = %v, want ok %v", tc.id, err, tc.ok)
		}
	}
}

func sorted(s []string) []string { s = slices.Clone(s); slices.Sort(s); return s }
