// Package outbox is the outbox relay: it publishes the events that state changes wrote to the outbox
// table (in the same transaction as the change) to the broker, in id order per ordering key (the ride
// or driver id), and marks them published.
//
// Several relays may run over one database: a relay claims the oldest unpublished row of each
// ordering key with FOR UPDATE SKIP LOCKED, so a key's rows are published by one relay at a time and
// in order. Publishing is at least once: a relay that dies after publishing but before committing
// publishes the row again, and the broker drops the duplicate by event id.
//
// Nothing signals at commit (a NOTIFY per transaction would serialize commits on PostgreSQL's
// notify-queue lock). A relay finds rows in three ways: it polls the outbox_unpublished partial
// index, one single-row index probe per look, with waits that start at MinPollInterval after a round
// that published and double while looks find nothing, up to PollInterval (the latency bound for rows
// committed by another process); Wake, which the process that committed a row calls through
// pgstore.DB.OnOutboxCommit (publishing at once in that process); and an explicit NOTIFY on Channel
// (pgstore.DB.WakeRelays).
package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/jackc/pgx/v5"

	"github.com/flagdown/flagdown/shared/cloudevent"
	"github.com/flagdown/flagdown/shared/internalauth"
	"github.com/flagdown/flagdown/shared/logging"
	"github.com/flagdown/flagdown/shared/metrics"
	"github.com/flagdown/flagdown/shared/pgstore"
	"github.com/flagdown/flagdown/shared/tracing"
)

// Channel is the PostgreSQL NOTIFY channel that wakes the relays of a schema (the payload is the
// schema name) when someone asks for it (pgstore.DB.WakeRelays). No trigger notifies at commit.
const Channel = "flagdown_outbox"

// Defaults of Options.
const (
	// DefaultPollInterval is the longest wait between two looks for rows of an idle relay, 50 ms:
	// the bound, beyond a probe and a round, from a commit in another process to its publication.
	DefaultPollInterval = 50 * time.Millisecond
	// DefaultMinPollInterval is the first wait after a round that published rows, 2 ms; waits
	// double from it while looks find nothing.
	DefaultMinPollInterval = 2 * time.Millisecond
	// DefaultBatch is the most rows one round publishes.
	DefaultBatch = 200
	// publishConcurrency bounds the ordering keys published in parallel in one round.
	publishConcurrency = 32
)

// PublishFunc publishes one event, returning once the broker has stored it (broker.Broker.Publish).
type PublishFunc func(ctx context.Context, e event.Event) error

// Options tune a Relay. Zero values mean the defaults.
type Options struct {
	// PollInterval is the longest wait between two looks for rows while none are found (config
	// RelayPollInterval), default DefaultPollInterval. A row committed by another process is
	// published at most PollInterval plus one look and one round after its commit. It is also the
	// wait after a failed round.
	PollInterval time.Duration
	// MinPollInterval is the first wait after a round that published rows, default
	// DefaultMinPollInterval (at most PollInterval); each look that finds nothing doubles the wait,
	// up to PollInterval.
	MinPollInterval time.Duration
	// Batch is the most rows one round (one transaction) publishes, default DefaultBatch.
	Batch int
	// Log receives a line per failure and reconnect; nil means slog.Default().
	Log *slog.Logger
	// AfterPublish is a fault-injection hook for chaos runs, nil in production: it is called after
	// the broker acknowledged a row's event and before the round marks the row published (possibly
	// from several goroutines at once). `flagdown relay` sets it from
	// FLAGDOWN_FAULT_RELAY_EXIT_AFTER_PUBLISH to exit the process there, the crash the relay's
	// at-least-once publishing must survive.
	AfterPublish func()
	// Keys sign every published event with the relay's private key (internalauth.Signer.Sign: the
	// flagdownsig and flagdownkid extensions the consumers verify, over the attributes and the data
	// bytes). nil publishes unsigned events, which consumers refuse; `flagdown relay` and `flagdown
	// dev` always set it.
	Keys *internalauth.Signer
}

