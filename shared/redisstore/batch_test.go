package redisstore_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/flagdown/flagdown/shared/redisstore"
)

func TestParseTimedKeyKinds(t *testing.T) {
	for key, want := range map[string]struct {
		kind redisstore.KeyKind
		id   string
		ok   bool
	}{
		"p:hb:d1":         {redisstore.KindHeartbeat, "d1", true},
		"p:offer:d1":      {redisstore.KindOfferLock, "d1", true},
		"p:retry:r1":      {redisstore.KindRetry, "r1", true},
		"p:batch:city":    {redisstore.KindBatch, "city", true},
		"p:batchq:city":   {"", "", false},
		"p:batchrun:c:12": {"", "", false},
		"p:batch:":        {"", "", false},
		"q:batch:city":    {"", "", false},
	} {
		kind, id, ok := redisstore.ParseTimedKey("p:", key)
		if kind != want.kind || id != want.id || ok != want.ok {
			t.Errorf("ParseTimedKey(%q) = %q, %q, %v; want %q, %q, %v", key, kind, id, ok, want.kind, want.id, want.ok)
		}
	}
}

func TestBatchJoinAndClaim(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	armed, err := s.JoinBatch(ctx, "city", []string{"r1", "r2"}, 5*time.Second)
	if err != nil || !armed {
		t.Fatalf("first join: armed %v, %v", armed, err)
	}
	if armed, err = s.JoinBatch(ctx, "city", []string{"r3", "r1"}, 5*time.Second); err != nil || armed {
		t.Fatalf("join while armed: armed %v, %v; want the window already open", armed, err)
	}
	deadline, err := s.BatchTimerDeadline(ctx, "city")
	if err != nil || deadline == 0 {
		t.Fatalf("deadline %d, %v", deadline, err)
	}
	waiting, on, err := s.BatchWaiting(ctx, "city")
	if err != nil || !on || len(waiting) != 3 {
		t.Fatalf("waiting %v armed %v, %v", waiting, on, err)
	}
	c, err := s.ClaimBatch(ctx, "city", deadline)
	if err != nil || !c.New || c.Done {
		t.Fatalf("claim %+v, %v", c, err)
	}
	slices.Sort(c.RideIDs)
	if !slices.Equal(c.RideIDs, []string{"r1", "r2", "r3"}) {
		t.Fatalf("claimed %v", c.RideIDs)
	}
	// A ride joining now waits for the next window; claiming the same window again returns the
	// first claim, not the new ride.
	if _, err := s.JoinBatch(ctx, "city", []string{"r4"}, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	again, err := s.ClaimBatch(ctx, "city", deadline)
	if err != nil || again.New || len(again.RideIDs) != 3 || slices.Contains(again.RideIDs, "r4") {
		t.Fatalf("second claim %+v, %v", again, err)
	}
	if err := s.FinishBatch(ctx, "city", deadline); err != nil {
		t.Fatal(err)
	}
	if done, ok, err := s.PeekBatchClaim(ctx, "city", deadline); err != nil || !ok || !done.Done {
		t.Fatalf("after finish: %+v %v %v", done, ok, err)
	}
	next, err := s.ClaimBatch(ctx, "city", deadline+1)
	if err != nil || !next.New || !slices.Equal(next.RideIDs, []string{"r4"}) {
		t.Fatalf("next window %+v, %v", next, err)
	}
	empty, err := s.ClaimBatch(ctx, "city", deadline+2)
	if err != nil || !empty.New || len(empty.RideIDs) != 0 {
		t.Fatalf("empty window %+v, %v", empty, err)
	}
}
