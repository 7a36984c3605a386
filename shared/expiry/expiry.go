// Package expiry is flagdown's expiry source: it turns the expiry of flagdown's timed Redis keys
// (heartbeats P hb:{driver}, offer timers P offertimer:{offer}, retry timers P retry:{ride}, batch
// timers P batch:{name}:{opened}; see redisstore.ParseTimedKey) into io.flagdown.redis.key.expired.v1 CloudEvents on the broker, so that
// every timeout is acted on within about one sweep interval (200 ms by default, well within the 1 s
// goal) of its deadline.
//
// # Two paths, one effect
//
// Redis publishes an "expired" keyevent only when it actually deletes a key: lazily when the key is
// touched, or when its active expiry cycle happens to sample it; with many keys carrying a TTL that
// can be tens of seconds late. Pub/Sub also drops every event published while a subscriber is away.
// So the writers index each timed key's deadline (unix ms) in the sorted set P deadlines, and the
// source runs two paths:
//
//   - the subscriber listens on __keyevent@<db>__:expired (CONFIG SET notify-keyspace-events to
//     include Ex at start if needed). For a timed key it reads the indexed deadline D, then checks
//     that the key was not re-created meanwhile (a fresh ping: its own expiry will come), and
//     publishes;
//   - the sweeper, every Options.SweepInterval, takes the overdue entries of P deadlines (score <=
//     Redis's clock) and sends PEXPIRETIME for each in one pipelined round trip. Touching a key that
//     is logically expired makes Redis delete it now, so the notification fires on time. A key found
//     absent is published by the sweeper itself (Swept: true) — a notification still on its way or
//     one that was lost; a live key with a later expire time gets its score corrected; a key
//     without TTL any more is dropped from the index.
//
// Both paths use the same event id, a UUIDv5 of (key, D) (see EventID), and the fixed source
// /flagdown/expiry-source. D must be the same number on every path and in every copy, so it rests
// on three rules: the writers set a timed key's expiry with PXAT to the very deadline they index
// (never a relative PX, whose second clock read lands 1 ms later now and then); both paths read D
// from the index (or its tombstone) only after they saw the key gone, the sweeper included, so a
// deadline read while the key still lived is never used; and the sweeper's correction of an entry
// to a later expire time is one script that first checks the key still lives with that expire
// time, so an entry never changes once its key is gone. The broker publishes with the id as Nats-Msg-Id, so JetStream stores one
// event per expiry, and consumers are idempotent on (source, id) beyond the duplicate window. That
// is also why several copies of the source may run at once (production may run two for
// availability): each expiry still has one effect. Only a key without an indexed deadline (D = 0,
// not written by flagdown's scripts) gets a random id.
//
// After a successful publish the entry is removed from P deadlines only if its score is still D
// (compare-and-ZREM in a script, so a re-armed timer keeps its new deadline), and D is remembered for
// broker.DuplicateWindow in the tombstone set {P deadlines}:fired, so a copy that reads the index
// just after another removed it still computes the same id.
//
// # Loss
//
// When the subscription drops (network, Redis restart, CLIENT KILL) the source re-subscribes with
// exponential backoff, logs the gap (from loss to re-subscription) as a warning and counts it in
// Stats (Reconnects, GapSeconds). Notifications published during the gap are lost, but the sweeper
// publishes every indexed key that is gone, right after re-subscription and then every tick, and the
// reconcile function repairs anything that neither path saw (for instance an index lost with a Redis
// restart).
//
// # Redis Cluster
//
// Keyspace notifications are node-local, so with a *redis.ClusterClient the source configures and
// subscribes to every master (ForEachMaster) and re-checks the topology every
// Options.TopologyInterval, subscribing to new masters and dropping removed ones: after a failover
// the promoted replica is subscribed to (and configured) within about one interval, and expiries in
// between are the sweeper's. On a cluster the prefix carries the city's hash tag (e.g.
// "flagdown:{nyc}:", redisstore.CheckPrefix), so the deadline set, its tombstone set and every timed
// key of the city are on one shard; the sweeper reads that shard's clock (redisstore.Store.Now). The
// source listens on every master all the same, because which master holds the city changes with
// failovers and resharding, and several cities' sources share the cluster (each acts only on keys
// under its own prefix).
package expiry

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/shared/broker"
	"github.com/flagdown/flagdown/shared/cloudevent"
	"github.com/flagdown/flagdown/shared/internalauth"
	"github.com/flagdown/flagdown/shared/logging"
	"github.com/flagdown/flagdown/shared/metrics"
	"github.com/flagdown/flagdown/shared/redisstore"
	"github.com/flagdown/flagdown/shared/tracing"
)

