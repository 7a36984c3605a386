package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/flagdown/flagdown/shared/dispatch"
)

const offerCols = `id, ride_id, driver_id, status, distance_m, score, created_at, expires_at`

func scanOffer(row pgx.Row) (*dispatch.Offer, error) {
	var o dispatch.Offer
	var status string
	if err := row.Scan(&o.ID, &o.RideID, &o.DriverID, &status, &o.DistanceM, &o.Score, &o.CreatedAt, &o.ExpiresAt); err != nil {
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

// LatestOffer returns the newest offer of rideID to driverID, or nil.
func LatestOffer(ctx context.Context, q Querier, rideID, driverID string) (*dispatch.Offer, error) {
	o, err := scanOffer(q.QueryRow(ctx, `SELECT `+offerCols+` FROM offers WHERE ride_id = $1 AND driver_id = $2
		ORDER BY created_at DESC LIMIT 1`, rideID, driverID))
	if IsNoRows(err) {
		return nil, nil
	}
	return o, pgErr(err)
}

// AcceptOffer marks offerID ACCEPTED if it is still PENDING for (rideID, driverID) and inside its
// window (PostgreSQL's clock). Otherwise it returns a conflict: offer_expired when the window closed
// (the caller's transaction rolls back; the timeout handling records the expiry), not_your_offer when the driver holds no such pending offer.
func AcceptOffer(ctx context.Context, tx pgx.Tx, rideID, driverID, offerID string) error {
	tag, err := tx.Exec(ctx, `UPDATE offers SET status = 'ACCEPTED', responded_at = now()
		WHERE id = $1 AND ride_id = $2 AND driver_id = $3 AND status = 'PENDING' AND expires_at > now()`,
		offerID, rideID, driverID)
	if err != nil {
		return pgErr(err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	o, err := LatestOffer(ctx, tx, rideID, driverID)
	if err != nil {
		return err
	}
	switch {
	case o == nil || o.ID != offerID:
		return dispatch.Conflict(dispatch.ReasonNotYourOffer, fmt.Sprintf("driver %s holds no offer for ride %s", driverID, rideID))
	case o.Status == dispatch.OfferPending || o.Status == dispatch.OfferExpired:
		return dispatch.Conflict(dispatch.ReasonOfferExpired, "the offer window closed at "+o.ExpiresAt.UTC().Format("2006-01-02T15:04:05.000Z07:00"))
	}
	return dispatch.Conflict(dispatch.ReasonNotYourOffer, fmt.Sprintf("the offer to driver %s is %s", driverID, o.Status))
}

// SetOfferStatus moves offer id from PENDING to to and reports whether it was still pending.
func SetOfferStatus(ctx context.Context, tx pgx.Tx, id string, to dispatch.OfferStatus) (bool, error) {
	tag, err := tx.Exec(ctx, `UPDATE offers SET status = $2, responded_at = now() WHERE id = $1 AND status = 'PENDING'`, id, string(to))
	if err != nil {
		return false, pgErr(err)
	}
	return tag.RowsAffected() == 1, nil
}

// PrepareMatch is the offer bookkeeping of one match in a single round trip: it marks the ride's
// PENDING offers whose window closed as EXPIRED, and returns every driver ever offered the ride
// (to exclude) and whether a live PENDING offer remains (then there is nothing to match).
func PrepareMatch(ctx context.Context, tx pgx.Tx, rideID string) (offered map[string]bool, livePending bool, err error) {
	rows, err := tx.Query(ctx, `WITH expired AS (
			UPDATE offers SET status = 'EXPIRED', responded_at = now()
			WHERE ride_id = $1 AND status = 'PENDING' AND expires_at <= now() RETURNING id)
		SELECT driver_id, status = 'PENDING' AND id NOT IN (SELECT id FROM expired)
		FROM offers WHERE ride_id = $1`, rideID)
	if err != nil {
		return nil, false, pgErr(err)
	}
	defer rows.Close()
	offered = map[string]bool{}
	for rows.Next() {
		var id string
		var live bool
		if err := rows.Scan(&id, &live); err != nil {
			return nil, false, pgErr(err)
		}
		offered[id] = true
		livePending = livePending || live
	}
	return offered, livePending, pgErr(rows.Err())
}
