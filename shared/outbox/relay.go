// Package outbox is the outbox relay: it publishes the events that transactions wrote to the
// outbox table, at least once and in commit order per ordering key (the ride), and marks them
// published. It wakes on PostgreSQL LISTEN/NOTIFY with a polling fallback and may run as several
// copies at once.
package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/jackc/pgx/v5"

	"github.com/flagdown/flagdown/shared/cloudevent"
	"github.com/flagdown/flagdown/shared/pgstore"
)

// publishConcurrency bounds the publishes in flight in one round.
const publishConcurrency = 32

// Channel is the NOTIFY channel the outbox trigger signals; the payload is the schema name.
const Channel = "flagdown_outbox"

// Options tune a Relay.
type Options struct {
	// PollInterval is how often the relay looks for rows without a notification (default 1s).
	PollInterval time.Duration
	// Batch is the most rows claimed per round (default 200).
	Batch int
	// Log receives publish failures and reconnects (default slog.Default()).
	Log *slog.Logger
}

// Relay publishes outbox rows.
type Relay struct {
	db      *pgstore.DB
	publish func(context.Context, event.Event) error
	opts    Options
}

// New returns a relay over db that hands every event to publish.
func New(db *pgstore.DB, publish func(context.Context, event.Event) error, opts Options) *Relay {
	if opts.PollInterval <= 0 {
		opts.PollInterval = time.Second
	}
	if opts.Batch <= 0 {
		opts.Batch = 200
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	return &Relay{db: db, publish: publish, opts: opts}
}

// Run publishes until ctx is done, returning ctx's error.
func (r *Relay) Run(ctx context.Context) error {
	wake := make(chan struct{}, 1)
	go r.listen(ctx, wake)
	t := time.NewTicker(r.opts.PollInterval)
	defer t.Stop()
	for {
		for {
			n, err := r.RunOnce(ctx)
			if err != nil && ctx.Err() == nil {
				r.opts.Log.Error("outbox relay round failed", "err", err)
				break
			}
			if n == 0 || ctx.Err() != nil {
				break
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wake:
		case <-t.C:
		}
	}
}

// listen holds a LISTEN connection and signals wake for notifications of this schema, reconnecting
// with a pause after failures. The polling fallback covers the time it is away.
func (r *Relay) listen(ctx context.Context, wake chan<- struct{}) {
	for ctx.Err() == nil {
		err := r.listenOnce(ctx, wake)
		if ctx.Err() != nil {
			return
		}
		r.opts.Log.Warn("outbox relay: LISTEN connection lost, polling until it is back", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

func (r *Relay) listenOnce(ctx context.Context, wake chan<- struct{}) error {
	conn, err := pgx.Connect(ctx, r.db.URL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+Channel); err != nil {
		return err
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if n.Payload == r.db.Schema {
			select {
			case wake <- struct{}{}:
			default:
			}
		}
	}
}

// claimSQL takes unpublished rows that are the oldest unpublished row of their ordering key. Rows
// another relay holds are skipped, and so (through NOT EXISTS) are the rows behind them: per key,
// only one row is ever in flight, which keeps commit order per ride across relay copies.
const claimSQL = `SELECT o.id, o.event_id, o.type, o.source, o.subject, o.data, o.created_at
FROM outbox o
WHERE o.published_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM outbox p WHERE p.ordering_key = o.ordering_key AND p.published_at IS NULL AND p.id < o.id)
ORDER BY o.id
LIMIT $1
FOR UPDATE SKIP LOCKED`

// RunOnce claims and publishes one batch and returns how many rows it published. A row whose
// publish fails stays unpublished for a later round.
func (r *Relay) RunOnce(ctx context.Context) (int, error) {
	published := 0
	err := r.db.Tx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, claimSQL, r.opts.Batch)
		if err != nil {
			return fmt.Errorf("outbox: claim: %w", err)
		}
		type row struct {
			id                         int64
			eventID, typ, source, subj string
			data                       []byte
			created                    time.Time
		}
		var batch []row
		for rows.Next() {
			var x row
			if err := rows.Scan(&x.id, &x.eventID, &x.typ, &x.source, &x.subj, &x.data, &x.created); err != nil {
				rows.Close()
				return fmt.Errorf("outbox: scan: %w", err)
			}
			batch = append(batch, x)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("outbox: claim: %w", err)
		}
		// Rows of one round have distinct ordering keys (claimSQL), so they publish in parallel.
		ok := make([]bool, len(batch))
		var wg sync.WaitGroup
		sem := make(chan struct{}, publishConcurrency)
		for i, x := range batch {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				e, err := cloudevent.New(x.eventID, x.typ, x.source, x.subj, json.RawMessage(x.data), x.created)
				if err == nil {
					err = r.publish(ctx, e)
				}
				if err != nil {
					if ctx.Err() == nil {
						r.opts.Log.Error("outbox: publish failed; will retry", "event_id", x.eventID, "type", x.typ, "err", err)
					}
					return
				}
				ok[i] = true
			}()
		}
		wg.Wait()
		done := make([]int64, 0, len(batch))
		for i, x := range batch {
			if ok[i] {
				done = append(done, x.id)
			}
		}
		if len(done) == 0 {
			return nil
		}
		if _, err := tx.Exec(ctx, `UPDATE outbox SET published_at = now() WHERE id = ANY($1)`, done); err != nil {
			return fmt.Errorf("outbox: mark published: %w", err)
		}
		published = len(done)
		return nil
	})
	return published, err
}
