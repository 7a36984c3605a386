package pgstore

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flagdown/flagdown/shared/dispatch"
)

// SetAssignment records in tx driverID's assignment after a change: his active ride rideID in
// status (ACCEPTED or IN_PROGRESS), or none when rideID is empty. It bumps his epoch and returns it;
// the driver_assignments row stays locked until tx ends (lock order: ride row, offer rows, then this).
// Errors are dispatch errors (unavailable, internal).
func SetAssignment(ctx context.Context, tx pgx.Tx, driverID, rideID string, status dispatch.RideStatus) (int64, error) {
	var ride, st *string
	if rideID != "" {
		s := string(status)
		ride, st = &rideID, &s
	}
	var epoch int64
	err := tx.QueryRow(ctx, `INSERT INTO driver_assignments AS a (driver_id, epoch, ride_id, ride_status)
		VALUES ($1, 1, $2, $3)
		ON CONFLICT (driver_id) DO UPDATE SET epoch = a.epoch + 1, ride_id = EXCLUDED.ride_id,
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

// EnsureAssignmentRow gives driverID a driver_assignments row saying he is free (epoch 1) if he has
// none; an existing row is left as it is. It reports whether it inserted one.
func EnsureAssignmentRow(ctx context.Context, q Querier, driverID string) (bool, error) {
	tag, err := q.Exec(ctx, `INSERT INTO driver_assignments (driver_id, epoch) VALUES ($1, 1) ON CONFLICT (driver_id) DO NOTHING`, driverID)
	if err != nil {
		return false, pgErr(err)
	}
	return tag.RowsAffected() == 1, nil
}
