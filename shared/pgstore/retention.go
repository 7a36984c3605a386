package pgstore

import (
	"context"
	"time"

	"github.com/flagdown/flagdown/shared/dispatch"
)

// Defaults of Retention's batch bounds.
const (
	// DefaultPruneBatch is the most rows one DELETE statement removes.
	DefaultPruneBatch = 5000
	// DefaultPruneMaxBatches is the most DELETE statements Prune runs per table in one call, so one
	// call removes at most DefaultPruneBatch × DefaultPruneMaxBatches (100,000) rows per table.
	DefaultPruneMaxBatches = 20
)

// Retention says how old rows may get before Prune deletes them. Ages are measured against
// PostgreSQL's now(), never the caller's clock. Every age must be > 0.
type Retention struct {
	// ProcessedEvents: processed_events rows whose processed_at is older than this are deleted
	// (config FLAGDOWN_RETAIN_PROCESSED_EVENTS).
	ProcessedEvents time.Duration
	// Outbox: published outbox rows whose published_at is older than this are deleted; unpublished
	// rows never are (config FLAGDOWN_RETAIN_OUTBOX).
	Outbox time.Duration
	// Offers: offers that are not PENDING, of a ride that is COMPLETED, CANCELLED or UNMATCHED, and
	// whose created_at is older than this are deleted; offers of open rides never are, since matching
	// reads them to skip drivers already offered the ride (config FLAGDOWN_RETAIN_OFFERS).
	Offers time.Duration
	// Batch is the most rows one DELETE removes; 0 means DefaultPruneBatch.
	Batch int
	// MaxBatches is the most DELETEs per table in one Prune call; 0 means DefaultPruneMaxBatches.
	MaxBatches int
}

// PruneReport counts the rows one Prune call deleted, per table.
type PruneReport struct {
	// ProcessedEvents is the number of processed_events rows deleted.
	ProcessedEvents int64
	// Outbox is the number of outbox rows deleted.
	Outbox int64
	// Offers is the number of offers rows deleted.
	Offers int64
	// More is true when a table reached MaxBatches full batches: eligible rows may remain for the
	// next call.
	More bool
}

// Each statement deletes at most $2 eligible rows older than $1 milliseconds before now(),
// chosen through the retention indexes of migration 00003 (processed_events_age,
// outbox_published_age, offers_decided_age). The row is found again by ctid in the same
// statement, so a row updated concurrently (new ctid) is skipped, not deleted.
const (
	pruneProcessedEvents = `DELETE FROM processed_events WHERE ctid IN (
		SELECT ctid FROM processed_events
		WHERE processed_at < now() - $1 * interval '1 millisecond'
		LIMIT $2)`
	pruneOutbox = `DELETE FROM outbox WHERE ctid IN (
		SELECT ctid FROM outbox
		WHERE published_at IS NOT NULL AND published_at < now() - $1 * interval '1 millisecond'
		LIMIT $2)`
	pruneOffers = `DELETE FROM offers WHERE ctid IN (
		SELECT o.ctid FROM offers o JOIN rides r ON r.id = o.ride_id
		WHERE o.status <> 'PENDING' AND o.created_at < now() - $1 * interval '1 millisecond'
		  AND r.status IN ('COMPLETED','CANCELLED','UNMATCHED')
		LIMIT $2)`
)

// Prune deletes the rows r says are too old: processed_events, then published outbox rows, then
// decided offers of terminal rides. Each table is emptied in batches of r.Batch rows, one
// statement (and transaction) per batch, until a batch deletes fewer rows than r.Batch or
// r.MaxBatches batches ran (then the report's More is set), so a call stays short and holds no
// lock for long. Rides themselves are never deleted.
//
// It returns the counts deleted so far together with any error. An age <= 0, or a negative
// Batch or MaxBatches, is a dispatch.Error with code invalid_argument and deletes nothing; a
// database failure is a dispatch.Error (unavailable or internal, via pgErr); a cancelled ctx
// stops between or during statements, each statement being atomic.
func (db *DB) Prune(ctx context.Context, r Retention) (PruneReport, error) {
	var rep PruneReport
	for _, a := range []struct {
		field string
		age   time.Duration
	}{{"processed_events", r.ProcessedEvents}, {"outbox", r.Outbox}, {"offers", r.Offers}} {
		if a.age <= 0 {
			return rep, dispatch.Invalid("retention."+a.field, "must be > 0")
		}
	}
	if r.Batch < 0 || r.MaxBatches < 0 {
		return rep, dispatch.Invalid("retention.batch", "Batch and MaxBatches must be >= 0")
	}
	batch, maxBatches := r.Batch, r.MaxBatches
	if batch == 0 {
		batch = DefaultPruneBatch
	}
	if maxBatches == 0 {
		maxBatches = DefaultPruneMaxBatches
	}
	for _, t := range []struct {
		sql   string
		age   time.Duration
		count *int64
	}{
		{pruneProcessedEvents, r.ProcessedEvents, &rep.ProcessedEvents},
		{pruneOutbox, r.Outbox, &rep.Outbox},
		{pruneOffers, r.Offers, &rep.Offers},
	} {
		for i := 0; ; i++ {
			if i == maxBatches {
				rep.More = true
				break
			}
			tag, err := db.Pool.Exec(ctx, t.sql, t.age.Milliseconds(), batch)
			if err != nil {
				return rep, pgErr(err)
			}
			*t.count += tag.RowsAffected()
			if tag.RowsAffected() < int64(batch) {
				break
			}
		}
	}
	return rep, nil
}