// SourceURI is the CloudEvents source of every event the expiry source publishes, the same for every
// running copy so that consumers' (source, id) idempotency spans copies.
const SourceURI = "/flagdown/expiry-source"

// Defaults of Options.
const (
	// DefaultSweepInterval is the sweep period (FLAGDOWN_EXPIRY_SWEEP_INTERVAL's default), 200 ms.
	DefaultSweepInterval = 200 * time.Millisecond
	// DefaultSweepBatch is the most overdue entries one sweep round trip handles.
	DefaultSweepBatch = 1000
	// DefaultWorkers is the number of goroutines handling notifications.
	DefaultWorkers = 8
	// DefaultTopologyInterval is how often the Redis Cluster topology is re-checked, 5 s.
	DefaultTopologyInterval = 5 * time.Second
	// DefaultClientName is the CLIENT SETNAME of the subscriber connection.
	DefaultClientName = "flagdown-expiry-source"
)

// Publisher publishes one event, waiting for the broker's acknowledgement (broker.Broker.Publish).
type Publisher func(ctx context.Context, e event.Event) error

// Options tune a Source; zero values take the defaults.
type Options struct {
	// SweepInterval is the period of the deadline sweep (default 200 ms).
	SweepInterval time.Duration
	// SweepBatch is the most overdue entries read per sweep round trip (default 1000).
	SweepBatch int
	// Workers is the number of goroutines handling expired notifications (default 8).
	Workers int
	// TopologyInterval is how often a Redis Cluster's masters are re-listed (default 5 s).
	TopologyInterval time.Duration
	// NotificationsConfigured skips CONFIG GET/SET of notify-keyspace-events, for managed Redis
	// where CONFIG is disabled and the value (including Ex) is set by the provider.
	NotificationsConfigured bool
	// ClientName is the CLIENT SETNAME of the subscriber connection on a single node (default
	// "flagdown-expiry-source").
	ClientName string
	// Log receives warnings (reconnection gaps, publish failures); nil logs nothing.
	Log *slog.Logger
	// Keys sign every published event with the source's private key (internalauth.Signer.Sign: the
	// flagdownsig and flagdownkid extensions expiry-notification verifies). nil publishes unsigned
	// events, which consumers refuse; `flagdown expiry-source` and `flagdown dev` always set it.
	Keys *internalauth.Signer
}

// Stats are the source's counters since Run started.
type Stats struct {
	// Published counts events acknowledged by the broker (both paths; a JetStream duplicate counts).
	Published uint64
	// Swept counts the events among Published that the sweeper published.
	Swept uint64
	// Skipped counts notifications of timed keys re-created before they were handled.
	Skipped uint64
	// Touched counts overdue index entries the sweeper sent PEXPIRETIME for.
	Touched uint64
	// Reconnects counts re-subscriptions after a lost subscription.
	Reconnects uint64
	// GapSeconds is the total time in seconds without a subscription after one was lost.
	GapSeconds float64
	// Errors counts failed publishes and Redis errors of the handling paths.
	Errors uint64
	// Generations counts new Redis generations the health mark saw (the first sweep's included).
	Generations uint64
	// Gaps counts health gaps: sweeps later than HealthGap after the previous one.
	Gaps uint64
	// NotConfigured counts checks that found notify-keyspace-events without Ex although
	// Options.NotificationsConfigured says it is set.
	NotConfigured uint64
	// Brakes counts the health marks that engaged the offline brake (a mass lapse of drivers).
	Brakes uint64
}

