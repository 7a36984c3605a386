package pgstore

import (
	"context"
	"time"
)

// This file holds the read-only queries of `flagdown verify` (package shared/invariants). Every
// age is measured with PostgreSQL's clock (now()); nothing here writes.

// Violations is what one invariant query found: how many rows (or drivers, or rides) break the
// rule, and the first of their ids in id order.
type Violations struct {
	// Count is the number of offending rows.
	Count int
	// IDs are at most the requested limit of their ids, sorted.
	IDs []string
}

// violations runs `WITH v(id) AS (<ids>) SELECT count, first ids` where ids is a query returning one
// text column. $1 is the example limit; the query's own arguments start at $2.
func violations(ctx context.Context, q Querier, limit int, ids string, args ...any) (Violations, error) {
	var v Violations
	err := q.QueryRow(ctx, `WITH v(id) AS (`+ids+`)
		SELECT count(*), coalesce((array_agg(id ORDER BY id))[1:$1], '{}') FROM v`,
		append([]any{max(limit, 0)}, args...)...).Scan(&v.Count, &v.IDs)
	if err != nil {
		return Violations{}, pgErr(err)
	}
	return v, nil
}

// activeStatuses is the SQL list of the statuses in which a ride holds its driver.
const activeStatuses = `('ACCEPTED','IN_PROGRESS')`

// DriversWithTwoActiveRides counts the drivers with more than one ACCEPTED or IN_PROGRESS ride
// (the partial unique index rides_one_active_per_driver forbids it; this checks that it held) and
// returns up to limit of their ids.
func DriversWithTwoActiveRides(ctx context.Context, q Querier, limit int) (Violations, error) {
	return violations(ctx, q, limit, `SELECT driver_id FROM rides WHERE status IN `+activeStatuses+`
		GROUP BY driver_id HAVING count(*) > 1`)
}

// AssignmentRowMismatches counts the drivers whose driver_assignments row disagrees with rides:
// the row names a ride that is not active with him in the row's status, or he has an active ride
// that his row does not name (another ride, none, or no row at all). Both are written in the same
// transaction by shared/lifecycle, so no grace applies. It returns up to limit driver ids.
func AssignmentRowMismatches(ctx context.Context, q Querier, limit int) (Violations, error) {
	return violations(ctx, q, limit, `
		SELECT a.driver_id FROM driver_assignments a
		WHERE a.ride_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM rides r
			WHERE r.id = a.ride_id AND r.driver_id = a.driver_id AND r.status = a.ride_status)
		UNION
		SELECT r.driver_id FROM rides r
		WHERE r.status IN `+activeStatuses+` AND NOT EXISTS (SELECT 1 FROM driver_assignments a
			WHERE a.driver_id = r.driver_id AND a.ride_id = r.id AND a.ride_status = r.status)`)
}

// RidesWithTwoPendingOffers counts the rides with more than one PENDING offer (the partial unique
// index offers_one_pending_per_ride forbids it) and returns up to limit ride ids.
func RidesWithTwoPendingOffers(ctx context.Context, q Querier, limit int) (Violations, error) {
	return violations(ctx, q, limit, `SELECT ride_id::text FROM offers WHERE status = 'PENDING'
		GROUP BY ride_id HAVING count(*) > 1`)
}

// DriversWithTwoPendingOffers counts the drivers holding more than one PENDING offer and returns
// up to limit driver ids.
func DriversWithTwoPendingOffers(ctx context.Context, q Querier, limit int) (Violations, error) {
	return violations(ctx, q, limit, `SELECT driver_id FROM offers WHERE status = 'PENDING'
		GROUP BY driver_id HAVING count(*) > 1`)
}

// PendingOffersWhileOnRide counts the PENDING offers whose driver has an ACCEPTED or IN_PROGRESS
// ride (both change in one transaction, so no grace applies) and returns up to limit offer ids.
func PendingOffersWhileOnRide(ctx context.Context, q Querier, limit int) (Violations, error) {
	return violations(ctx, q, limit, `SELECT o.id::text FROM offers o
		WHERE o.status = 'PENDING' AND EXISTS (SELECT 1 FROM rides r
			WHERE r.driver_id = o.driver_id AND r.status IN `+activeStatuses+`)`)
}

// OverduePendingOffers counts the PENDING offers whose window closed more than grace ago
// (expires_at < now() - grace): their timeout was neither acted on nor repaired. It returns up to
// limit offer ids.
func OverduePendingOffers(ctx context.Context, q Querier, grace time.Duration, limit int) (Violations, error) {
	return violations(ctx, q, limit, `SELECT id::text FROM offers
		WHERE status = 'PENDING' AND expires_at < now() - $2 * interval '1 millisecond'`, grace.Milliseconds())
}

// OutboxBacklog counts the outbox rows still unpublished more than grace after they were written
// (created_at < now() - grace) and returns up to limit of their event ids.
func OutboxBacklog(ctx context.Context, q Querier, grace time.Duration, limit int) (Violations, error) {
	return violations(ctx, q, limit, `SELECT event_id::text FROM outbox
		WHERE published_at IS NULL AND created_at < now() - $2 * interval '1 millisecond'`, grace.Milliseconds())
}

