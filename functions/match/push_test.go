package function_test

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
	"github.com/flagdown/flagdown/internal/testkit/fntest"
	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/metrics"
	"github.com/flagdown/flagdown/shared/push"
)

// The offer's fast push never holds the match: the match answers while the gateway still holds the
// post, and the post, once the gateway lets it through after that answer, is taken (the pusher
// counts it posted: it was not cut short by the match's answer or a timeout). A match worker
// waiting on a socket is a match worker not matching.
func TestOfferPushDoesNotHoldTheMatch(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var posted, cut atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.Contains(r.URL.Path, "/@connections/drv-1") {
			return
		}
		select {
		case <-release:
			posted.Add(1)
		case <-r.Context().Done():
			cut.Add(1)
		}
	}))
	t.Cleanup(srv.Close)
	released := false
	t.Cleanup(func() {
		if !released {
			close(release)
		}
	})
	env := fntest.NewEnv(t, nil)
	m, err := push.NewManagement(srv.URL+"/test", "us-east-1", credentials.NewStaticCredentialsProvider("AKIDTEST", "secret", ""), nil)
	if err != nil {
		t.Fatal(err)
	}
	env.D.PushManagement = m
	if _, err := env.D.Push().Registry.Register(context.Background(), push.User{Role: auth.RoleDriver, ID: "d-push"}, "drv-1"); err != nil {
		t.Fatal(err)
	}
	env.Ping(t, "d-push", fntest.Offset(pickup, 100, 0))
	ride := env.CreateRide(t, "r-push", pickup, dropoff)
	posted0 := pushPosted(t)
	if got := env.MatchRide(t, ride); got != "offered" {
		t.Fatalf("match outcome %q, want offered", got)
	}
	released = true
	close(release)
	testkit.Eventually(t, 10*time.Second, func() (bool, string) {
		n := pushPosted(t) - posted0
		return n == 1, fmt.Sprintf("offer pushes the pusher saw taken: %.0f, want 1 (gateway: %d taken, %d cut short)", n, posted.Load(), cut.Load())
	})
}

// pushPosted is flagdown_push_messages_total{result="posted"}: the posts the pusher saw taken.
func pushPosted(t *testing.T) float64 {
	t.Helper()
	mfs, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "flagdown_push_messages_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == "posted" {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
