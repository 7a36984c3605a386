package redisstore_test

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// connectionCommands are the commands a client sends on its own (a new connection's handshake)
// and the test's own reads and resets: left out of the counts.
var connectionCommands = map[string]bool{"hello": true, "client|setinfo": true, "client": true, "ping": true,
	"config|resetstat": true, "config": true, "info": true, "select": true}

// commandCounts returns the calls of every command since the last CONFIG RESETSTAT (INFO
// commandstats: commands a script calls are counted too), without connectionCommands.
func commandCounts(t *testing.T, rdb *redis.Client) map[string]int {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		calls, _, _ := strings.Cut(rest, ",")
		n, err := strconv.Atoi(calls)
		if err != nil {
			t.Fatalf("commandstats line %q: %v", line, err)
		}
		if !connectionCommands[name] && n > 0 {
			out[name] = n
		}
	}
	return out
}

// TestOnePingTouchesExactlyItsBudget holds the per-ping budget by its commands, never by a timing:
// on a Redis of its own (so no other client's commands are counted), CONFIG RESETSTAT, one ping
// through ApplyPings, INFO commandstats. Each case lists every command the ping may run; any other
// command, or one more call, fails. docs/performance.md ("The per-ping budget") says what each buys.
func TestOnePingTouchesExactlyItsBudget(t *testing.T) {
	rdb := testkit.StartPrivateRedis(t).Client(t)
	ctx := context.Background()
	s := redisstore.New(rdb, "pb:{nyc}:", 30*time.Second, 55)
	s.PingsPerMin = 600
	at := time.Now().Add(-time.Minute)
	one := func(t *testing.T, id string, p dispatch.Point, at time.Time, st dispatch.DriverStatus) (redisstore.PingResult, map[string]int) {
		t.Helper()
		if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		res, err := s.ApplyPings(ctx, []redisstore.Ping{{DriverID: id, Position: p, At: at, Status: st}})
		if err != nil {
			t.Fatal(err)
		}
		return res[0], commandCounts(t, rdb)
	}
	// Load the script once, so no case counts a NOSCRIPT answer and the SCRIPT LOAD after it.
	if _, err := s.ApplyPings(ctx, []redisstore.Ping{{DriverID: "warm", Position: midtown, At: at, Status: dispatch.DriverAvailable}}); err != nil {
		t.Fatal(err)
	}
	check := func(t *testing.T, got, want map[string]int) {
		t.Helper()
		if !maps.Equal(got, want) {
			t.Errorf("commands of one ping = %v\nwant exactly          %v", got, want)
		}
	}
	// The work every applied ping does: the script call, Redis's clock, the driver's fields (his
	// budget among them), his offer lock, the heartbeat, his hash written, and his entry in the
	// heartbeat index P hbidx (the population the offline brake counts). His hash's expiry is
	// renewed (PEXPIRE) only when it has grown stale, not by a steady driver's ping.
	base := func(extra map[string]int) map[string]int {
		m := map[string]int{"evalsha": 1, "time": 1, "hmget": 1, "get": 1, "set": 1, "hset": 1, "zadd": 1}
		maps.Copy(m, extra)
		return m
	}

	t.Run("first ping of a driver: indexes his new heartbeat, places him", func(t *testing.T) {
		res, got := one(t, "d-1", midtown, at, dispatch.DriverAvailable)
		if !res.Applied {
			t.Fatalf("ping = %+v, want applied", res)
		}
		check(t, got, base(map[string]int{"zadd": 2, "geoadd": 1, "pexpire": 1}))
		// The keys it left: the driver's hash and heartbeat, the GEO set, the deadline index and the
		// heartbeat index;
		// no key of a rate limiter (the budget is a field of the hash).
		keys, err := rdb.Keys(ctx, "*").Result()
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(keys)
		want := []string{"pb:{nyc}:deadlines", "pb:{nyc}:driver:d-1", "pb:{nyc}:driver:warm", "pb:{nyc}:geo:available",
			"pb:{nyc}:hb:d-1", "pb:{nyc}:hb:warm", "pb:{nyc}:hbidx"}
		if !slices.Equal(keys, want) {
			t.Errorf("keys after the first pings = %v, want %v", keys, want)
		}
		if rl, err := rdb.HGet(ctx, "pb:{nyc}:driver:d-1", "rl").Result(); err != nil || rl == "" {
			t.Errorf("field rl of the driver hash = %q, %v; want his budget's arrival time", rl, err)
		}
	})
	t.Run("available driver alive: no index write, only his new position", func(t *testing.T) {
		res, got := one(t, "d-1", dropoff, at.Add(time.Minute), dispatch.DriverAvailable)
		if !res.Applied {
			t.Fatalf("ping = %+v, want applied", res)
		}
		check(t, got, base(map[string]int{"geoadd": 1}))
	})
	t.Run("driver turning paused: taken out of the available set once", func(t *testing.T) {
		_, got := one(t, "d-1", dropoff, at.Add(2*time.Minute), dispatch.DriverPaused)
		check(t, got, base(map[string]int{"zrem": 1}))
	})
	t.Run("paused driver alive: no available-set command", func(t *testing.T) {
		_, got := one(t, "d-1", dropoff, at.Add(3*time.Minute), dispatch.DriverPaused)
		check(t, got, base(nil))
	})
	t.Run("stale ping: heartbeat and budget only", func(t *testing.T) {
		res, got := one(t, "d-1", dropoff, at, dispatch.DriverPaused)
		if res.Rejected != "stale" {
			t.Fatalf("ping = %+v, want stale", res)
		}
		check(t, got, base(nil))
	})
	t.Run("expiry grown stale: renewed once", func(t *testing.T) {
		// Field xp says the hash expires in 23 h: more than a minute short of DriverStateTTL (24 h).
		if err := rdb.HSet(ctx, "pb:{nyc}:driver:d-1", "xp", strconv.FormatInt(time.Now().Add(23*time.Hour).UnixMilli(), 10)).Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.PExpire(ctx, "pb:{nyc}:driver:d-1", 23*time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		_, got := one(t, "d-1", dropoff, at.Add(3*time.Minute+time.Second), dispatch.DriverPaused)
		check(t, got, base(map[string]int{"pexpire": 1}))
		if ttl := rdb.PTTL(ctx, "pb:{nyc}:driver:d-1").Val(); ttl < 23*time.Hour+59*time.Minute {
			t.Errorf("hash TTL after the renewing ping = %v, want about 24h", ttl)
		}
		_, got = one(t, "d-1", dropoff, at.Add(3*time.Minute+2*time.Second), dispatch.DriverPaused)
		check(t, got, base(nil))
	})
	t.Run("a batch of pings: one script call and one clock read for all", func(t *testing.T) {
		if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		var pings []redisstore.Ping
		for i := range 3 {
			pings = append(pings, redisstore.Ping{DriverID: "d-1", Position: dropoff, At: at.Add(3*time.Minute + time.Duration(3+i)*time.Second), Status: dispatch.DriverPaused})
		}
		res, err := s.ApplyPings(ctx, pings)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range res {
			if !r.Applied {
				t.Errorf("ping %d = %+v, want applied", i, r)
			}
		}
		check(t, commandCounts(t, rdb), map[string]int{"evalsha": 1, "time": 1, "hmget": 3, "get": 3, "set": 3, "hset": 3, "zadd": 3})
	})
	t.Run("more pings than one call takes: one call per hundred, answers in order", func(t *testing.T) {
		if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		var pings []redisstore.Ping
		for i := range 250 {
			st := dispatch.DriverAvailable
			if i%2 == 1 {
				st = dispatch.DriverPaused
			}
			pings = append(pings, redisstore.Ping{DriverID: "m-" + strconv.Itoa(i), Position: midtown, At: at, Status: st})
		}
		res, err := s.ApplyPings(ctx, pings)
		if err != nil {
			t.Fatal(err)
		}
		if len(res) != len(pings) {
			t.Fatalf("%d results for %d pings", len(res), len(pings))
		}
		for i, r := range res {
			if !r.Applied || r.Status != pings[i].Status {
				t.Fatalf("ping %d (%s) = %+v, want applied with his status", i, pings[i].Status, r)
			}
		}
		if got := commandCounts(t, rdb); got["evalsha"] != 3 || got["time"] != 3 {
			t.Errorf("250 pings ran %d script calls and %d clock reads, want 3 and 3", got["evalsha"], got["time"])
		}
	})
	t.Run("ping past the budget: read, refused, nothing written", func(t *testing.T) {
		if err := rdb.HSet(ctx, "pb:{nyc}:driver:d-1", "rl", strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)).Err(); err != nil {
			t.Fatal(err)
		}
		res, got := one(t, "d-1", dropoff, at.Add(4*time.Minute), dispatch.DriverPaused)
		if res.Rejected != redisstore.RejectedRateLimited || res.RetryAfter < 59*time.Minute {
			t.Fatalf("ping = %+v, want rate_limited with a retry of about an hour", res)
		}
		check(t, got, map[string]int{"evalsha": 1, "time": 1, "hmget": 1})
	})
}
