package redisstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// A store opened through a redis+sentinel:// URL follows a Sentinel failover by itself: after
// SENTINEL FAILOVER promotes the replica, the same *redisstore.Store (same client, never reopened)
// writes to the promoted replica and reads there both what it wrote before the failover (which the
// replica held by replication) and what it writes after. It runs on a private primary, replica and
// Sentinel (testkit.StartRedisSentinel), never on the shared Redis.
func TestSentinelStoreFollowsFailover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sent := testkit.StartRedisSentinel(t)
	url := fmt.Sprintf("%s://%s/%s", redisstore.SentinelScheme, sent.SentinelAddr, sent.Master)
	rdb, err := redisstore.Open(ctx, url)
	if err != nil {
		t.Fatalf("Open(%s): %v", url, err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	prefix := "sentinel:" + testkit.ID() + ":"
	s := redisstore.New(rdb, prefix, 30*time.Second, 55)

	start := time.Now().Add(-time.Minute)
	before := map[string]dispatch.Point{
		"d-1": midtown,
		"d-2": soho,
		"d-3": dropoff,
	}
	ids := []string{"d-1", "d-2", "d-3"}
	var pings []redisstore.Ping
	for _, id := range ids {
		pings = append(pings, redisstore.Ping{DriverID: id, Position: before[id], At: start, Status: dispatch.DriverAvailable})
	}
	applyAll(t, s, pings)
	wantPositions(t, "before the failover", s, ids, before)

	// The replica holds the drivers' state before the failover (read through a store over a
	// direct client of the replica), so what the promoted replica shows later is replicated data.
	onReplica := redisstore.New(sent.Replica.Client(t), prefix, 30*time.Second, 55)
	testkit.Eventually(t, 30*time.Second, func() (bool, string) {
		got, err := onReplica.DriverPositions(ctx, ids)
		return samePositions(got, ids, before), fmt.Sprintf("replica %s holds the drivers' positions: %v, %v", sent.Replica.Addr, fmtPoints(got), err)
	})

	sent.Failover(t)
	testkit.Eventually(t, 60*time.Second, func() (bool, string) {
		a := sent.MasterAddr(t)
		return a == sent.Replica.Addr, fmt.Sprintf("the Sentinel names the replica %s as master, not %q", sent.Replica.Addr, a)
	})

	// The client learns the switch from the Sentinel (+switch-master) and drops its connections to
	// the former primary. Until then its writes may fail, or still land on the former primary
	// (which takes writes until the Sentinel turns it into a replica, and then drops them): wait
	// until a ping through the same store reaches the promoted replica, a probe driver per try.
	onPromoted := redisstore.New(sent.Replica.Client(t), prefix, 30*time.Second, 55)
	tries := 0
	testkit.Eventually(t, 60*time.Second, func() (bool, string) {
		tries++
		probe := fmt.Sprintf("probe-%d", tries)
		res, err := s.ApplyPings(ctx, []redisstore.Ping{{DriverID: probe, Position: midtown, At: start, Status: dispatch.DriverAvailable}})
		if err != nil || len(res) != 1 || !res[0].Applied {
			return false, fmt.Sprintf("ping %d through the same store after the failover is applied: %+v, %v", tries, res, err)
		}
		got, err := onPromoted.DriverPositions(ctx, []string{probe})
		return err == nil && len(got) == 1 && got[0] != nil, fmt.Sprintf("ping %d through the same store reaches the promoted replica %s: %v, %v",
			tries, sent.Replica.Addr, fmtPoints(got), err)
	})
	t.Logf("%d probe pings until the store wrote to the promoted replica", tries)

	// Data replicated before the failover is still there, read through the same store.
	wantPositions(t, "after the failover, replicated", s, ids, before)

	// Writes succeed and reads see them: d-1 moves (about 110 m in 30 s), d-4 comes online.
	after := map[string]dispatch.Point{
		"d-1": {Lat: midtown.Lat + 0.001, Lng: midtown.Lng},
		"d-2": soho,
		"d-3": dropoff,
		"d-4": {Lat: soho.Lat + 0.001, Lng: soho.Lng},
	}
	applyAll(t, s, []redisstore.Ping{
		{DriverID: "d-1", Position: after["d-1"], At: start.Add(30 * time.Second), Status: dispatch.DriverAvailable},
		{DriverID: "d-4", Position: after["d-4"], At: start.Add(30 * time.Second), Status: dispatch.DriverAvailable},
	})
	all := append(ids, "d-4")
	wantPositions(t, "after the failover, written", s, all, after)

	// The writes went to the promoted replica itself.
	if got, err := onPromoted.DriverPositions(ctx, all); err != nil || !samePositions(got, all, after) {
		t.Fatalf("positions on the promoted replica %s = %v, %v; want %v", sent.Replica.Addr, fmtPoints(got), err, after)
	}
}

// applyAll applies pings through s and fails t unless each one is applied.
func applyAll(t *testing.T, s *redisstore.Store, pings []redisstore.Ping) {
	t.Helper()
	res, err := s.ApplyPings(context.Background(), pings)
	if err != nil {
		t.Fatalf("ApplyPings: %v", err)
	}
	for i, r := range res {
		if !r.Applied || r.Status != dispatch.DriverAvailable {
			t.Fatalf("ping of %s = %+v, want applied, available", pings[i].DriverID, r)
		}
	}
}

// wantPositions fails t unless s reads each driver of ids at want[id].
func wantPositions(t *testing.T, when string, s *redisstore.Store, ids []string, want map[string]dispatch.Point) {
	t.Helper()
	got, err := s.DriverPositions(context.Background(), ids)
	if err != nil || !samePositions(got, ids, want) {
		t.Fatalf("%s: DriverPositions(%v) = %v, %v; want %v", when, ids, fmtPoints(got), err, want)
	}
}

// samePositions reports whether got (in the order of ids) holds want[id] for each driver.
func samePositions(got []*dispatch.Point, ids []string, want map[string]dispatch.Point) bool {
	if len(got) != len(ids) {
		return false
	}
	for i, id := range ids {
		if got[i] == nil || !near(*got[i], want[id]) {
			return false
		}
	}
	return true
}

func fmtPoints(ps []*dispatch.Point) string {
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteString(" ")
		}
		if p == nil {
			b.WriteString("nil")
		} else {
			fmt.Fprintf(&b, "(%.6f,%.6f)", p.Lat, p.Lng)
		}
	}
	return "[" + b.String() + "]"
}

