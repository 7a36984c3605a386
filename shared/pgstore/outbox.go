package pgstore

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flagdown/flagdown/shared/tracing"
)

// OutboxEvent is an event to publish once the transaction that writes it commits.
type OutboxEvent struct {
	// Type is the CloudEvent type (events.Ride...).
	Type string
	// Source is the CloudEvent source, the producing function, e.g. /flagdown/order-create.
	Source string
	// Subject is the CloudEvent subject: the ride or driver id.
	Subject string
	// OrderingKey groups events published in commit order (the ride id); empty means Subject.
	OrderingKey string
	// Data is the payload, marshalled as JSON.
	Data any
}

// InsertOutbox writes ev in tx and returns the new CloudEvent id (a UUID). The row records the
// trace context of ctx's span (tracing.Context; NULL when tracing is off), which the relay's
// publish span continues. When tx is DB.Tx's, the commit wakes the local relay (DB.OnOutboxCommit).
func InsertOutbox(ctx context.Context, tx pgx.Tx, ev OutboxEvent) (string, error) {
	id, args, err := outboxArgs(ctx, ev)
	if err != nil {
		return "", err
	}
	if _, err = tx.Exec(ctx, insertOutboxSQL, args...); err != nil {
		return "", fmt.Errorf("pgstore: insert outbox: %w", err)
	}
	markOutbox(tx)
	return id, nil
}

const insertOutboxSQL = `INSERT INTO outbox (event_id, type, source, subject, ordering_key, data, traceparent, tracestate)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`

// outboxArgs returns a new event id for ev and the arguments of insertOutboxSQL.
func outboxArgs(ctx context.Context, ev OutboxEvent) (string, []any, error) {
	id := uuid.NewString()
	args, err := outboxRowArgs(ctx, id, ev)
	return id, args, err
}

// outboxRowArgs returns the arguments of insertOutboxSQL for ev under the event id id: the row's
// columns, ending with the trace context of ctx's span (NULL when there is none).
func outboxRowArgs(ctx context.Context, id string, ev OutboxEvent) ([]any, error) {
	data, err := json.Marshal(ev.Data)
	if err != nil {
		return nil, fmt.Errorf("pgstore: outbox data: %w", err)
	}
	key := ev.OrderingKey
	if key == "" {
		key = ev.Subject
	}
	tp, ts := tracing.Context(ctx)
	return []any{id, ev.Type, ev.Source, ev.Subject, key, data, nullText(tp), nullText(ts)}, nil
}

// nullText is s, or NULL when s is empty.
func nullText(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// eventNamespace is the UUIDv5 namespace of deterministic outbox event ids (OnceID).
var eventNamespace = uuid.MustParse("5f3c2a8e-9d41-4e0b-a7c6-2b8d9e1f4a70")

// OnceID returns the deterministic event id of the announcement named by parts (for example a
// driver id and the time of his last ping for "he went offline"): every handler of the same fact,
// concurrent or retried, computes the same id, and InsertOutboxOnce writes it once.
func OnceID(parts ...string) string {
	key := ""
	for _, p := range parts {
		key += p + "\x00"
	}
	return uuid.NewSHA1(eventNamespace, []byte(key)).String()
}

// InsertOutboxOnce writes ev in tx with the event id id (see OnceID), recording ctx's trace context
// as InsertOutbox does (and waking the local relay when it writes), unless an outbox row with that
// id exists; it reports whether it wrote one.
// A concurrent writer of the same id waits for the other transaction and then writes nothing.
func InsertOutboxOnce(ctx context.Context, tx pgx.Tx, id string, ev OutboxEvent) (bool, error) {
	args, err := outboxRowArgs(ctx, id, ev)
	if err != nil {
		return false, err
	}
	tag, err := tx.Exec(ctx, insertOutboxSQL+` ON CONFLICT (event_id) DO NOTHING`, args...)
	if err != nil {
		return false, pgErr(err)
	}
	wrote := tag.RowsAffected() == 1
	if wrote {
		markOutbox(tx)
	}
	return wrote, nil
}

// MarkProcessed records that consumer handled the event (source, id) in tx. It returns false if the
// event was already recorded: the caller must then do nothing (duplicate delivery).
func MarkProcessed(ctx context.Context, tx pgx.Tx, consumer, source, id string) (bool, error) {
	tag, err := tx.Exec(ctx, `INSERT INTO processed_events (consumer, source, id) VALUES ($1, $2, $3)
		ON CONFLICT DO NOTHING`, consumer, source, id)
	if err != nil {
		return false, fmt.Errorf("pgstore: processed_events: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}