// Relay publishes outbox rows. Create it with New; it is safe to run several relays, in one process
// or many, over the same schema.
type Relay struct {
	db      *pgstore.DB
	publish PublishFunc
	poll    time.Duration
	minPoll time.Duration
	batch   int
	log     *slog.Logger
	wake    chan struct{}
	after   func()
	keys    *internalauth.Signer
	// idle, nil in production, is called with each wait of an idle relay before it waits (tests
	// count looks with it; see export_test.go).
	idle func(wait time.Duration)
}

// New returns a relay publishing db's outbox rows with publish.
func New(db *pgstore.DB, publish func(context.Context, event.Event) error, opts Options) *Relay {
	r := &Relay{db: db, publish: publish, poll: opts.PollInterval, minPoll: opts.MinPollInterval, batch: opts.Batch,
		log: opts.Log, wake: make(chan struct{}, 1), after: opts.AfterPublish, keys: opts.Keys}
	if r.poll <= 0 {
		r.poll = DefaultPollInterval
	}
	if r.minPoll <= 0 {
		r.minPoll = DefaultMinPollInterval
	}
	r.minPoll = min(r.minPoll, r.poll)
	if r.batch <= 0 {
		r.batch = DefaultBatch
	}
	if r.log == nil {
		r.log = slog.Default()
	}
	return r
}

// claimHeads locks the oldest unpublished row of up to $1 ordering keys whose oldest row no other
// relay holds. A row whose key has an earlier unpublished row is never a head, so while a relay
// holds a key's head no other relay can claim any row of that key.
const claimHeads = `
SELECT o.id, o.ordering_key
FROM outbox o
WHERE o.published_at IS NULL
  AND NOT EXISTS (
    SELECT 1 FROM outbox p
    WHERE p.ordering_key = o.ordering_key AND p.published_at IS NULL AND p.id < o.id)
ORDER BY o.id
LIMIT $1
FOR UPDATE SKIP LOCKED`

// claimRows locks the claimed heads and the unpublished rows after them of the same keys (no other
// relay can hold those while the heads are held), in id order.
const claimRows = `
SELECT o.id, o.event_id::text, o.type, o.source, o.subject, o.ordering_key, o.data, o.created_at,
       coalesce(o.traceparent, ''), coalesce(o.tracestate, '')
FROM outbox o
JOIN unnest($1::text[], $2::bigint[]) AS h(ordering_key, head_id)
  ON o.ordering_key = h.ordering_key AND o.id >= h.head_id
WHERE o.published_at IS NULL
ORDER BY o.id
LIMIT $3
FOR UPDATE OF o`

type row struct {
	id        int64
	eventID   string
	typ       string
	source    string
	subject   string
	key       string
	data      []byte
	createdAt time.Time
	// traceparent and tracestate are the trace context of the transaction that wrote the row.
	traceparent, tracestate string
}