// Source is the expiry source. Build it with New and call Run once.
type Source struct {
	rdb     redis.UniversalClient
	store   *redisstore.Store
	prefix  string
	dk, fk  string
	publish Publisher
	opt     Options
	log     *slog.Logger

	ready     chan struct{}
	readyOnce sync.Once
	kick      chan struct{}

	published, swept, skipped, touched, reconnects, errs atomic.Uint64
	generations, gaps, notConfigured, brakes             atomic.Uint64
	gapMicros                                            atomic.Int64

	// restart is checkRestart's state: the Redis run_id last seen and when it was read.
	restart struct {
		sync.Mutex
		runID string
		at    time.Time
	}

	// hook, nil outside tests, is called at the named points of the handling paths (see the hook*
	// constants) so that a test can hold one copy of the source there while another runs.
	hook func(point, key string)
}

// Points of the handling paths where Source.hook is called.
const (
	// hookSweepRead: the sweeper has read its overdue entries, before it touches their keys.
	hookSweepRead = "sweep:read"
	// hookSweepCorrect: the sweeper found key alive with a later expiry, before it corrects the index.
	hookSweepCorrect = "sweep:correct"
	// hookPublish: the deadline of key's expiry is decided, before the event is published.
	hookPublish = "publish"
)

// at calls the test hook, if any.
func (s *Source) at(point, key string) {
	if s.hook != nil {
		s.hook(point, key)
	}
}

// New returns a source over store's client, prefix and deadline set, publishing with publish.
func New(store *redisstore.Store, publish Publisher, opt Options) *Source {
	if opt.SweepInterval <= 0 {
		opt.SweepInterval = DefaultSweepInterval
	}
	if opt.SweepBatch <= 0 {
		opt.SweepBatch = DefaultSweepBatch
	}
	if opt.Workers <= 0 {
		opt.Workers = DefaultWorkers
	}
	if opt.TopologyInterval <= 0 {
		opt.TopologyInterval = DefaultTopologyInterval
	}
	if opt.ClientName == "" {
		opt.ClientName = DefaultClientName
	}
	log := opt.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dk := store.DeadlinesKey()
	return &Source{
		rdb: store.Client(), store: store, prefix: store.Prefix(), dk: dk, fk: firedKey(dk),
		publish: publish, opt: opt, log: log,
		ready: make(chan struct{}), kick: make(chan struct{}, 1),
	}
}

// Ready is closed once the subscription is confirmed: on a Redis Cluster, the subscription of every
// master of the first topology read (tests wait on it).
func (s *Source) Ready() <-chan struct{} { return s.ready }

// Stats returns a snapshot of the counters.
func (s *Source) Stats() Stats {
	return Stats{
		Published: s.published.Load(), Swept: s.swept.Load(), Skipped: s.skipped.Load(),
		Touched: s.touched.Load(), Reconnects: s.reconnects.Load(),
		GapSeconds: float64(s.gapMicros.Load()) / 1e6, Errors: s.errs.Load(),
		Generations: s.generations.Load(), Gaps: s.gaps.Load(), NotConfigured: s.notConfigured.Load(),
		Brakes: s.brakes.Load(),
	}
}

// eventNamespace is the UUIDv5 namespace of deterministic event ids.
var eventNamespace = uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://github.com/flagdown/flagdown/expiry-source"))

// EventID is the id of the expired event of key with indexed deadline deadlineMs (unix ms): a UUIDv5
// of both when deadlineMs > 0, so every path and every copy computes the same id, and a random UUID
// when the deadline is unknown (0).
func EventID(key string, deadlineMs int64) string {
	if deadlineMs <= 0 {
		return uuid.NewString()
	}
	return uuid.NewSHA1(eventNamespace, []byte(key+"\n"+strconv.FormatInt(deadlineMs, 10))).String()
}

// EnsureNotifications makes every server behind rdb (each master of a cluster) publish keyevent
// expired notifications, keeping the flags already set (see the package doc). A server refusing
// CONFIG gives an error wrapping ErrNotificationsNotConfigured that says what to set.
func EnsureNotifications(ctx context.Context, rdb redis.UniversalClient, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	one := func(ctx context.Context, c *redis.Client) error {
		addr := c.Options().Addr
		before, _ := c.ConfigGet(ctx, "notify-keyspace-events").Result()
		v, err := ensureNode(ctx, c, addr)
		if err == nil && before["notify-keyspace-events"] != v {
			log.Info("expiry: enabled keyevent expired notifications", "redis", addr, "notify-keyspace-events", v)
		}
		return err
	}
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, one)
	case *redis.Client:
		return one(ctx, c)
	default:
		return fmt.Errorf("expiry: unsupported Redis client %T (want *redis.Client or *redis.ClusterClient)", rdb)
	}
}