// IdleRequestedRideIDs returns, sorted, the REQUESTED rides that are idle by the rule reconcile
// retries them by (idleRide: nothing touched them for grace, or longer while retries issued for
// them are unanswered) and that have no PENDING offer at all, restricted to ids when ids is
// not nil. These are the rides only a retry timer can still move (the caller checks Redis for it).
// A ride with a PENDING offer past its window is not returned: that offer is the finding
// (OverduePendingOffers).
func IdleRequestedRideIDs(ctx context.Context, q Querier, grace time.Duration, ids []string) ([]string, error) {
	filter := ""
	args := []any{grace.Milliseconds()}
	if ids != nil {
		filter, args = ` AND r.id::text = ANY($2)`, append(args, ids)
	}
	return strings1(ctx, q, `SELECT r.id::text FROM rides r
		WHERE `+idleRide+`
		  AND NOT EXISTS (SELECT 1 FROM offers o WHERE o.ride_id = r.id AND o.status = 'PENDING')`+filter+`
		ORDER BY r.id`, args...)
}

// RideDriver is an active ride and its driver.
type RideDriver struct {
	RideID   string
	DriverID string
}

// SettledActiveRides returns, sorted by ride id, the ACCEPTED and IN_PROGRESS rides with their
// driver whose ride row and whose driver's driver_assignments row both last changed more than grace
// ago (so their Redis effects had time to land), restricted to ids when ids is not nil.
func SettledActiveRides(ctx context.Context, q Querier, grace time.Duration, ids []string) ([]RideDriver, error) {
	filter := ""
	args := []any{grace.Milliseconds()}
	if ids != nil {
		filter, args = ` AND r.id::text = ANY($2)`, append(args, ids)
	}
	rows, err := q.Query(ctx, `SELECT r.id::text, r.driver_id FROM rides r
		LEFT JOIN driver_assignments a ON a.driver_id = r.driver_id
		WHERE r.status IN `+activeStatuses+`
		  AND greatest(r.updated_at, coalesce(a.updated_at, r.updated_at)) < now() - $1 * interval '1 millisecond'`+filter+`
		ORDER BY r.id`, args...)
	if err != nil {
		return nil, pgErr(err)
	}
	defer rows.Close()
	var out []RideDriver
	for rows.Next() {
		var rd RideDriver
		if err := rows.Scan(&rd.RideID, &rd.DriverID); err != nil {
			return nil, pgErr(err)
		}
		out = append(out, rd)
	}
	return out, pgErr(rows.Err())
}

// AcceptedPastPickupDeadline counts the ACCEPTED rides accepted longer than deadline + grace ago:
// the pickup deadline (FLAGDOWN_PICKUP_DEADLINE) re-opens such a ride (reason pickup_overdue), so
// one still ACCEPTED missed its outcome. A deadline of 0 (off) finds none. It returns up to limit
// ride ids.
func AcceptedPastPickupDeadline(ctx context.Context, q Querier, deadline, grace time.Duration, limit int) (Violations, error) {
	if deadline <= 0 {
		return Violations{IDs: []string{}}, nil
	}
	return violations(ctx, q, limit, `SELECT id::text FROM rides
		WHERE status = 'ACCEPTED' AND accepted_at < now() - $2 * interval '1 millisecond'`, (deadline + grace).Milliseconds())
}

// OpenPendingOffer is a PENDING offer and its driver.
type OpenPendingOffer struct {
	OfferID  string
	DriverID string
}

// OpenPendingOffers returns, sorted by offer id, the PENDING offers created more than grace ago
// whose window closes more than grace from now (by PostgreSQL's clock): their driver's offer lock
// must hold them. Restricted to ids when ids is not nil.
func OpenPendingOffers(ctx context.Context, q Querier, grace time.Duration, ids []string) ([]OpenPendingOffer, error) {
	filter := ""
	args := []any{grace.Milliseconds()}
	if ids != nil {
		filter, args = ` AND id::text = ANY($2)`, append(args, ids)
	}
	rows, err := q.Query(ctx, `SELECT id::text, driver_id FROM offers
		WHERE status = 'PENDING' AND created_at < now() - $1 * interval '1 millisecond'
		  AND expires_at > now() + $1 * interval '1 millisecond'`+filter+`
		ORDER BY id`, args...)
	if err != nil {
		return nil, pgErr(err)
	}
	defer rows.Close()
	var out []OpenPendingOffer
	for rows.Next() {
		var o OpenPendingOffer
		if err := rows.Scan(&o.OfferID, &o.DriverID); err != nil {
			return nil, pgErr(err)
		}
		out = append(out, o)
	}
	return out, pgErr(rows.Err())
}

// LockedOffersNotPending counts, among the offers that offer locks in Redis hold (offerIDs, with
// the end of each one's window, expires, in the same order), those that are not PENDING in
// PostgreSQL: the offer was answered, expired or cancelled more than grace ago (its lock should
// have been released), or there is no such offer and its window closed more than grace ago (a
// lock outliving its own TTL; a nil window, a lock flagdown did not write, is judged by its row
// alone). An offer not yet committed is neither. It returns up to limit offer ids.
func LockedOffersNotPending(ctx context.Context, q Querier, offerIDs []string, expires []*time.Time, grace time.Duration, limit int) (Violations, error) {
	return violations(ctx, q, limit, `SELECT l.id FROM unnest($2::text[], $3::timestamptz[]) AS l(id, exp)
		LEFT JOIN offers o ON o.id::text = l.id
		WHERE (o.id IS NULL AND l.exp < now() - $4 * interval '1 millisecond')
		   OR (o.status <> 'PENDING' AND coalesce(o.responded_at, o.created_at) < now() - $4 * interval '1 millisecond')`,
		offerIDs, expires, grace.Milliseconds())
}
