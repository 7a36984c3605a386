package redisstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flagdown/flagdown/shared/dispatch"
)

// TestTimedKeysExpireAtTheirIndexedDeadline holds the rule the expiry source's event ids rest on:
// every writer of a timed key (heartbeat, offer lock, retry timer, batch timer) indexes in P
// deadlines exactly the unix ms at which Redis will expire the key (PEXPIRETIME), for every write.
// A writer that sets a relative TTL (PX) reads the clock a second time and lands 1 ms after the
// indexed deadline now and then (about 3 % of writes on Redis 7.0); the sweeper then "corrects" the
// index while another copy still holds the old deadline, and one expiry gets two event ids.
func TestTimedKeysExpireAtTheirIndexedDeadline(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	rdb := s.Client()
	const writes = 300
	check := func(t *testing.T, key string) {
		t.Helper()
		at, err := rdb.Do(ctx, "PEXPIRETIME", key).Int64()
		if err != nil {
			t.Fatal(err)
		}
		d, err := rdb.ZScore(ctx, s.DeadlinesKey(), key).Result()
		if err != nil {
			t.Fatalf("%s not indexed: %v", key, err)
		}
		if at != int64(d) {
			t.Fatalf("%s expires at %d but its indexed deadline is %d", key, at, int64(d))
		}
	}
	t.Run("heartbeat", func(t *testing.T) {
		start := time.Now()
		for i := range writes {
			id := fmt.Sprintf("hb%d", i)
			ping(t, s, id, midtown, start.Add(time.Duration(i)*time.Millisecond), dispatch.DriverAvailable)
			check(t, s.Prefix()+"hb:"+id)
		}
	})
	t.Run("offer lock", func(t *testing.T) {
		start := time.Now()
		for i := range writes {
			id := fmt.Sprintf("lock%d", i)
			ping(t, s, id, midtown, start, dispatch.DriverAvailable)
			ok, err := s.LockOffer(ctx, id, dispatch.LiveOffer{OfferID: "o" + id, RideID: "r" + id}, time.Minute)
			if err != nil || !ok {
				t.Fatalf("LockOffer = %v, %v", ok, err)
			}
			check(t, s.Prefix()+"offertimer:o"+id)
		}
	})
	t.Run("retry timer", func(t *testing.T) {
		for i := range writes {
			id := fmt.Sprintf("r%d", i)
			if err := s.SetRetryTimer(ctx, id, "1", time.Minute); err != nil {
				t.Fatal(err)
			}
			check(t, s.Prefix()+"retry:"+id)
		}
	})
	t.Run("batch timer", func(t *testing.T) {
		for i := range writes {
			name := fmt.Sprintf("b%d", i)
			if _, err := s.JoinBatch(ctx, name, []string{"r1"}, time.Minute); err != nil {
				t.Fatal(err)
			}
			keys, err := rdb.ZRange(ctx, s.DeadlinesKey(), 0, -1).Result()
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, k := range keys {
				if strings.HasPrefix(k, s.Prefix()+"batch:"+name+":") {
					check(t, k)
					found = true
				}
			}
			if !found {
				t.Fatalf("batch %s armed no indexed timer", name)
			}
		}
	})
}