// Run checks the notification config, then subscribes, handles notifications and sweeps until ctx
// ends. It returns the start-up error, or ctx's error once stopped; it logs Stats when it stops.
func (s *Source) Run(ctx context.Context) error {
	// The run_id before the setting is checked: a restart after this point is seen by the sweeper.
	s.checkRestart(ctx)
	if !s.opt.NotificationsConfigured {
		if err := EnsureNotifications(ctx, s.rdb, s.log); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	work := make(chan string, 4096)
	var wg sync.WaitGroup
	for range s.opt.Workers {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case key := <-work:
					s.handle(ctx, key, false)
				}
			}
		})
	}
	wg.Go(func() { s.sweepLoop(ctx) })
	switch c := s.rdb.(type) {
	case *redis.ClusterClient:
		wg.Go(func() { s.followCluster(ctx, c, work) })
	case *redis.Client:
		o := *c.Options()
		o.ClientName = s.opt.ClientName
		sub := redis.NewClient(&o)
		defer func() { _ = sub.Close() }()
		wg.Go(func() { s.subscribeLoop(ctx, sub, o.Addr, o.DB, work, s.markReady) })
	default:
		cancel()
		wg.Wait()
		return fmt.Errorf("expiry: unsupported Redis client %T", s.rdb)
	}
	<-ctx.Done()
	wg.Wait()
	st := s.Stats()
	s.log.Info("expiry source stopped", "published", st.Published, "swept", st.Swept, "skipped", st.Skipped,
		"touched", st.Touched, "reconnects", st.Reconnects, "gap_s", st.GapSeconds, "errors", st.Errors)
	return ctx.Err()
}

// markReady closes Ready (once).
func (s *Source) markReady() { s.readyOnce.Do(func() { close(s.ready) }) }

// subscribeLoop keeps one subscription to node c's expired channel, re-subscribing with backoff;
// subscribed runs after the first confirmed subscription.
func (s *Source) subscribeLoop(ctx context.Context, c *redis.Client, addr string, db int, work chan<- string, subscribed func()) {
	channel := fmt.Sprintf("__keyevent@%d__:expired", db)
	var lostAt time.Time
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		ps := c.Subscribe(ctx, channel)
		stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
		msg, err := ps.ReceiveTimeout(ctx, 5*time.Second)
		if err == nil {
			if _, ok := msg.(*redis.Subscription); !ok {
				err = fmt.Errorf("unexpected first message %T", msg)
			}
		}
		if err != nil {
			stop()
			_ = ps.Close()
			if ctx.Err() != nil {
				return
			}
			if lostAt.IsZero() {
				lostAt = time.Now()
			}
			s.log.Warn("expiry: subscribe failed, retrying", "redis", addr, "err", err, "backoff", backoff)
			sleep(ctx, backoff)
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		if !lostAt.IsZero() {
			gap := time.Since(lostAt)
			s.reconnects.Add(1)
			s.gapMicros.Add(gap.Microseconds())
			s.log.Warn("expiry: re-subscribed after a gap; the sweeper and reconcile repair what it lost",
				"redis", addr, "gap", gap)
			lostAt = time.Time{}
		}
		if subscribed != nil {
			subscribed()
			subscribed = nil
		}
		s.sweepNow()
		err = s.receive(ctx, ps, work)
		stop()
		_ = ps.Close()
		if ctx.Err() != nil {
			return
		}
		lostAt = time.Now()
		s.log.Warn("expiry: subscription lost", "redis", addr, "err", err)
	}
}

