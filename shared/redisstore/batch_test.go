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
		"p:offertimer:o1": {redisstore.KindOfferTimer, "o1", true},
		"p:retry:r1":      {redisstore.KindRetry, "r1", true},
		"p:batch:city:17": {redisstore.KindBatch, "city:17", true},
		"p:batcharmed:c":  {"", "", false},
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

func TestBatchOfTimer(t *testing.T) {
	for id, want := range map[string]string{"city:17": "city", "a:b:5": "a:b", "city": "", "city:": "", ":5": "", "city:x": ""} {
		got, ok := redisstore.BatchOfTimer(id)
		if got != want || ok != (want != "") {
			t.Errorf("BatchOfTimer(%q) = %q, %v; want %q", id, got, ok, want)
		}
	}
}

// TestBatchWindowsHaveTheirOwnTimer: the ride arming the next window does not re-create the timer of
// the window that just closed (the expiry source would skip its expiry as a re-created key).
func TestBatchWindowsHaveTheirOwnTimer(t *testing.T) { testBatchWindowsHaveTheirOwnTimer(t, newStore) }

func testBatchWindowsHaveTheirOwnTimer(t *testing.T, newStore storeFunc) {
	ctx := context.Background()
	s := newStore(t)
	if _, err := s.JoinBatch(ctx, "city", []string{"r1"}, 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	first, _, err := s.BatchTimer(ctx, "city")
	if err != nil || first == "" {
		t.Fatalf("first timer %q, %v", first, err)
	}
	time.Sleep(50 * time.Millisecond) // the window's TTL passes
	if armed, err := s.JoinBatch(ctx, "city", []string{"r2"}, time.Minute); err != nil || !armed {
		t.Fatalf("join after the window closed: armed %v, %v", armed, err)
	}
	second, _, err := s.BatchTimer(ctx, "city")
	if err != nil || second == "" || second == first {
		t.Fatalf("second timer %q (first %q), %v; want a new key", second, first, err)
	}
	if n, err := s.Client().Exists(ctx, first).Result(); err != nil || n != 0 {
		t.Fatalf("the first window's timer exists again (%d, %v)", n, err)
	}
	if _, err := s.Client().ZScore(ctx, s.DeadlinesKey(), first).Result(); err != nil {
		t.Fatalf("the first window's deadline left the index: %v", err)
	}
}

func TestBatchJoinAndClaim(t *testing.T) { testBatchJoinAndClaim(t, newStore) }

func testBatchJoinAndClaim(t *testing.T, newStore storeFunc) {
	ctx := context.Background()
	s := newStore(t)
	armed, err := s.JoinBatch(ctx, "city", []string{"r1", "r2"}, 5*time.Second)
	if err != nil || !armed {
		t.Fatalf("first join: armed %v, %v", armed, err)
	}
	if armed, err = s.JoinBatch(ctx, "city", []string{"r3", "r1"}, 5*time.Second); err != nil || armed {
		t.Fatalf("join while armed: armed %v, %v; want the window already open", armed, err)
	}
	timer, deadline, err := s.BatchTimer(ctx, "city")
	if err != nil || deadline == 0 {
		t.Fatalf("timer %q deadline %d, %v", timer, deadline, err)
	}
	kind, id, ok := redisstore.ParseTimedKey(s.Prefix(), timer)
	if name, isBatch := redisstore.BatchOfTimer(id); !ok || kind != redisstore.KindBatch || !isBatch || name != "city" {
		t.Fatalf("timer key %q parses as %q %q %v", timer, kind, id, ok)
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
