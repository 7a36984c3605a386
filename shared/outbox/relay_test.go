package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/jackc/pgx/v5"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/broker"
	"github.com/flagdown/flagdown/shared/internalauth"
	"github.com/flagdown/flagdown/shared/outbox"
	"github.com/flagdown/flagdown/shared/pgstore"
)

// payload is the data of the test events: the ordering key and the row's rank within it.
type payload struct {
	Key string `json:"key"`
	N   int    `json:"n"`
}

func newBroker(t *testing.T) *broker.Broker {
	t.Helper()
	id := testkit.ID()
	b, err := broker.Connect(context.Background(), testkit.NATS(t), "T_"+strings.ToUpper(id), "t"+id+".events")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = b.JetStream().DeleteStream(context.Background(), b.Stream())
		_ = b.JetStream().DeleteStream(context.Background(), b.DLQStream())
		b.Close()
	})
	return b
}

// insert writes one outbox row per payload in one transaction.
func insert(t *testing.T, db *pgstore.DB, ps ...payload) []string {
	t.Helper()
	var ids []string
	err := db.Tx(context.Background(), func(tx pgx.Tx) error {
		for _, p := range ps {
			id, err := pgstore.InsertOutbox(context.Background(), tx, pgstore.OutboxEvent{
				Type: events.RideRequested, Source: "/flagdown/test", Subject: p.Key, Data: p,
			})
			if err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func unpublished(t *testing.T, db *pgstore.DB) int {
	t.Helper()
	var n int
	if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox WHERE published_at IS NULL`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// streamEvents returns the events in the broker's stream, in stream order.
func streamEvents(t *testing.T, b *broker.Broker) []event.Event {
	t.Helper()
	var out []event.Event
	for _, m := range testkit.StreamMessages(t, b.JetStream(), b.Stream()) {
		var e event.Event
		if err := json.Unmarshal(m.Data, &e); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

// quiet logs warnings to stderr only with go test -v.
func quiet(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return slog.New(slog.DiscardHandler)
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// run runs r until the test ends and checks that Run returns once cancelled.
func run(t *testing.T, r *outbox.Relay) {
	t.Helper()
	testkit.Run(t, r.Run)
}

func TestConcurrentRelaysKeepOrderPerKey(t *testing.T) {
	t.Parallel()
	db := testkit.DB(t)
	b := newBroker(t)
	var calls atomic.Int64
	publish := func(ctx context.Context, e event.Event) error {
		calls.Add(1)
		return b.Publish(ctx, e)
	}
	for i := 0; i < 3; i++ {
		run(t, outbox.New(db, publish, outbox.Options{Log: quiet(t), PollInterval: 50 * time.Millisecond, Batch: 16}))
	}

	// 8 writers, each owning 5 keys, insert 8 rows per key in transactions of 1 to 3 rows while the
	// relays run: 320 rows over 40 keys.
	const writers, keysPerWriter, rowsPerKey = 8, 5, 8
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var pending []payload
			for n := 0; n < rowsPerKey; n++ {
				for k := 0; k < keysPerWriter; k++ {
					pending = append(pending, payload{Key: fmt.Sprintf("ride-%d-%d", w, k), N: n})
					if len(pending) == 1+(n+k)%3 {
						insert(t, db, pending...)
						pending = nil
					}
				}
			}
			if len(pending) > 0 {
				insert(t, db, pending...)
			}
		}()
	}
	wg.Wait()
	const total = writers * keysPerWriter * rowsPerKey
	eventually(t, "every row published", func() bool { return unpublished(t, db) == 0 })

	got := streamEvents(t, b)
	if len(got) != total {
		t.Fatalf("stream holds %d events, want %d", len(got), total)
	}
	next := map[string]int{}
	for _, e := range got {
		var p payload
		if err := json.Unmarshal(e.Data(), &p); err != nil {
			t.Fatal(err)
		}
		if p.Key != e.Subject() {
			t.Fatalf("event %s: subject %s, data key %s", e.ID(), e.Subject(), p.Key)
		}
		if p.N != next[p.Key] {
			t.Fatalf("%s: published row %d when row %d was next", p.Key, p.N, next[p.Key])
		}
		next[p.Key]++
	}
	if len(next) != writers*keysPerWriter {
		t.Fatalf("%d keys published, want %d", len(next), writers*keysPerWriter)
	}
	t.Logf("%d publish calls for %d rows", calls.Load(), total)
}

func TestRunOncePublishesAndMarksRows(t *testing.T) {
	t.Parallel()
	db := testkit.DB(t)
	b := newBroker(t)
	ids := insert(t, db, payload{Key: "ride-a", N: 0}, payload{Key: "ride-b", N: 0}, payload{Key: "ride-a", N: 1})
	r := outbox.New(db, b.Publish, outbox.Options{Log: quiet(t)})
	n, err := r.RunOnce(context.Background())
	if err != nil || n != 3 {
		t.Fatalf("RunOnce = %d, %v; want 3, nil", n, err)
	}
	if u := unpublished(t, db); u != 0 {
		t.Fatalf("%d rows still unpublished", u)
	}
	if n, err := r.RunOnce(context.Background()); err != nil || n != 0 {
		t.Fatalf("second RunOnce = %d, %v; want 0, nil", n, err)
	}

	got := streamEvents(t, b)
	if len(got) != 3 {
		t.Fatalf("stream holds %d events", len(got))
	}
	var createdAt time.Time
	var data []byte
	if err := db.Pool.QueryRow(context.Background(), `SELECT created_at, data FROM outbox WHERE event_id = $1`, ids[0]).Scan(&createdAt, &data); err != nil {
		t.Fatal(err)
	}
	byID := map[string]event.Event{}
	var order []string
	for _, e := range got {
		byID[e.ID()] = e
		if e.Subject() == "ride-a" {
			order = append(order, e.ID())
		}
	}
	e := byID[ids[0]]
	if e.ID() != ids[0] || e.Type() != events.RideRequested || e.Source() != "/flagdown/test" || e.Subject() != "ride-a" ||
		e.DataContentType() != "application/json" || !e.Time().Equal(createdAt) {
		t.Fatalf("event %s does not match its row (created_at %v)", e, createdAt)
	}
	var want, have payload
	_ = json.Unmarshal(data, &want)
	if err := json.Unmarshal(e.Data(), &have); err != nil || have != want {
		t.Fatalf("data %s, want %s", e.Data(), data)
	}
	if len(order) != 2 || order[0] != ids[0] || order[1] != ids[2] {
		t.Fatalf("ride-a published as %v, want %v (id order)", order, []string{ids[0], ids[2]})
	}
}

func TestPublishFailureLeavesRowForLaterRound(t *testing.T) {
	t.Parallel()
	db := testkit.DB(t)
	b := newBroker(t)
	ids := insert(t, db, payload{Key: "ride-a", N: 0}, payload{Key: "ride-a", N: 1}, payload{Key: "ride-b", N: 0})
	failing := ids[0]
	var failures atomic.Int64
	publish := func(ctx context.Context, e event.Event) error {
		if e.ID() == failing && failures.Add(1) == 1 {
			return errors.New("broker unavailable")
		}
		return b.Publish(ctx, e)
	}
	r := outbox.New(db, publish, outbox.Options{Log: quiet(t)})
	n, err := r.RunOnce(context.Background())
	if err == nil || !strings.Contains(err.Error(), "broker unavailable") {
		t.Fatalf("RunOnce error = %v, want the publish failure", err)
	}
	if n != 1 {
		t.Fatalf("RunOnce published %d rows, want 1 (ride-b; ride-a waits behind its failed head)", n)
	}
	var pending []string
	rows, _ := db.Pool.Query(context.Background(), `SELECT event_id::text FROM outbox WHERE published_at IS NULL ORDER BY id`)
	pending, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(pending) != 2 || pending[0] != ids[0] || pending[1] != ids[1] {
		t.Fatalf("unpublished after failure: %v, want %v", pending, ids[:2])
	}

	n, err = r.RunOnce(context.Background())
	if err != nil || n != 2 {
		t.Fatalf("retry RunOnce = %d, %v; want 2, nil", n, err)
	}
	got := streamEvents(t, b)
	if len(got) != 3 || got[0].ID() != ids[2] || got[1].ID() != ids[0] || got[2].ID() != ids[1] {
		t.Fatalf("stream order wrong: %v", got)
	}
}

func TestRunRetriesFailedPublish(t *testing.T) {
	t.Parallel()
	db := testkit.DB(t)
	b := newBroker(t)
	var calls atomic.Int64
	publish := func(ctx context.Context, e event.Event) error {
		if calls.Add(1) <= 2 {
			return errors.New("broker unavailable")
		}
		return b.Publish(ctx, e)
	}
	run(t, outbox.New(db, publish, outbox.Options{Log: quiet(t), PollInterval: 20 * time.Millisecond}))
	insert(t, db, payload{Key: "ride-a", N: 0})
	eventually(t, "the row published after failures", func() bool { return unpublished(t, db) == 0 })
	if n := len(streamEvents(t, b)); n != 1 {
		t.Fatalf("stream holds %d events, want 1", n)
	}
}

func TestHeldHeadBlocksItsKeyOnly(t *testing.T) {
	t.Parallel()
	db := testkit.DB(t)
	b := newBroker(t)
	ids := insert(t, db, payload{Key: "ride-a", N: 0}, payload{Key: "ride-a", N: 1}, payload{Key: "ride-b", N: 0})

	// Another relay holds ride-a's head.
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, `SELECT 1 FROM outbox WHERE event_id = $1 FOR UPDATE`, ids[0]); err != nil {
		t.Fatal(err)
	}

	r := outbox.New(db, b.Publish, outbox.Options{Log: quiet(t)})
	n, err := r.RunOnce(ctx)
	if err != nil || n != 1 {
		t.Fatalf("RunOnce = %d, %v; want 1 (ride-b only)", n, err)
	}
	if got := streamEvents(t, b); len(got) != 1 || got[0].ID() != ids[2] {
		t.Fatalf("published %v, want only ride-b", got)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := r.RunOnce(ctx); err != nil || n != 2 {
		t.Fatalf("RunOnce after release = %d, %v; want 2", n, err)
	}
}

// idleWaits records the waits of a relay's idle loop (outbox.SetIdleHook).
type idleWaits struct {
	mu    sync.Mutex
	waits []time.Duration
}

func watchIdle(r *outbox.Relay) *idleWaits {
	w := &idleWaits{}
	outbox.SetIdleHook(r, func(d time.Duration) {
		w.mu.Lock()
		w.waits = append(w.waits, d)
		w.mu.Unlock()
	})
	return w
}

// count is the number of idle waits so far.
func (w *idleWaits) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.waits)
}

// since returns the waits after the first n.
func (w *idleWaits) since(n int) []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]time.Duration(nil), w.waits[n:]...)
}

// listenOutbox opens a connection that LISTENs on the outbox channel.
func listenOutbox(t *testing.T, db *pgstore.DB) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	if _, err := conn.Exec(context.Background(), "LISTEN "+pgx.Identifier{outbox.Channel}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	return conn
}

// notified returns the notifications for db's schema that reached conn by now: a query's round
// trip delivers every notification committed before it, and WaitForNotification with a cancelled
// context returns only those already delivered.
func notified(t *testing.T, conn *pgx.Conn, db *pgstore.DB) int {
	t.Helper()
	if _, err := conn.Exec(context.Background(), "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	n := 0
	for {
		note, err := conn.WaitForNotification(done)
		if err != nil {
			return n
		}
		if note.Payload == db.Schema {
			n++
		}
	}
}

func TestPollPublishesWithinItsBoundWithoutNotify(t *testing.T) {
	t.Parallel()
	db := testkit.DB(t)
	b := newBroker(t)
	var trig int
	if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_trigger t
		JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = 'outbox' AND NOT t.tgisinternal`, db.Schema).Scan(&trig); err != nil {
		t.Fatal(err)
	}
	if trig != 0 {
		t.Fatalf("outbox has %d triggers, want none (no NOTIFY at commit)", trig)
	}
	conn := listenOutbox(t, db)

	// Nothing wakes the relay but its poll: no NOTIFY, and Wake is not hooked to commits.
	const bound = 40 * time.Millisecond
	var idleAtPublish atomic.Int64
	idleAtPublish.Store(-1)
	var w *idleWaits
	publish := func(ctx context.Context, e event.Event) error {
		idleAtPublish.CompareAndSwap(-1, int64(w.count()))
		return b.Publish(ctx, e)
	}
	r := outbox.New(db, publish, outbox.Options{Log: quiet(t), PollInterval: bound, MinPollInterval: time.Millisecond})
	w = watchIdle(r)
	run(t, r)
	// Let the waits grow to the bound, so that the row is found by a look after the longest wait.
	eventually(t, "the idle waits at the bound", func() bool {
		ws := w.since(0)
		return len(ws) > 0 && ws[len(ws)-1] == bound
	})

	committed := w.count()
	insert(t, db, payload{Key: "ride-a", N: 0})
	eventually(t, "the row published by a look", func() bool { return unpublished(t, db) == 0 })

	// The look after the wait under way at commit finds the row, or, if a look was under way and
	// missed it, the next one: at most one more wait, and no wait is longer than the bound. So the
	// row went out within the bound plus a look and a round of its commit.
	waits := w.since(committed)
	if at := int(idleAtPublish.Load()); at < 0 || at-committed > 1 {
		t.Fatalf("published after %d new idle waits (%v), want at most 1", at-committed, waits)
	}
	for _, d := range w.since(0) {
		if d > bound {
			t.Fatalf("an idle wait of %v, longer than the poll bound %v (waits %v)", d, bound, waits)
		}
	}
	if n := notified(t, conn, db); n != 0 {
		t.Fatalf("%d NOTIFYs for the schema, want none", n)
	}
	if n := len(streamEvents(t, b)); n != 1 {
		t.Fatalf("stream holds %d events, want 1", n)
	}
}

func TestOutboxCommitWakesRelay(t *testing.T) {
	t.Parallel()
	db := testkit.DB(t)
	b := newBroker(t)
	// Polling is effectively off: after its first round only Wake makes the relay run a round.
	r := outbox.New(db, b.Publish, outbox.Options{Log: quiet(t), PollInterval: time.Hour, MinPollInterval: time.Hour})
	w := watchIdle(r)
	db.OnOutboxCommit(r.Wake)
	run(t, r)
	eventually(t, "the first round done", func() bool { return w.count() > 0 })

	insert(t, db, payload{Key: "ride-a", N: 0})
	eventually(t, "the row published on the commit's wake-up", func() bool { return unpublished(t, db) == 0 })
	if n := len(streamEvents(t, b)); n != 1 {
		t.Fatalf("stream holds %d events, want 1", n)
	}
}

func TestExplicitNotifyWakesRelay(t *testing.T) {
	t.Parallel()
	db := testkit.DB(t)
	b := newBroker(t)
	// Polling is effectively off and commits do not wake it: after its first round only a NOTIFY
	// makes the relay run a round.
	r := outbox.New(db, b.Publish, outbox.Options{Log: quiet(t), PollInterval: time.Hour, MinPollInterval: time.Hour})
	w := watchIdle(r)
	run(t, r)
	eventually(t, "the first round done", func() bool { return w.count() > 0 })

	insert(t, db, payload{Key: "ride-a", N: 0})
	if n := unpublished(t, db); n != 1 {
		t.Fatalf("%d rows unpublished before the NOTIFY, want 1", n)
	}
	// Notify until the relay's LISTEN connection (opened concurrently) hears one.
	eventually(t, "the row published on NOTIFY", func() bool {
		if err := db.WakeRelays(context.Background()); err != nil {
			t.Fatal(err)
		}
		return unpublished(t, db) == 0
	})
	if n := len(streamEvents(t, b)); n != 1 {
		t.Fatalf("stream holds %d events, want 1", n)
	}
}

// TestRelaySignsWhatItPublishes: every event the relay publishes verifies with its public key after
// the broker stored it, data as PostgreSQL's jsonb prints it included, and refuses a change to the
// stored data.
func TestRelaySignsWhatItPublishes(t *testing.T) {
	t.Parallel()
	db := testkit.DB(t)
	b := newBroker(t)
	signer, err := internalauth.GenerateSigner("relay-test")
	if err != nil {
		t.Fatal(err)
	}
	v, err := internalauth.ParseVerifier(signer.VerifyKey(), 0)
	if err != nil {
		t.Fatal(err)
	}
	insert(t, db, payload{Key: "k1", N: 1}, payload{Key: "k2", N: 2})
	r := outbox.New(db, b.Publish, outbox.Options{Log: quiet(t), Keys: signer})
	if n, err := r.RunOnce(context.Background()); err != nil || n != 2 {
		t.Fatalf("RunOnce: %d, %v", n, err)
	}
	got := streamEvents(t, b)
	if len(got) != 2 {
		t.Fatalf("%d events in the stream, want 2", len(got))
	}
	for _, e := range got {
		if err := v.Verify(e); err != nil {
			t.Errorf("event %s: %v", e.ID(), err)
		}
		if e.Extensions()[internalauth.KeyIDExtension] != "relay-test" {
			t.Errorf("event %s: key id %v", e.ID(), e.Extensions()[internalauth.KeyIDExtension])
		}
		altered := e.Clone()
		altered.DataEncoded = []byte(strings.Replace(string(e.Data()), `"n"`, `"N"`, 1))
		if err := v.Verify(altered); err == nil {
			t.Errorf("event %s with altered data verified", e.ID())
		}
	}
}