// receive reads messages until the connection fails, pinging when idle to detect dead connections.
func (s *Source) receive(ctx context.Context, ps *redis.PubSub, work chan<- string) error {
	pinged := false
	for {
		msg, err := ps.ReceiveTimeout(ctx, 5*time.Second)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && ctx.Err() == nil {
				if pinged {
					return fmt.Errorf("no answer to ping: %w", err)
				}
				pinged = true
				if err := ps.Ping(ctx); err != nil {
					return err
				}
				continue
			}
			return err
		}
		pinged = false
		if m, ok := msg.(*redis.Message); ok {
			select {
			case work <- m.Payload:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
}

// followCluster subscribes to every master of c and follows topology changes.
func (s *Source) followCluster(ctx context.Context, c *redis.ClusterClient, work chan<- string) {
	running := map[string]context.CancelFunc{}
	var wg sync.WaitGroup
	defer wg.Wait()
	var initial atomic.Int32 // subscriptions of the first topology not confirmed yet
	readPending := true      // no topology read yet
	check := func() {
		var mu sync.Mutex
		clients := map[string]*redis.Client{}
		err := c.ForEachMaster(ctx, func(_ context.Context, m *redis.Client) error {
			mu.Lock()
			clients[m.Options().Addr] = m
			mu.Unlock()
			return nil
		})
		if err != nil {
			s.log.Warn("expiry: list cluster masters", "err", err)
			return
		}
		addrs := make([]string, 0, len(clients))
		for a := range clients {
			addrs = append(addrs, a)
		}
		set := make(map[string]bool, len(running))
		for a := range running {
			set[a] = true
		}
		add, drop := diffMasters(set, addrs)
		first := readPending && len(add) > 0
		if first {
			readPending = false
			initial.Store(int32(len(add)))
		}
		for _, a := range drop {
			running[a]()
			delete(running, a)
			s.log.Info("expiry: master left, unsubscribed", "redis", a)
		}
		for _, a := range add {
			m := clients[a]
			if !s.opt.NotificationsConfigured {
				if _, err := ensureNode(ctx, m, a); err != nil {
					s.log.Error("expiry: new master without expired notifications", "redis", a, "err", err)
				}
			}
			mctx, cancel := context.WithCancel(ctx)
			running[a] = cancel
			var subscribed func()
			if first {
				subscribed = func() {
					if initial.Add(-1) == 0 {
						s.markReady()
					}
				}
			}
			wg.Go(func() { s.subscribeLoop(mctx, m, a, 0, work, subscribed) })
		}
	}
	check()
	t := time.NewTicker(s.opt.TopologyInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.ReloadState(ctx)
			check()
		}
	}
}

// lookup returns the indexed deadline of key (0 when unknown) and whether the key exists. The
// deadline is read first: a key re-created after that read is then seen as existing (skipped),
// never credited with the new incarnation's deadline.
func (s *Source) lookup(ctx context.Context, key string) (int64, bool, error) {
	pipe := s.rdb.Pipeline()
	live := pipe.ZScore(ctx, s.dk, key)
	fired := pipe.ZScore(ctx, s.fk, key)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return 0, false, err
	}
	var d int64
	if v, err := live.Result(); err == nil {
		d = int64(v)
	} else if v, err := fired.Result(); err == nil && time.Since(time.UnixMilli(int64(v))) < broker.DuplicateWindow {
		d = int64(v)
	}
	n, err := s.rdb.Exists(ctx, key).Result()
	return d, n == 1, err
}

// keyIDAttr is the log attribute of a timed key's id: ride_id for a retry timer, driver_id for a
// heartbeat or an offer lock.
func keyIDAttr(kind redisstore.KeyKind, id string) slog.Attr {
	if kind == redisstore.KindRetry {
		return logging.RideID(id)
	}
	return logging.DriverID(id)
}

// handle acts on one timed key seen gone: by its expired notification, or by the sweeper (swept).
// Both paths decide the event's deadline here, from the index (or its tombstone) read after the key
// was seen gone: the index of a key changes only while the key lives (a writer re-arming it, or
// the sweeper's correctScript, which checks the key's own expire time in the same atomic step), so every copy
// and every path reading it afterwards reads the same deadline, and computes the same event id.
func (s *Source) handle(ctx context.Context, key string, swept bool) {
	kind, id, ok := redisstore.ParseTimedKey(s.prefix, key)
	if !ok {
		return
	}
	d, exists, err := s.lookup(ctx, key)
	if err != nil {
		s.errs.Add(1)
		s.log.Warn("expiry: look up expired key (the sweeper will retry)", "key", key, keyIDAttr(kind, id), "err", err)
		return
	}
	if exists || (kind == redisstore.KindOfferLock && d == 0) {
		// An offer lock that is not indexed is exclusion only: the offer's own timer
		// (P offertimer:{offer}) is its timeout.
		s.skipped.Add(1)
		return
	}
	_ = s.emit(ctx, key, kind, id, d, swept)
}

