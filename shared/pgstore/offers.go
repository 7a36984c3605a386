package pgstore

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flagdown/flagdown/shared/dispatch"
)

const offerCols = `id, ride_id, driver_id, status, distance_m, score, created_at, expires_at`

// scanOffer scans the offerCols of row, then any extra columns into extra.
func scanOffer(row pgx.Row, extra ...any) (*dispatch.Offer, error) {
	var o dispatch.Offer
	var status string
	dest := append([]any{&o.ID, &o.RideID, &o.DriverID, &status, &o.DistanceM, &o.Score, &o.CreatedAt, &o.ExpiresAt}, extra...)
	if err := row.Scan(dest...); err != nil {
		return nil, err
	}
	o.Status = dispatch.OfferStatus(status)
	return &o, nil
}

// InsertOffer records a PENDING offer valid until o.ExpiresAt. The offers_one_pending_per_ride
// index allows one pending offer per ride.
func InsertOffer(ctx context.Context, tx pgx.Tx, o *dispatch.Offer) error {
	err := tx.QueryRow(ctx, `INSERT INTO offers (id, ride_id, driver_id, status, distance_m, score, expires_at)
		VALUES ($1, $2, $3, 'PENDING', $4, $5, $6) RETURNING created_at`,
		o.ID, o.RideID, o.DriverID, o.DistanceM, o.Score, o.ExpiresAt).Scan(&o.CreatedAt)
	o.Status = dispatch.OfferPending
	return pgErr(err)
}

// PendingOffer returns the ride's PENDING offer, or nil.
func PendingOffer(ctx context.Context, q Querier, rideID string) (*dispatch.Offer, error) {
	o, err := scanOffer(q.QueryRow(ctx, `SELECT `+offerCols+` FROM offers WHERE ride_id = $1 AND status = 'PENDING'`, rideID))
	if IsNoRows(err) {
		return nil, nil
	}
	return o, pgErr(err)
}

// LatestOfferForUpdate returns the newest offer of rideID to driverID locked for update, with
// PostgreSQL's now (the one clock offer windows are judged by), in one round trip; nil and the zero
// time when there is none. Lock the ride row first.
func LatestOfferForUpdate(ctx context.Context, tx pgx.Tx, rideID, driverID string) (*dispatch.Offer, time.Time, error) {
	var now time.Time
	o, err := scanOffer(tx.QueryRow(ctx, `SELECT `+offerCols+`, now() FROM offers WHERE ride_id = $1 AND driver_id = $2
		ORDER BY created_at DESC LIMIT 1 FOR UPDATE`, rideID, driverID), &now)
	if IsNoRows(err) {
		return nil, time.Time{}, nil
	}
	return o, now, pgErr(err)
}

// SetOfferStatus moves offer id from PENDING to to and reports whether it was still pending.
func SetOfferStatus(ctx context.Context, tx pgx.Tx, id string, to dispatch.OfferStatus) (bool, error) {
	tag, err := tx.Exec(ctx, `UPDATE offers SET status = $2, responded_at = now() WHERE id = $1 AND status = 'PENDING'`, id, string(to))
	if err != nil {
		return false, pgErr(err)
	}
	return tag.RowsAffected() == 1, nil
}

// PrepareMatch is the offer bookkeeping of one match in a single round trip (lock the ride row
// first): it marks the ride's PENDING offers whose window closed as EXPIRED, and returns every
// driver ever offered the ride (to exclude), whether a live PENDING offer remains (then there is
// nothing to match) and PostgreSQL's clock_timestamp(), from which the new offer's window is counted.
func PrepareMatch(ctx context.Context, tx pgx.Tx, rideID string) (offered map[string]bool, livePending bool, now time.Time, err error) {
	if err := tx.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
		return nil, false, now, pgErr(err)
	}
	rows, err := tx.Query(ctx, `WITH expired AS (
			UPDATE offers SET status = 'EXPIRED', responded_at = now()
			WHERE ride_id = $1 AND status = 'PENDING' AND expires_at <= clock_timestamp() RETURNING id)
		SELECT driver_id, status = 'PENDING' AND id NOT IN (SELECT id FROM expired)
		FROM offers WHERE ride_id = $1`, rideID)
	if err != nil {
		return nil, false, now, pgErr(err)
	}
	defer rows.Close()
	offered = map[string]bool{}
	for rows.Next() {
		var id string
		var live bool
		if err := rows.Scan(&id, &live); err != nil {
			return nil, false, now, pgErr(err)
		}
		offered[id] = true
		livePending = livePending || live
	}
	return offered, livePending, now, pgErr(rows.Err())
}

// HasLiveOffer reports whether rideID has a PENDING offer whose window is still open by
// PostgreSQL's clock.
func HasLiveOffer(ctx context.Context, q Querier, rideID string) (bool, error) {
	var live bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM offers WHERE ride_id = $1 AND status = 'PENDING' AND expires_at > now())`, rideID).Scan(&live)
	return live, pgErr(err)
}

// WasOffered reports whether rideID was ever offered to driverID (an offer row in any status).
func WasOffered(ctx context.Context, q Querier, rideID, driverID string) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM offers WHERE ride_id = $1 AND driver_id = $2)`, rideID, driverID).Scan(&ok)
	if err != nil {
		return false, pgErr(err)
	}
	return ok, nil
}

// DriverHasLiveOffer reports whether driverID holds a PENDING offer whose window is still open by
// PostgreSQL's clock (a street hail must not pair a driver who was just offered a ride).
func DriverHasLiveOffer(ctx context.Context, q Querier, driverID string) (bool, error) {
	var live bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM offers WHERE driver_id = $1 AND status = 'PENDING' AND expires_at > now())`, driverID).Scan(&live)
	return live, pgErr(err)
}

// DriverOfferable reports what stands between driverID and a new offer: his active ride's
// assignment (nil when he is free) and whether he holds a PENDING offer, whatever its window (one
// whose window closed still holds him until its timeout is handled). It takes no lock: the offer's
// INSERT re-checks both under PostgreSQL's guards (offers_one_pending_per_driver, and the
// offers_driver_not_on_ride trigger, which reads his driver_assignments row FOR SHARE until the
// commit), so a race with an accept or a street hail is refused there.
func DriverOfferable(ctx context.Context, q Querier, driverID string) (onRide *AssignmentRow, pending bool, err error) {
	rows, err := q.Query(ctx, assignmentSelect+` WHERE a.driver_id = $1`, driverID)
	if err != nil {
		return nil, false, pgErr(err)
	}
	list, err := scanAssignments(rows)
	if err != nil {
		return nil, false, err
	}
	if len(list) == 1 && list[0].RideID != "" {
		onRide = &list[0]
	}
	err = q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM offers WHERE driver_id = $1 AND status = 'PENDING')`, driverID).Scan(&pending)
	return onRide, pending, pgErr(err)
}

// OfferDriver returns the driver of offer id ("" when there is no such offer).
func OfferDriver(ctx context.Context, q Querier, id string) (string, error) {
	var driverID string
	err := q.QueryRow(ctx, `SELECT driver_id FROM offers WHERE id = $1`, id).Scan(&driverID)
	if IsNoRows(err) {
		return "", nil
	}
	return driverID, pgErr(err)
}
