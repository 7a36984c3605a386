package expiry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/broker"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// received is one event seen on the broker subject (every publish, duplicates included).
type received struct {
	ID   string                     `json:"id"`
	Src  string                     `json:"source"`
	Subj string                     `json:"subject"`
	Data events.RedisKeyExpiredData `json:"data"`
	At   time.Time                  `json:"-"`
}

type env struct {
	rdb    redis.UniversalClient
	prefix string
	store  *redisstore.Store
	broker *broker.Broker
	mu     sync.Mutex
	seen   []received
}

func testLog(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// newEnv gives a test its Redis prefix, its own stream and subject prefix, and records every event
// published on the expired subject.
func newEnv(t testing.TB) *env {
	t.Helper()
	rdb, prefix := testkit.Redis(t)
	return newEnvOn(t, rdb, prefix)
}

// envFunc returns a new env; the tests taking one run against a single Redis (newEnv) and a Redis
// Cluster (newClusterEnv, cluster_test.go).
type envFunc = func(t testing.TB) *env

// newEnvOn is newEnv over rdb with keys under prefix.
func newEnvOn(t testing.TB, rdb redis.UniversalClient, prefix string) *env {
	t.Helper()
	url := testkit.NATS(t)
	id := testkit.ID()
	b, err := broker.Connect(context.Background(), url, "T_"+id, "t"+id+".events")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	e := &env{rdb: rdb, prefix: prefix, store: redisstore.New(rdb, prefix, 30*time.Second, 55), broker: b}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if _, err := nc.Subscribe(b.Subject(events.RedisKeyExpired), func(m *nats.Msg) {
		var r received
		if err := json.Unmarshal(m.Data, &r); err != nil {
			t.Errorf("bad event: %v", err)
			return
		}
		r.At = time.Now()
		e.mu.Lock()
		e.seen = append(e.seen, r)
		e.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Del(context.Background(), firedKey(e.store.DeadlinesKey())) })
	return e
}

// start runs a source until the test ends and waits for its subscription.
func (e *env) start(t testing.TB, opt Options) *Source {
	t.Helper()
	if opt.Log == nil {
		opt.Log = testLog(t)
	}
	s := New(e.store, e.broker.Publish, opt)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("source: %v", err)
		}
	})
	select {
	case <-s.Ready():
	case err := <-done:
		t.Fatalf("source stopped: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("source not subscribed after 10s")
	}
	return s
}

// setTimer sets a timed key to expire ttl from now and indexes that very deadline (SET PXAT, as
// flagdown's scripts do: the index score is the key's PEXPIRETIME).
func (e *env) setTimer(t testing.TB, key string, ttl time.Duration) int64 {
	t.Helper()
	d := time.Now().Add(ttl).UnixMilli()
	e.setTimerIndexed(t, key, d, d)
	return d
}