// emit publishes the expired event of key and, once acknowledged, retires its index entry. The
// publishing is a "send <type>" span (the root of the timer's trace; a no-op when tracing is off)
// whose context the event carries in its traceparent attribute.
func (s *Source) emit(ctx context.Context, key string, kind redisstore.KeyKind, id string, d int64, swept bool) (err error) {
	data := events.RedisKeyExpiredData{Key: key, Kind: string(kind), ID: id, DeadlineMs: d, ObservedAt: time.Now().UTC(), Swept: swept}
	e, err := cloudevent.New(EventID(key, d), events.RedisKeyExpired, SourceURI, key, data, data.ObservedAt)
	if err != nil {
		s.errs.Add(1)
		return err
	}
	s.at(hookPublish, key)
	ctx, span := tracing.StartPublish(ctx, &e)
	defer func() { tracing.End(span, err) }()
	if s.opt.Keys != nil {
		err = s.opt.Keys.Sign(&e)
	}
	if err != nil {
		s.errs.Add(1)
		return err
	}
	for attempt := 0; ; attempt++ {
		if err = s.publish(ctx, e); err == nil || attempt == 2 || ctx.Err() != nil {
			break
		}
		sleep(ctx, time.Duration(50<<attempt)*time.Millisecond)
	}
	if err != nil {
		s.errs.Add(1)
		s.log.Warn("expiry: publish failed (the sweeper retries indexed keys)", "key", key, keyIDAttr(kind, id), "err", err)
		return err
	}
	s.published.Add(1)
	if swept {
		s.swept.Add(1)
	}
	if d > 0 {
		if err := retireScript.Run(ctx, s.rdb, []string{s.dk, s.fk}, key, d, broker.DuplicateWindow.Milliseconds()).Err(); err != nil {
			s.errs.Add(1)
			s.log.Warn("expiry: retire deadline", "key", key, keyIDAttr(kind, id), "err", err)
		}
	}
	return nil
}

// The scripts, one .lua file each under scripts/ (each names its KEYS and ARGV in its header).
var (
	//go:embed scripts/retire.lua
	retireLua string
	//go:embed scripts/correct.lua
	correctLua string
	//go:embed scripts/drop.lua
	dropLua string

	// retireScript retires a published expiry's index entry and tombstones its deadline.
	retireScript = redis.NewScript(retireLua)
	// correctScript moves an entry to its live key's later expire time.
	correctScript = redis.NewScript(correctLua)
	// dropScript is compare-and-ZREM of an entry.
	dropScript = redis.NewScript(dropLua)
)

// sweepNow asks the sweeper for an immediate round (after a re-subscription).
func (s *Source) sweepNow() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func (s *Source) sweepLoop(ctx context.Context) {
	t := time.NewTicker(s.opt.SweepInterval)
	defer t.Stop()
	var lastTrim time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.kick:
		}
		for range 10 { // drain a backlog, a bounded number of batches per tick
			n, err := s.Sweep(ctx)
			if err != nil {
				if ctx.Err() == nil {
					s.errs.Add(1)
					s.log.Warn("expiry: sweep", "err", err)
				}
				break
			}
			if n < s.opt.SweepBatch {
				break
			}
		}
		if time.Since(lastTrim) > time.Second {
			lastTrim = time.Now()
			cut := time.Now().Add(-broker.DuplicateWindow).UnixMilli()
			_ = s.rdb.ZRemRangeByScore(ctx, s.fk, "-inf", strconv.FormatInt(cut, 10)).Err()
		}
	}
}

// HealthGap is the gap threshold of the health mark for a sweep period: max(1 s, 5 periods). A
// sweep later than that after the previous one means Redis, or the sweeper, was away, and opens a
// new healthy period in which liveness decisions wait a heartbeat TTL (redisstore lapse.lua).
func HealthGap(sweep time.Duration) time.Duration { return max(time.Second, 5*sweep) }