// RunOnce runs one round in one transaction: it claims unpublished rows (the heads of their ordering
// keys and the rows after them, at most Batch), publishes each key's rows in id order (different
// keys in parallel), marks the published ones published_at = now() and commits. A row that cannot
// be published stays unpublished, and so do the later rows of its key, until a later round. It returns the number of rows published and, if
// some row failed, an error describing the first failure.
func (r *Relay) RunOnce(ctx context.Context) (int, error) {
	tx, err := r.db.Pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("outbox: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit

	var keys []string
	var heads []int64
	hrows, err := tx.Query(ctx, claimHeads, r.batch)
	if err != nil {
		return 0, fmt.Errorf("outbox: claim heads: %w", err)
	}
	for hrows.Next() {
		var id int64
		var key string
		if err := hrows.Scan(&id, &key); err != nil {
			hrows.Close()
			return 0, fmt.Errorf("outbox: scan head: %w", err)
		}
		heads = append(heads, id)
		keys = append(keys, key)
	}
	if err := hrows.Err(); err != nil {
		return 0, fmt.Errorf("outbox: claim heads: %w", err)
	}
	if len(heads) == 0 {
		return 0, tx.Commit(ctx)
	}

	rows, err := tx.Query(ctx, claimRows, keys, heads, r.batch)
	if err != nil {
		return 0, fmt.Errorf("outbox: claim rows: %w", err)
	}
	claimed, err := pgx.CollectRows(rows, func(cr pgx.CollectableRow) (row, error) {
		var x row
		err := cr.Scan(&x.id, &x.eventID, &x.typ, &x.source, &x.subject, &x.key, &x.data, &x.createdAt,
			&x.traceparent, &x.tracestate)
		return x, err
	})
	if err != nil {
		return 0, fmt.Errorf("outbox: claim rows: %w", err)
	}

	published, firstErr := r.publishRows(ctx, claimed)
	if len(published) > 0 {
		if _, err := tx.Exec(ctx, `UPDATE outbox SET published_at = now() WHERE id = ANY($1)`, published); err != nil {
			return 0, fmt.Errorf("outbox: mark published: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("outbox: commit: %w", err)
	}
	metrics.OutboxPublished.Add(float64(len(published)))
	return len(published), firstErr
}

// publishRows publishes rows (in id order) with the keys in parallel and each key's rows in order,
// stopping a key at its first failure. It returns the ids published and the first failure.
func (r *Relay) publishRows(ctx context.Context, rows []row) ([]int64, error) {
	var order []string
	byKey := map[string][]row{}
	for _, x := range rows {
		if _, ok := byKey[x.key]; !ok {
			order = append(order, x.key)
		}
		byKey[x.key] = append(byKey[x.key], x)
	}
	var (
		mu        sync.Mutex
		published []int64
		firstErr  error
		errID     int64
		wg        sync.WaitGroup
	)
	sem := make(chan struct{}, publishConcurrency)
	for _, key := range order {
		wg.Add(1)
		sem <- struct{}{}
		go func(key string, rows []row) {
			defer func() { <-sem; wg.Done() }()
			for _, x := range rows {
				if err := r.publishRow(ctx, x); err != nil {
					if ctx.Err() == nil {
						r.log.Warn("outbox publish failed; will retry", "outbox_id", x.id, "event_id", x.eventID,
							"type", x.typ, logging.EventSubject(x.typ, x.subject), "ordering_key", key, "err", err)
					}
					mu.Lock()
					if firstErr == nil || x.id < errID {
						firstErr, errID = fmt.Errorf("outbox: publish row %d (%s %s): %w", x.id, x.typ, x.eventID, err), x.id
					}
					mu.Unlock()
					return // keep the key's order: nothing after a failed row goes out this round
				}
				if r.after != nil {
					r.after()
				}
				mu.Lock()
				published = append(published, x.id)
				mu.Unlock()
			}
		}(key, byKey[key])
	}
	wg.Wait()
	return published, firstErr
}

// publishRow builds the CloudEvent of x, signs it (when Keys are set) and publishes it, in a
// "send <type>" producer span continuing the trace of the transaction that wrote x; the event
// carries that span's context in its traceparent and tracestate attributes (tracing.StartPublish;
// none when tracing is off).
func (r *Relay) publishRow(ctx context.Context, x row) (err error) {
	e, err := cloudevent.New(x.eventID, x.typ, x.source, x.subject, json.RawMessage(x.data), x.createdAt)
	if err != nil {
		return err
	}
	ctx, span := tracing.StartPublish(tracing.WithContext(ctx, x.traceparent, x.tracestate), &e)
	defer func() { tracing.End(span, err) }()
	if r.keys != nil {
		if err := r.keys.Sign(&e); err != nil {
			return err
		}
	}
	return r.publish(ctx, e)
}

// Run publishes rows until ctx is done, then returns nil. It runs a round at once, then again
// at once while rounds publish rows; when a round publishes none it looks for unpublished rows
// (pending) after waits of MinPollInterval doubling up to PollInterval, and runs a round when a look
// finds some, when Wake is called or when a NOTIFY for this schema arrives on Channel (over a
// dedicated connection, reopened if lost). After a failed round it waits PollInterval.
func (r *Relay) Run(ctx context.Context) error {
	listenDone := make(chan struct{})
	go func() {
		defer close(listenDone)
		r.listen(ctx)
	}()
	defer func() { <-listenDone }()

	timer := time.NewTimer(r.poll)
	defer timer.Stop()
	wait := r.minPoll
	for {
		n, err := r.RunOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case err != nil:
			r.log.Warn("outbox round failed", "published", n, "err", err)
			wait = r.poll
		case n > 0:
			wait = r.minPoll
			continue
		}
		// Idle: look for rows until some are found or a wake-up comes.
		for {
			if r.idle != nil {
				r.idle(wait)
			}
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
			timer.Reset(wait)
			woken := false
			select {
			case <-ctx.Done():
				return nil
			case <-r.wake:
				woken = true
			case <-timer.C:
			}
			wait = min(2*wait, r.poll)
			if woken {
				break
			}
			found, err := r.pending(ctx)
			if ctx.Err() != nil {
				return nil
			}
			if err != nil || found {
				break // a failed look runs a round, which reports the failure
			}
		}
	}
}

// pendingSQL finds one unpublished row: a single probe of the outbox_unpublished partial index,
// which holds only unpublished rows, so the look is cheap when there are none.
const pendingSQL = `SELECT EXISTS (SELECT 1 FROM outbox WHERE published_at IS NULL)`

// pending reports whether the outbox holds an unpublished row (one round trip, no transaction).
// The row may be held by another relay; the round that follows then publishes nothing.
func (r *Relay) pending(ctx context.Context) (bool, error) {
	var found bool
	if err := r.db.Pool.QueryRow(ctx, pendingSQL).Scan(&found); err != nil {
		return false, fmt.Errorf("outbox: look for rows: %w", err)
	}
	return found, nil
}

// Wake makes an idle Run run a round now instead of at its next look; it never blocks, and wake-ups
// that arrive while a round runs fold into one. A process that runs its relay next to the code
// that writes outbox rows passes it to pgstore.DB.OnOutboxCommit.
func (r *Relay) Wake() { r.signal() }

// signal wakes Run without blocking.
func (r *Relay) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// listen keeps a LISTEN connection open until ctx is done, reconnecting with backoff.
func (r *Relay) listen(ctx context.Context) {
	const maxBackoff = 5 * time.Second
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		connected, err := r.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if connected {
			backoff = 100 * time.Millisecond
		}
		// No catch-up round is needed: the poll finds whatever a lost notification announced.
		r.log.Warn("outbox listen connection lost; reconnecting (the poll goes on)", "err", err, "retry_in_ms", backoff.Milliseconds())
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// listenOnce opens a connection, LISTENs and signals on each notification for this schema until
// the connection fails (rows committed while no connection listened are the poll's). connected
// says whether LISTEN succeeded.
func (r *Relay) listenOnce(ctx context.Context) (connected bool, err error) {
	cfg, err := pgx.ParseConfig(r.db.URL)
	if err != nil {
		return false, fmt.Errorf("outbox: parse database URL: %w", err)
	}
	cfg.RuntimeParams["search_path"] = r.db.Schema
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return false, fmt.Errorf("outbox: listen connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx)) //nolint:errcheck // closing a dead connection
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{Channel}.Sanitize()); err != nil {
		return false, fmt.Errorf("outbox: LISTEN %s: %w", Channel, err)
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return true, err
			}
			return true, fmt.Errorf("outbox: wait for notification: %w", err)
		}
		if n.Payload == r.db.Schema {
			r.signal()
		}
	}
}
