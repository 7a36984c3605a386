package push_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/metrics"
	"github.com/flagdown/flagdown/shared/push"
)

// counterValue is the sum of the samples of the counter called name in metrics.Registry (0 when
// it is not there).
func counterValue(t *testing.T, name string) float64 {
	t.Helper()
	mfs, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var v float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			v += m.GetCounter().GetValue()
		}
	}
	return v
}

// Position pushes are decoration: while the gateway holds every position post, a status push to
// another user goes through at once, the positions in flight stay a small fixed number (not one per
// ping call), and every position is either posted or counted in flagdown_push_positions_shed_total.
func TestPositionsAreShedBeforeAnythingElseWaits(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testkit.Redis(t)
	reg := push.NewRegistry(rdb, prefix)
	const rides = 300
	release := make(chan struct{})
	var inFlight, maxInFlight, positionsPosted, othersPosted atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.Contains(r.URL.Path, "/@connections/rc-") {
			othersPosted.Add(1)
			return
		}
		n := inFlight.Add(1)
		for m := maxInFlight.Load(); n > m && !maxInFlight.CompareAndSwap(m, n); m = maxInFlight.Load() {
		}
		defer inFlight.Add(-1)
		select {
		case <-release:
			positionsPosted.Add(1)
		case <-r.Context().Done():
			w.WriteHeader(http.StatusGatewayTimeout)
		}
	}))
	t.Cleanup(srv.Close)
	released := false
	t.Cleanup(func() {
		if !released {
			close(release)
		}
	})
	m, err := push.NewManagement(srv.URL+"/test", testRegion, credentials.NewStaticCredentialsProvider(testKeyID, testSecret, ""), push.HTTPClient())
	if err != nil {
		t.Fatal(err)
	}
	p := push.NewPusher(reg, m, nil, nil)
	driver := push.User{Role: auth.RoleDriver, ID: "d-status"}
	if _, err := reg.Register(ctx, driver, "dc-1"); err != nil {
		t.Fatal(err)
	}
	for i := range rides {
		id := string(rune('a'+i%26)) + strings.Repeat("x", i/26)
		if _, err := reg.Register(ctx, push.User{Role: auth.RoleRider, ID: "r-" + id}, "rc-"+id); err != nil {
			t.Fatal(err)
		}
		if err := reg.SetRideRider(ctx, "ride-"+id, "r-"+id); err != nil {
			t.Fatal(err)
		}
	}
	shed0 := counterValue(t, "flagdown_push_positions_shed_total")
	for i := range rides {
		id := string(rune('a'+i%26)) + strings.Repeat("x", i/26)
		p.PositionsAsync([]push.PositionUpdate{{At: time.Now(), Data: push.DriverPosition{
			RideID: "ride-" + id, DriverID: "d-" + id, Position: dispatch.Point{Lat: 40.75, Lng: -73.98}}}}, time.Minute)
	}
	testkit.Eventually(t, 10*time.Second, func() (bool, string) {
		return inFlight.Load() > 0, "no position post reached the gateway"
	})
	d, err := p.Send(ctx, driver, push.RideStatusMessage(push.RideStatus{RideID: "ride-s", Status: "ACCEPTED", Version: 2}, time.Now()))
	if err != nil || d.Sockets != 1 || othersPosted.Load() != 1 {
		t.Fatalf("status push while positions are held: %+v, %v, %d posted; want 1 socket, no error", d, err, othersPosted.Load())
	}
	released = true
	close(release)
	testkit.Eventually(t, 20*time.Second, func() (bool, string) {
		shed := counterValue(t, "flagdown_push_positions_shed_total") - shed0
		return positionsPosted.Load()+int64(shed) == rides, fmt.Sprintf("%d positions posted + %.0f counted shed, want %d (none lost uncounted)", positionsPosted.Load(), shed, rides)
	})
	if got := maxInFlight.Load(); got > push.PositionPushers {
		t.Errorf("position posts in flight at once: %d, want at most the lane's %d pushers", got, push.PositionPushers)
	}
	if shed := counterValue(t, "flagdown_push_positions_shed_total") - shed0; shed == 0 {
		t.Errorf("no position was shed while the gateway held every post")
	}
}
