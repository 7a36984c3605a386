package pgstore

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flagdown/flagdown/shared/dispatch"
)

// SetAssignment records in tx driverID's assignment after a change: his active ride rideID in
// status (ACCEPTED or IN_PROGRESS), or none when rideID is empty. It gives the change a new fencing
// token (the epoch column) and returns it: the next value of the sequence assignment_token, and
// always more than the row's previous token, so a driver's tokens only grow even when reconcile
// took one past the sequence (FenceAssignment). The driver_assignments row stays locked until tx
// ends (lock order: ride row, offer rows, then this). Errors are dispatch errors (unavailable,
// internal).
func SetAssignment(ctx context.Context, tx pgx.Tx, driverID, rideID string, status dispatch.RideStatus) (int64, error) {
	var ride, st *string
	if rideID != "" {
		s := string(status)
		ride, st = &rideID, &s
	}
	var epoch int64
	err := tx.QueryRow(ctx, `INSERT INTO driver_assignments AS a (driver_id, epoch, ride_id, ride_status)
		VALUES ($1, nextval('assignment_token'), $2, $3)
		ON CONFLICT (driver_id) DO UPDATE SET epoch = greatest(EXCLUDED.epoch, a.epoch + 1), ride_id = EXCLUDED.ride_id,
			ride_status = EXCLUDED.ride_status, updated_at = now()
		RETURNING epoch`, driverID, ride, st).Scan(&epoch)
	return epoch, pgErr(err)
}

// AssignmentRow is a driver_assignments row with the version of its ride.
type AssignmentRow struct {
	dispatch.Assignment
	// UpdatedAt is when the assignment last changed (PostgreSQL's clock).
	UpdatedAt time.Time
	// Age is how long ago that was, by PostgreSQL's clock.
	Age time.Duration
}

const assignmentSelect = `SELECT a.driver_id, a.epoch, coalesce(a.ride_id::text, ''), coalesce(a.ride_status, ''),
	coalesce(r.version, 0), a.updated_at, extract(epoch FROM now() - a.updated_at) * 1000
	FROM driver_assignments a LEFT JOIN rides r ON r.id = a.ride_id`

func scanAssignments(rows pgx.Rows) ([]AssignmentRow, error) {
	defer rows.Close()
	var out []AssignmentRow
	for rows.Next() {
		var a AssignmentRow
		var st string
		var ageMs float64
		if err := rows.Scan(&a.DriverID, &a.Epoch, &a.RideID, &st, &a.RideVersion, &a.UpdatedAt, &ageMs); err != nil {
			return nil, pgErr(err)
		}
		a.RideStatus = dispatch.RideStatus(st)
		a.Age = time.Duration(ageMs * float64(time.Millisecond))
		out = append(out, a)
	}
	return out, pgErr(rows.Err())
}

// ActiveAssignments returns every driver PostgreSQL has on a ride (driver_assignments rows with a
// ride), whatever their age.
func ActiveAssignments(ctx context.Context, q Querier) ([]AssignmentRow, error) {
	rows, err := q.Query(ctx, assignmentSelect+` WHERE a.ride_id IS NOT NULL`)
	if err != nil {
		return nil, pgErr(err)
	}
	return scanAssignments(rows)
}

// AssignmentsOf returns the driver_assignments rows of ids (drivers without a row are absent).
func AssignmentsOf(ctx context.Context, q Querier, ids []string) (map[string]AssignmentRow, error) {
	rows, err := q.Query(ctx, assignmentSelect+` WHERE a.driver_id = ANY($1)`, ids)
	if err != nil {
		return nil, pgErr(err)
	}
	list, err := scanAssignments(rows)
	if err != nil {
		return nil, err
	}
	out := make(map[string]AssignmentRow, len(list))
	for _, a := range list {
		out[a.DriverID] = a
	}
	return out, nil
}

// EnsureAssignmentRow gives driverID a driver_assignments row saying he is free (with a new
// fencing token) if he has none; an existing row is left as it is. It reports whether it inserted
// one.
func EnsureAssignmentRow(ctx context.Context, q Querier, driverID string) (bool, error) {
	tag, err := q.Exec(ctx, `INSERT INTO driver_assignments (driver_id, epoch) VALUES ($1, nextval('assignment_token'))
		ON CONFLICT (driver_id) DO NOTHING`, driverID)
	if err != nil {
		return false, pgErr(err)
	}
	return tag.RowsAffected() == 1, nil
}

// FenceAssignment takes PostgreSQL's word over a Redis that holds a newer token than PostgreSQL for
// driverID (PostgreSQL moved backwards: a failover to an asynchronous replica, a point-in-time
// restore). In one transaction, under the driver's row lock, it checks that his row still has token
// seen (the one the caller compared with Redis), gives the row a new token past redisToken (and
// past the sequence and the row's own) without changing what it says, and moves the sequence
// assignment_token up to it so that later changes of every driver are past it too. It returns the
// row with its new token and true, or false when the row changed since (or is gone): that change
// has its own effect on its way, and the caller leaves the driver to the next run. Errors are
// dispatch errors (unavailable, internal).
func FenceAssignment(ctx context.Context, db *DB, driverID string, seen, redisToken int64) (AssignmentRow, bool, error) {
	var out AssignmentRow
	ok := false
	err := db.Tx(ctx, func(tx pgx.Tx) error {
		var cur int64
		err := tx.QueryRow(ctx, `SELECT epoch FROM driver_assignments WHERE driver_id = $1 FOR UPDATE`, driverID).Scan(&cur)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && cur != seen) {
			return nil
		}
		if err != nil {
			return pgErr(err)
		}
		var token int64
		if err := tx.QueryRow(ctx, `UPDATE driver_assignments
			SET epoch = greatest(nextval('assignment_token'), $2::bigint + 1, epoch + 1), updated_at = now()
			WHERE driver_id = $1 RETURNING epoch`, driverID, redisToken).Scan(&token); err != nil {
			return pgErr(err)
		}
		if err := AdvanceAssignmentTokens(ctx, tx, token); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, assignmentSelect+` WHERE a.driver_id = $1`, driverID)
		if err != nil {
			return pgErr(err)
		}
		list, err := scanAssignments(rows)
		if err != nil || len(list) != 1 {
			return err
		}
		out, ok = list[0], true
		return nil
	})
	return out, ok, err
}

// AdvanceAssignmentTokens moves the sequence assignment_token up to at least token (never down,
// as far as one statement can tell: sequences are not transactional, and a nextval racing it may
// hand out a value it then sets again; SetAssignment's "more than the row's previous token" keeps
// every driver's tokens growing all the same). It reports nothing; errors are dispatch errors.
func AdvanceAssignmentTokens(ctx context.Context, q Querier, token int64) error {
	_, err := q.Exec(ctx, `SELECT setval('assignment_token', $1::bigint) FROM assignment_token WHERE last_value < $1::bigint`, token)
	return pgErr(err)
}

// LastAssignmentToken returns the last value the sequence assignment_token handed out (or was
// set to): every token PostgreSQL committed is at most this.
func LastAssignmentToken(ctx context.Context, q Querier) (int64, error) {
	var v int64
	err := q.QueryRow(ctx, `SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END FROM assignment_token`).Scan(&v)
	return v, pgErr(err)
}