// noteHealth counts and logs what the health mark saw.
func (s *Source) noteHealth(ctx context.Context, h redisstore.Health) {
	switch h.Event {
	case redisstore.HealthNewGeneration:
		s.generations.Add(1)
		metrics.RedisGenerations.Inc()
		// Loud: everything Redis held (heartbeats, offer locks, timers, assignments) is gone
		// unless the mark was missing for another reason (a first start, a failover to a replica
		// that never had it); reconcile rebuilds it from PostgreSQL.
		s.log.Error("expiry: NEW REDIS GENERATION (restarted without its data, flushed, or failed over): "+
			"liveness decisions wait a heartbeat TTL, reconcile rebuilds assignments from PostgreSQL",
			"generation", h.Generation, "redis", redisstore.Addr(s.rdb))
		s.onNewGeneration(ctx)
	case redisstore.HealthGap:
		s.gaps.Add(1)
		s.log.Warn("expiry: Redis health gap (Redis or the sweeper was away): liveness decisions wait a heartbeat TTL",
			"since", h.Since)
	}
	switch h.BrakeChange {
	case redisstore.BrakeEngaged:
		s.brakes.Add(1)
		s.log.Error("expiry: offline brake engaged: an abnormal share of drivers lapsed together (a platform fault?); "+
			"nobody is taken offline until the share is normal again", "lapsing", h.Lapsing, "population", h.Population)
	case redisstore.BrakeReleased:
		s.log.Warn("expiry: offline brake released: drivers it held get a heartbeat TTL to ping before any offline decision",
			"lapsing", h.Lapsing, "population", h.Population)
	}
	if h.Brake {
		metrics.OfflineBrakeEngaged.Set(1)
	} else {
		metrics.OfflineBrakeEngaged.Set(0)
	}
}

// Sweep runs one sweep round: it marks Redis healthy (redisstore.Store.MarkHealthy: a new generation
// or a gap is counted and logged), reads up to SweepBatch overdue entries of the deadline set (by
// Redis's clock), touches their keys with PEXPIRETIME in one pipelined round trip and acts on the
// answers (see the package doc). It returns the number of overdue entries read.
func (s *Source) Sweep(ctx context.Context) (int, error) {
	h, err := s.store.MarkHealthy(ctx, HealthGap(s.opt.SweepInterval))
	if err != nil {
		return 0, err
	}
	s.noteHealth(ctx, h)
	s.checkRestart(ctx)
	now := h.Now
	overdue, err := s.rdb.ZRangeByScoreWithScores(ctx, s.dk, &redis.ZRangeBy{
		Min: "-inf", Max: strconv.FormatInt(now.UnixMilli(), 10), Count: int64(s.opt.SweepBatch),
	}).Result()
	if err != nil || len(overdue) == 0 {
		return 0, err
	}
	s.at(hookSweepRead, "")
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(overdue))
	for i, z := range overdue {
		cmds[i] = pipe.Do(ctx, "PEXPIRETIME", z.Member)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, err
	}
	s.touched.Add(uint64(len(overdue)))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	fix := s.rdb.Pipeline()
	for i, z := range overdue {
		key, _ := z.Member.(string)
		d := int64(math.Round(z.Score))
		at, err := cmds[i].Int64()
		if err != nil {
			continue
		}
		_, _, ok := redisstore.ParseTimedKey(s.prefix, key)
		switch {
		case at > 0:
			s.at(hookSweepCorrect, key)
			correctScript.EvalSha(ctx, fix, []string{s.dk, key}, key, at)
		case at == -1 || !ok:
			dropScript.EvalSha(ctx, fix, []string{s.dk}, key, d)
		default: // -2: gone; its deadline is read again after this sighting (see handle)
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				s.handle(ctx, key, true)
			})
		}
	}
	wg.Wait()
	if fix.Len() > 0 {
		if _, err := redisstore.ExecScripts(ctx, s.rdb, fix, correctScript, dropScript); err != nil && !errors.Is(err, redis.Nil) {
			return len(overdue), err
		}
	}
	return len(overdue), nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