// setTimerIndexed sets a timed key to expire at expireMs but indexes it at indexMs (unix ms): an
// index behind the key's expiry is what a writer setting a relative TTL left (1 ms early now and
// then), or a key re-armed by a writer that did not index it.
func (e *env) setTimerIndexed(t testing.TB, key string, expireMs, indexMs int64) {
	t.Helper()
	pipe := e.rdb.TxPipeline()
	pipe.Set(context.Background(), key, "1", 0)
	pipe.PExpireAt(context.Background(), key, time.UnixMilli(expireMs))
	pipe.ZAdd(context.Background(), e.store.DeadlinesKey(), redis.Z{Score: float64(indexMs), Member: key})
	if _, err := pipe.Exec(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// waitGone waits until key has expired (EXISTS also makes Redis delete it then).
func (e *env) waitGone(t testing.TB, key string) {
	t.Helper()
	end := time.Now().Add(10 * time.Second)
	for e.rdb.Exists(context.Background(), key).Val() == 1 {
		if time.Now().After(end) {
			t.Fatalf("%s still exists after 10s", key)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// holdAt returns a hook that, the first time the source reaches point, signals reached and waits
// for release.
func holdAt(point string, reached, release chan struct{}) func(string, string) {
	var once sync.Once
	return func(p, _ string) {
		if p == point {
			once.Do(func() { close(reached); <-release })
		}
	}
}

// raceCopies returns two sources over e that are not running (the test drives their paths), and a
// key whose index entry is already due while the key lives for a minute more (expireNow ends it
// when the test says).
func raceCopies(t *testing.T, e *env, name string) (a, b *Source, key string) {
	t.Helper()
	a = New(e.store, e.broker.Publish, Options{Log: testLog(t)})
	b = New(e.store, e.broker.Publish, Options{Log: testLog(t)})
	key = e.prefix + "hb:" + name
	now := time.Now()
	e.setTimerIndexed(t, key, now.Add(time.Minute).UnixMilli(), now.Add(-time.Second).UnixMilli())
	return a, b, key
}

// expireNow makes key expire in 1 ms (Redis expires it as it would at its deadline) and waits
// until it is gone.
func (e *env) expireNow(t testing.TB, key string) {
	t.Helper()
	if err := e.rdb.PExpire(context.Background(), key, time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	e.waitGone(t, key)
}

// TestSweeperReadsTheDeadlineAfterTheKeyIsGone: copy A's sweeper reads the due entry and is held;
// copy B's sweeper finds the key alive and moves the entry to the key's expire time; the key
// expires; A, released, finds it gone, and B's notification path handles it too. Both must publish
// one event id: A may not use the deadline it read before it saw the key gone.
func TestSweeperReadsTheDeadlineAfterTheKeyIsGone(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a, b, key := raceCopies(t, e, "race-read")
	reached, release := make(chan struct{}), make(chan struct{})
	a.hook = holdAt(hookSweepRead, reached, release)
	done := make(chan error, 1)
	go func() { _, err := a.Sweep(ctx); done <- err }()
	<-reached
	if _, err := b.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	e.expireNow(t, key)
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	b.handle(ctx, key, false)
	if p := a.Stats().Published + b.Stats().Published; p != 2 {
		t.Fatalf("%d publishes, want 2 (one per copy)", p)
	}
	if n := e.stored(t); n != 1 {
		t.Fatalf("%d events stored for one expiry, want 1", n)
	}
}

// TestIndexIsNotCorrectedAfterTheKeyIsGone: copy A's sweeper finds the key alive with a later
// expire time and is held before it corrects the index; the key expires; copy B's notification
// path reads the deadline and is held before publishing; A's correction then lands and A's own
// notification path handles the key. A correction may not re-date a key that is already gone.
func TestIndexIsNotCorrectedAfterTheKeyIsGone(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a, b, key := raceCopies(t, e, "race-correct")
	aReached, aRelease := make(chan struct{}), make(chan struct{})
	a.hook = holdAt(hookSweepCorrect, aReached, aRelease)
	aDone := make(chan error, 1)
	go func() { _, err := a.Sweep(ctx); aDone <- err }()
	<-aReached
	e.expireNow(t, key)
	bReached, bRelease := make(chan struct{}), make(chan struct{})
	b.hook = holdAt(hookPublish, bReached, bRelease)
	bDone := make(chan struct{})
	go func() { b.handle(ctx, key, false); close(bDone) }()
	<-bReached
	close(aRelease)
	if err := <-aDone; err != nil {
		t.Fatal(err)
	}
	a.handle(ctx, key, false)
	close(bRelease)
	<-bDone
	if p := a.Stats().Published + b.Stats().Published; p != 2 {
		t.Fatalf("%d publishes, want 2 (one per copy)", p)
	}
	if n := e.stored(t); n != 1 {
		t.Fatalf("%d events stored for one expiry, want 1", n)
	}
}

// firstByKey returns the first event seen per key.
func (e *env) firstByKey() map[string]received {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[string]received{}
	for _, r := range e.seen {
		if _, ok := out[r.Data.Key]; !ok {
			out[r.Data.Key] = r
		}
	}
	return out
}

// waitKeys waits until an event was seen for every key.
func (e *env) waitKeys(t testing.TB, keys []string, within time.Duration) map[string]received {
	t.Helper()
	end := time.Now().Add(within)
	for {
		got := e.firstByKey()
		missing := 0
		for _, k := range keys {
			if _, ok := got[k]; !ok {
				missing++
			}
		}
		if missing == 0 {
			return got
		}
		if time.Now().After(end) {
			t.Fatalf("%d of %d keys without an event after %v", missing, len(keys), within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitStats waits until s's counters satisfy ok: a subscriber can see an event before the source's
// publish call has returned and counted it.
func waitStats(t testing.TB, s *Source, within time.Duration, ok func(Stats) bool) Stats {
	t.Helper()
	end := time.Now().Add(within)
	for {
		st := s.Stats()
		if ok(st) || time.Now().After(end) {
			return st
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stored counts the events stored in the stream (after JetStream's de-duplication).
func (e *env) stored(t testing.TB) uint64 {
	t.Helper()
	st, err := e.broker.JetStream().Stream(context.Background(), e.broker.Stream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func TestHeartbeatExpiryPublishesOneEvent(t *testing.T) {
	testHeartbeatExpiryPublishesOneEvent(t, newEnv)
}

func testHeartbeatExpiryPublishesOneEvent(t *testing.T, newEnv envFunc) {
	e := newEnv(t)
	s := e.start(t, Options{})
	key := e.prefix + "hb:d1"
	d := e.setTimer(t, key, 300*time.Millisecond)
	got := e.waitKeys(t, []string{key}, 5*time.Second)[key]
	// The deadline is d, or later when the SET reached Redis after d was computed (a loaded machine):
	// the sweeper then corrects the index to Redis's own expire time.
	if got.Data.Kind != string(redisstore.KindHeartbeat) || got.Data.ID != "d1" || got.Data.DeadlineMs < d || got.Data.DeadlineMs > d+2000 {
		t.Fatalf("event data %+v, want heartbeat d1 deadline %d (up to 2 s later)", got.Data, d)
	}
	if got.Subj != key || got.Src != SourceURI || got.ID != EventID(key, got.Data.DeadlineMs) {
		t.Fatalf("event subject %q source %q id %q", got.Subj, got.Src, got.ID)
	}
	time.Sleep(time.Second) // let any second publish (the other path) arrive
	if n := e.stored(t); n != 1 {
		t.Fatalf("%d events stored, want 1", n)
	}
	if n, _ := e.rdb.ZScore(context.Background(), e.store.DeadlinesKey(), key).Result(); n != 0 {
		t.Fatalf("deadline entry still indexed (%v)", n)
	}
	if st := waitStats(t, s, 5*time.Second, func(st Stats) bool { return st.Published > 0 }); st.Published == 0 {
		t.Fatalf("stats %+v", st)
	}
}

// fillBackground writes n keys with TTLs an hour away under the prefix, pipelined.
func fillBackground(t testing.TB, rdb redis.UniversalClient, prefix string, n int) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < n; i += 5000 {
		pipe := rdb.Pipeline()
		for j := i; j < min(n, i+5000); j++ {
			pipe.Set(ctx, fmt.Sprintf("%sbg:%d", prefix, j), "x", time.Hour+time.Duration(j)*time.Millisecond)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// lateness sets count timed keys with TTLs spread over 1..2 s and returns each one's lateness:
// first arrival on the broker minus its deadline.
func (e *env) lateness(t testing.TB, round, count int) []time.Duration {
	keys := make([]string, count)
	deadlines := map[string]int64{}
	for i := range keys {
		keys[i] = fmt.Sprintf("%soffer:r%d-d%d", e.prefix, round, i)
		ttl := time.Second + time.Duration(i)*time.Second/time.Duration(count)
		deadlines[keys[i]] = e.setTimer(t, keys[i], ttl)
	}
	got := e.waitKeys(t, keys, 30*time.Second)
	out := make([]time.Duration, 0, count)
	for _, k := range keys {
		out = append(out, got[k].At.Sub(time.UnixMilli(deadlines[k])))
	}
	slices.Sort(out)
	return out
}

func TestPrecisionUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("100k keys")
	}
	e := newEnv(t)
	fillBackground(t, e.rdb, e.prefix, 100_000)
	e.start(t, Options{})
	late := e.lateness(t, 0, 20)
	for _, l := range late {
		if l > 5*time.Second {
			t.Fatalf("an expiry was published %v after its deadline", l)
		}
	}
	t.Logf("lateness with 100k background TTL keys: min %v median %v max %v", late[0], late[len(late)/2], late[len(late)-1])
}

// BenchmarkExpiryLateness reports how late (ms after the deadline) expiries reach the broker with
// 100,000 background keys carrying TTLs: each round arms 200 timed keys with TTLs over 1..2 s.
func BenchmarkExpiryLateness(b *testing.B) {
	e := newEnv(b)
	fillBackground(b, e.rdb, e.prefix, 100_000)
	e.start(b, Options{})
	var all []time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		all = append(all, e.lateness(b, i, 200)...)
	}
	slices.Sort(all)
	b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50_ms")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99_ms")
	b.ReportMetric(float64(all[len(all)-1].Microseconds())/1000, "max_ms")
}

func TestIgnoresOtherKeys(t *testing.T) { testIgnoresOtherKeys(t, newEnv) }

func testIgnoresOtherKeys(t *testing.T, newEnv envFunc) {
	e := newEnv(t)
	s := e.start(t, Options{})
	ctx := context.Background()
	other := strings.TrimSuffix(e.prefix, ":") + "-other:hb:d9" // another application's key
	for _, k := range []string{other, e.prefix + "driver:d1", e.prefix + "ridepos:r1", e.prefix + "hb:"} {
		if err := e.rdb.Set(ctx, k, "x", 100*time.Millisecond).Err(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(150 * time.Millisecond)
	for _, k := range []string{other, e.prefix + "driver:d1", e.prefix + "ridepos:r1", e.prefix + "hb:"} {
		e.rdb.Exists(ctx, k) // make Redis delete them now: the notifications fire
	}
	sentinel := e.prefix + "retry:ride1"
	e.setTimer(t, sentinel, 200*time.Millisecond)
	e.waitKeys(t, []string{sentinel}, 5*time.Second)
	time.Sleep(300 * time.Millisecond)
	if got := e.firstByKey(); len(got) != 1 {
		t.Fatalf("events for %v, want only the retry timer", slices.Collect(mapsKeys(got)))
	}
	if st := waitStats(t, s, 5*time.Second, func(st Stats) bool { return st.Published > 0 }); st.Published == 0 {
		t.Fatalf("stats %+v", st)
	}
}

func mapsKeys(m map[string]received) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func TestRecreatedKeyIsSkipped(t *testing.T) { testRecreatedKeyIsSkipped(t, newEnv) }

func testRecreatedKeyIsSkipped(t *testing.T, newEnv envFunc) {
	e := newEnv(t)
	s := New(e.store, e.broker.Publish, Options{Log: testLog(t)})
	key := e.prefix + "hb:d2"
	e.setTimer(t, key, 30*time.Second) // re-created by a fresh ping before the notification is handled
	s.handle(context.Background(), key, false)
	if st := s.Stats(); st.Skipped != 1 || st.Published != 0 {
		t.Fatalf("stats %+v, want one skipped, none published", st)
	}
	// End to end: the key expires, is SET again at once; the old expiry must not be published
	// while the new key lives.
	e.start(t, Options{})
	key2 := e.prefix + "hb:d3"
	e.setTimer(t, key2, 200*time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	e.setTimer(t, key2, 30*time.Second)
	time.Sleep(time.Second)
	if _, ok := e.firstByKey()[key2]; ok {
		// Only acceptable if the old incarnation was deleted and published before the SET.
		t.Logf("old expiry of %s published before it was re-created (timing)", key2)
	}
	if n, err := e.rdb.ZScore(context.Background(), e.store.DeadlinesKey(), key2).Result(); err != nil || n == 0 {
		t.Fatalf("the re-created key's deadline was removed: %v %v", n, err)
	}
}

func TestSweeperPublishesMissedExpiry(t *testing.T) { testSweeperPublishesMissedExpiry(t, newEnv) }

func testSweeperPublishesMissedExpiry(t *testing.T, newEnv envFunc) {
	e := newEnv(t)
	key := e.prefix + "offer:d4"
	d := e.setTimer(t, key, 100*time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	e.rdb.Exists(context.Background(), key) // deleted now, while no source listens: notification lost
	s := e.start(t, Options{})
	got := e.waitKeys(t, []string{key}, 5*time.Second)[key]
	if !got.Data.Swept || got.Data.DeadlineMs != d || got.ID != EventID(key, d) {
		t.Fatalf("event %+v, want swept with deadline %d", got, d)
	}
	if st := waitStats(t, s, 5*time.Second, func(st Stats) bool { return st.Swept >= 1 }); st.Swept != 1 {
		t.Fatalf("stats %+v, want one swept", st)
	}
}

func TestTwoCopiesStoreOneEventPerExpiry(t *testing.T) {
	testTwoCopiesStoreOneEventPerExpiry(t, newEnv)
}

func testTwoCopiesStoreOneEventPerExpiry(t *testing.T, newEnv envFunc) {
	e := newEnv(t)
	e.start(t, Options{ClientName: "flagdown-expiry-test-a"})
	e.start(t, Options{ClientName: "flagdown-expiry-test-b"})
	var keys []string
	for i := range 10 {
		k := fmt.Sprintf("%shb:copy%d", e.prefix, i)
		keys = append(keys, k)
		e.setTimer(t, k, time.Duration(200+50*i)*time.Millisecond)
	}
	e.waitKeys(t, keys, 5*time.Second)
	time.Sleep(time.Second)
	e.mu.Lock()
	published := len(e.seen)
	e.mu.Unlock()
	if n := e.stored(t); n != 10 {
		t.Fatalf("%d events stored for 10 expiries (%d publishes)", n, published)
	}
	t.Logf("%d publishes, 10 stored", published)
}

func TestConfigRefusedNamesTheSetting(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	user := "flagdown-test-" + testkit.ID()
	if err := e.rdb.Do(ctx, "ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all", "-config").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.rdb.Do(context.Background(), "ACL", "DELUSER", user) })
	opt := *e.rdb.(*redis.Client).Options()
	opt.Username, opt.Password = user, "pw"
	limited := redis.NewClient(&opt)
	t.Cleanup(func() { _ = limited.Close() })
	s := New(redisstore.New(limited, e.prefix, 30*time.Second, 55), e.broker.Publish, Options{Log: testLog(t)})
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := s.Run(cctx)
	if !errors.Is(err, ErrNotificationsNotConfigured) || !strings.Contains(err.Error(), "notify-keyspace-events") ||
		!strings.Contains(err.Error(), "Ex") {
		t.Fatalf("Run = %v, want an error naming notify-keyspace-events and Ex", err)
	}
	t.Log(err)
}

func TestConfigKeepsExistingFlags(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	get := func() string {
		m, err := e.rdb.ConfigGet(ctx, "notify-keyspace-events").Result()
		if err != nil {
			t.Fatal(err)
		}
		return m["notify-keyspace-events"]
	}
	orig := get()
	t.Cleanup(func() {
		// Restore the original flags, but never remove Ex once set: other sources rely on it.
		f := parseFlags(orig)
		if hasExpiredEvents(get()) {
			f['E'], f['x'] = true, true
		}
		e.rdb.ConfigSet(context.Background(), "notify-keyspace-events", canonicalFlags(f))
	})
	f := parseFlags(orig)
	f['K'], f['g'] = true, true // only adds flags: Ex, if set, stays set
	if err := e.rdb.ConfigSet(ctx, "notify-keyspace-events", canonicalFlags(f)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := EnsureNotifications(ctx, e.rdb, testLog(t)); err != nil {
		t.Fatal(err)
	}
	got := parseFlags(get())
	for _, r := range "KgEx" {
		if !got[r] {
			t.Fatalf("notify-keyspace-events = %q after EnsureNotifications, want K, g, E and x", get())
		}
	}
}

func TestReconnectAfterClientKill(t *testing.T) {
	e := newEnv(t)
	name := "flagdown-expiry-test-" + testkit.ID()
	s := e.start(t, Options{ClientName: name})
	ctx := context.Background()
	list, err := e.rdb.ClientList(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	var id string
	for _, line := range strings.Split(list, "\n") {
		if strings.Contains(line, " name="+name+" ") {
			for _, f := range strings.Fields(line) {
				if v, ok := strings.CutPrefix(f, "id="); ok {
					id = v
				}
			}
		}
	}
	if id == "" {
		t.Fatalf("no client named %s in CLIENT LIST", name)
	}
	if err := e.rdb.Do(ctx, "CLIENT", "KILL", "ID", id).Err(); err != nil {
		t.Fatal(err)
	}
	end := time.Now().Add(10 * time.Second)
	for s.Stats().Reconnects == 0 {
		if time.Now().After(end) {
			t.Fatal("no re-subscription after CLIENT KILL")
		}
		time.Sleep(20 * time.Millisecond)
	}
	key := e.prefix + "hb:after-kill"
	e.setTimer(t, key, 200*time.Millisecond)
	e.waitKeys(t, []string{key}, 5*time.Second)
	if st := s.Stats(); st.Reconnects != 1 || st.GapSeconds <= 0 {
		t.Fatalf("stats %+v, want one reconnect with a gap", st)
	}
}

func TestFlags(t *testing.T) {
	for in, want := range map[string]string{
		"": "xE", "Kg": "gxKE", "AKE": "AKE", "KEA": "AKE", "Ex": "xE", "E": "xE", "x": "xE", "Km": "xKEm",
		"g$lshzetd": "AE", "xE": "xE", "Kn": "xnKE",
	} {
		if got := withExpiredEvents(in); got != want {
			t.Errorf("withExpiredEvents(%q) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]bool{"": false, "E": false, "x": false, "Ex": true, "AKE": true, "AK": false, "KEA": true, "gxE": true} {
		if got := hasExpiredEvents(in); got != want {
			t.Errorf("hasExpiredEvents(%q) = %v", in, got)
		}
	}
}

func TestDiffMasters(t *testing.T) {
	running := map[string]bool{"a:1": true, "b:1": true}
	add, drop := diffMasters(running, []string{"b:1", "c:1", "c:1", "d:1"})
	if !slices.Equal(add, []string{"c:1", "d:1"}) || !slices.Equal(drop, []string{"a:1"}) {
		t.Fatalf("add %v drop %v", add, drop)
	}
	add, drop = diffMasters(nil, []string{"a:1"})
	if !slices.Equal(add, []string{"a:1"}) || drop != nil {
		t.Fatalf("from nothing: add %v drop %v", add, drop)
	}
	add, drop = diffMasters(running, nil)
	if add != nil || !slices.Equal(drop, []string{"a:1", "b:1"}) {
		t.Fatalf("all gone: add %v drop %v", add, drop)
	}
}

func TestFiredKeySharesSlot(t *testing.T) {
	for dk, want := range map[string]string{
		"flagdown:deadlines":   "{flagdown:deadlines}:fired",
		"{flagdown}:deadlines": "{flagdown}:deadlines:fired",
		"a{}b:deadlines":       "{a{}b:deadlines}:fired",
	} {
		if got := firedKey(dk); got != want {
			t.Errorf("firedKey(%q) = %q, want %q", dk, got, want)
		}
	}
}

func TestEventID(t *testing.T) {
	if EventID("k", 5) != EventID("k", 5) || EventID("k", 5) == EventID("k", 6) || EventID("k", 5) == EventID("j", 5) {
		t.Fatal("deterministic ids must depend on key and deadline only")
	}
	if EventID("k", 0) == EventID("k", 0) {
		t.Fatal("ids of unknown deadlines must be random")
	}
}

// TestNotificationsReappliedAfterRestartKeepingData: Redis restarted at the same address with its
// data (SHUTDOWN SAVE, so the health mark and its generation survive) but from a configuration
// without notify-keyspace-events has lost the setting all the same; a source that owns it must
// apply it again.
func TestNotificationsReappliedAfterRestartKeepingData(t *testing.T) {
	r := testkit.StartPrivateRedis(t, "--notify-keyspace-events", "")
	rdb := r.Client(t)
	e := newEnvOn(t, rdb, "t"+testkit.ID()+":")
	s := e.start(t, Options{})
	notify := func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		m, err := rdb.ConfigGet(ctx, "notify-keyspace-events").Result()
		if err != nil {
			return "error: " + err.Error()
		}
		return m["notify-keyspace-events"]
	}
	if v := notify(); !hasExpiredEvents(v) {
		t.Fatalf("notify-keyspace-events = %q after start, want E and x", v)
	}
	gen := s.Stats().Generations
	r.RestartKeepingData(t, "--notify-keyspace-events", "")
	testkit.Eventually(t, 10*time.Second, func() (bool, string) {
		v := notify()
		return hasExpiredEvents(v), fmt.Sprintf("notify-keyspace-events = %q after a restart keeping the data (generations %d → %d)",
			v, gen, s.Stats().Generations)
	})
}