// A Sentinel REDIS_URL with a wrong part is refused by Open before any connection, with an error
// naming the part and its rule.
func TestSentinelURLErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, url string
		want      []string
	}{
		{"NoMasterName", "redis+sentinel://127.0.0.1:26379", []string{"master name", "path"}},
		{"EmptyMasterName", "redis+sentinel://127.0.0.1:26379/", []string{"master name", "path"}},
		{"MasterNameWithSlash", "redis+sentinel://127.0.0.1:26379/a/b", []string{"master name", "path"}},
		{"NoHosts", "redis+sentinel:///mymaster", []string{"Sentinel address", "at least one", "host:port"}},
		{"NoHostsWithCredentials", "redis+sentinel://user:pw@/mymaster", []string{"Sentinel address", "at least one", "host:port"}},
		{"HostWithoutPort", "redis+sentinel://127.0.0.1/mymaster", []string{"Sentinel address", `"127.0.0.1"`, "host:port"}},
		{"DBNotANumber", "redis+sentinel://127.0.0.1:26379/mymaster?db=x", []string{"db", "database number", `"x"`}},
		{"DBNegative", "rediss+sentinel://127.0.0.1:26379/mymaster?db=-1", []string{"db", "database number", `"-1"`}},
		{"UnknownParameter", "redis+sentinel://127.0.0.1:26379/mymaster?dbx=1", []string{"unknown parameter", `"dbx"`, "only db"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb, err := redisstore.Open(context.Background(), tc.url)
			if err == nil {
				_ = rdb.Close()
				t.Fatalf("Open(%s) = nil error, want one naming %q", tc.url, tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Open(%s) error %q does not name %q", tc.url, err, w)
				}
			}
		})
	}
}

// A well-formed Sentinel REDIS_URL gives the Sentinels' addresses, the master name, the data
// nodes' credentials and database, and TLS for rediss+sentinel.
func TestSentinelURLParses(t *testing.T) {
	t.Parallel()
	opt, err := redisstore.ParseSentinelURL("rediss://app:s3cret@10.0.0.1:26379,10.0.0.2:26380/mymaster?db=3")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(opt.SentinelAddrs, ","); got != "10.0.0.1:26379,10.0.0.2:26380" {
		t.Errorf("SentinelAddrs = %s, want 10.0.0.1:26379,10.0.0.2:26380", got)
	}
	if opt.MasterName != "mymaster" || opt.DB != 3 || opt.Username != "app" || opt.Password != "s3cret" || opt.TLSConfig == nil {
		t.Errorf("options = master %q db %d user %q password %q TLS %v; want mymaster 3 app s3cret TLS",
			opt.MasterName, opt.DB, opt.Username, opt.Password, opt.TLSConfig != nil)
	}
	opt, err = redisstore.ParseSentinelURL("redis://127.0.0.1:26379/mymaster")
	if err != nil || opt.DB != 0 || opt.TLSConfig != nil {
		t.Errorf("redis+sentinel without db = %+v, %v; want db 0, no TLS", opt, err)
	}
}
