package pgstore

import (
	"context"
	"fmt"
	"time"
)

// OpenRides returns the number of rides REQUESTED, ACCEPTED or IN_PROGRESS, for the
// flagdown_open_rides gauge.
func (db *DB) OpenRides(ctx context.Context) (int64, error) {
	var n int64
	err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM rides WHERE status IN ('REQUESTED','ACCEPTED','IN_PROGRESS')`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("pgstore: open rides: %w", err)
	}
	return n, nil
}

// OutboxLag returns the age of the oldest unpublished outbox row by the database's clock (0 when
// none waits), for the flagdown_outbox_lag_seconds gauge. Rows are read in id order through the
// outbox_unpublished index.
func (db *DB) OutboxLag(ctx context.Context) (time.Duration, error) {
	var secs float64
	err := db.Pool.QueryRow(ctx, `SELECT COALESCE((SELECT extract(epoch FROM now() - created_at)::float8
		FROM outbox WHERE published_at IS NULL ORDER BY id LIMIT 1), 0)`).Scan(&secs)
	if err != nil {
		return 0, fmt.Errorf("pgstore: outbox lag: %w", err)
	}
	return time.Duration(secs * float64(time.Second)), nil
}
