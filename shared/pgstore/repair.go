package pgstore

import (
	"context"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flagdown/flagdown/shared/dispatch"
)

// ActiveRideOfDriver returns driverID's ACCEPTED or IN_PROGRESS ride locked for update, or nil.
func ActiveRideOfDriver(ctx context.Context, tx pgx.Tx, driverID string) (*dispatch.Ride, error) {
	r, err := scanRide(tx.QueryRow(ctx, `SELECT `+rideCols+` FROM rides
		WHERE driver_id = $1 AND status IN ('ACCEPTED','IN_PROGRESS') FOR UPDATE`, driverID))
	if IsNoRows(err) {
		return nil, nil
	}
	return r, pgErr(err)
}

// DueOffersOfDriver returns driverID's PENDING offers whose window closed (expires_at at most slack
// after PostgreSQL's now, absorbing the gap between Redis's TTL and PostgreSQL's clock), without
// locking them: the caller locks each offer's ride first, then expires the offer (ExpireOffer).
func DueOffersOfDriver(ctx context.Context, q Querier, driverID string, slack time.Duration) ([]dispatch.Offer, error) {
	rows, err := q.Query(ctx, `SELECT `+offerCols+` FROM offers
		WHERE driver_id = $1 AND status = 'PENDING' AND expires_at <= now() + $2 * interval '1 millisecond'
		ORDER BY ride_id`, driverID, slack.Milliseconds())
	if err != nil {
		return nil, pgErr(err)
	}
	defer rows.Close()
	var out []dispatch.Offer
	for rows.Next() {
		o, err := scanOffer(rows)
		if err != nil {
			return nil, pgErr(err)
		}
		out = append(out, *o)
	}
	return out, pgErr(rows.Err())
}

// ExpireOffer marks offer id EXPIRED if it is still PENDING and its window closed (expires_at at
// most slack after PostgreSQL's now). It reports whether it did. Lock the offer's ride first.
func ExpireOffer(ctx context.Context, tx pgx.Tx, id string, slack time.Duration) (bool, error) {
	tag, err := tx.Exec(ctx, `UPDATE offers SET status = 'EXPIRED', responded_at = now()
		WHERE id = $1 AND status = 'PENDING' AND expires_at <= now() + $2 * interval '1 millisecond'`, id, slack.Milliseconds())
	if err != nil {
		return false, pgErr(err)
	}
	return tag.RowsAffected() == 1, nil
}

// DriversWithOverdueOffers returns the drivers holding PENDING offers whose window closed more
// than grace ago (their timeout was missed), at most limit.
func DriversWithOverdueOffers(ctx context.Context, q Querier, grace time.Duration, limit int) ([]string, error) {
	return strings1(ctx, q, `SELECT DISTINCT driver_id FROM offers
		WHERE status = 'PENDING' AND expires_at < now() - $1 * interval '1 millisecond' LIMIT $2`, grace.Milliseconds(), limit)
}

// RetryBackoffMaxDoublings caps n in the wait before an idle ride is retried again, grace × 2^n
// (n: rides.unanswered_retries): at most 2^4 = 16 graces (80 s at the default 5 s grace) between
// two retries nobody answered.
const RetryBackoffMaxDoublings = 4

// idleRide is the SQL condition (over rides r, $1 the grace in milliseconds) that a REQUESTED ride
// has been left alone long enough to need a retry: nothing touched it for grace × 2^n, where n is
// the number of ride.retry events issued for it that match has not answered with an attempt yet
// (capped at RetryBackoffMaxDoublings). A retry still waiting in match's backlog is thus not
// issued again every grace (each pass would lengthen the backlog it waits on), and a lost one is
// still retried, later each time. Reconcile (IdleRequestedRides) and the invariant check
// (IdleRequestedRideIDs) decide idleness by this one rule.
var idleRide = `r.status = 'REQUESTED' AND r.updated_at < now() - $1 * interval '1 millisecond'
		* power(2, least(r.unanswered_retries, ` + strconv.Itoa(RetryBackoffMaxDoublings) + `))`

// IdleRequestedRides returns REQUESTED rides without a PENDING offer that are idle (idleRide:
// candidates for a lost ride.requested, retry timer, offer timeout or retry), oldest first.
func IdleRequestedRides(ctx context.Context, q Querier, grace time.Duration, limit int) ([]string, error) {
	return strings1(ctx, q, `SELECT r.id::text FROM rides r
		WHERE `+idleRide+`
		  AND NOT EXISTS (SELECT 1 FROM offers o WHERE o.ride_id = r.id AND o.status = 'PENDING'
		                  AND o.expires_at > now() - $1 * interval '1 millisecond')
		ORDER BY r.created_at LIMIT $2`, grace.Milliseconds(), limit)
}

// NoteRetryIssued counts one more ride.retry issued for ride id that match has not answered yet
// (rides.unanswered_retries, see idleRide) and touches the ride.
func NoteRetryIssued(ctx context.Context, tx pgx.Tx, id string) error {
	_, err := tx.Exec(ctx, `UPDATE rides SET updated_at = now(), unanswered_retries = unanswered_retries + 1 WHERE id = $1`, id)
	return pgErr(err)
}

// TouchRide sets updated_at = now() (and match_note when note is not empty).
func TouchRide(ctx context.Context, tx pgx.Tx, id, note string) error {
	_, err := tx.Exec(ctx, `UPDATE rides SET updated_at = now(), match_note = coalesce(nullif($2, ''), match_note) WHERE id = $1`, id, note)
	return pgErr(err)
}

// UnpublishedOutbox counts outbox rows older than grace that are still unpublished.
func UnpublishedOutbox(ctx context.Context, q Querier, grace time.Duration) (int, error) {
	var n int
	err := q.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE published_at IS NULL AND created_at < now() - $1 * interval '1 millisecond'`, grace.Milliseconds()).Scan(&n)
	return n, pgErr(err)
}

// WakeRelays sends the outbox notification for this schema, waking every relay.
func (db *DB) WakeRelays(ctx context.Context) error {
	_, err := db.Pool.Exec(ctx, `SELECT pg_notify('flagdown_outbox', $1)`, db.Schema)
	return pgErr(err)
}

func strings1(ctx context.Context, q Querier, sql string, args ...any) ([]string, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, pgErr(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, pgErr(err)
		}
		out = append(out, s)
	}
	return out, pgErr(rows.Err())
}

// overdueSince maps the active statuses to the column their deadline is counted from.
var overdueSince = map[dispatch.RideStatus]string{dispatch.RideAccepted: "accepted_at", dispatch.RideInProgress: "started_at"}

// OverdueRides returns the rides in status (ACCEPTED, counted from accepted_at, or IN_PROGRESS,
// counted from started_at) for longer than age by PostgreSQL's clock, newest first (a ride already
// handled does not hide a new one behind it), at most limit, restricted to ids when ids is not nil.
func OverdueRides(ctx context.Context, q Querier, status dispatch.RideStatus, age time.Duration, ids []string, limit int) ([]string, error) {
	col, ok := overdueSince[status]
	if !ok {
		return nil, dispatch.Invalid("status", "must be ACCEPTED or IN_PROGRESS")
	}
	filter := ""
	args := []any{age.Milliseconds(), limit}
	if ids != nil {
		filter, args = ` AND id::text = ANY($3)`, append(args, ids)
	}
	// The status is a literal (a key of overdueSince), so the partial index of active rides
	// (rides_one_active_per_driver) bounds the scan.
	return strings1(ctx, q, `SELECT id::text FROM rides
		WHERE status = '`+string(status)+`' AND `+col+` < now() - $1 * interval '1 millisecond'`+filter+`
		ORDER BY `+col+` DESC LIMIT $2`, args...)
}

// OutboxEventsExist reports which of the event ids have an outbox row (published or not, until
// retention prunes it).
func OutboxEventsExist(ctx context.Context, q Querier, eventIDs []string) (map[string]bool, error) {
	found, err := strings1(ctx, q, `SELECT event_id::text FROM outbox WHERE event_id = ANY($1::uuid[])`, eventIDs)
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(found))
	for _, id := range found {
		out[id] = true
	}
	return out, nil
}

// DecidedOffers returns those of offerIDs (offer locks' offers, from Redis) whose offer PostgreSQL
// holds decided (no longer PENDING) since more than grace: their locks hold nothing any more
// (reconcile's offer_locks_released). An id PostgreSQL does not hold is not among them.
func DecidedOffers(ctx context.Context, q Querier, offerIDs []string, grace time.Duration) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT id::text FROM offers WHERE id::text = ANY($1) AND status <> 'PENDING'
		AND coalesce(responded_at, created_at) < now() - $2 * interval '1 millisecond' ORDER BY id`,
		offerIDs, grace.Milliseconds())
	if err != nil {
		return nil, pgErr(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return ids, pgErr(err)
}

// LockedOffer is a PENDING offer as its driver's offer lock in Redis holds it, with what is left
// of its window by PostgreSQL's clock (negative once it closed).
type LockedOffer struct {
	DriverID  string
	Offer     dispatch.LiveOffer
	Remaining time.Duration
}

// PendingOffers returns up to limit PENDING offers with their rides' pickup and dropoff, the
// soonest deadline first (what reconcile puts back in Redis after Redis lost its data).
func PendingOffers(ctx context.Context, q Querier, limit int) ([]LockedOffer, error) {
	rows, err := q.Query(ctx, `SELECT o.id::text, o.ride_id::text, o.driver_id, r.pickup_lat, r.pickup_lng,
		       r.dropoff_lat, r.dropoff_lng, o.distance_m, o.expires_at,
		       (extract(epoch FROM o.expires_at - now()) * 1000)::bigint
		FROM offers o JOIN rides r ON r.id = o.ride_id
		WHERE o.status = 'PENDING' ORDER BY o.expires_at LIMIT $1`, limit)
	if err != nil {
		return nil, pgErr(err)
	}
	defer rows.Close()
	var out []LockedOffer
	for rows.Next() {
		var p LockedOffer
		var ms int64
		o := &p.Offer
		if err := rows.Scan(&o.OfferID, &o.RideID, &p.DriverID, &o.Pickup.Lat, &o.Pickup.Lng, &o.Dropoff.Lat, &o.Dropoff.Lng,
			&o.DistanceM, &o.ExpiresAt, &ms); err != nil {
			return nil, pgErr(err)
		}
		o.ExpiresAt = o.ExpiresAt.UTC()
		p.Remaining = time.Duration(ms) * time.Millisecond
		out = append(out, p)
	}
	return out, pgErr(rows.Err())
}

// RedisGeneration returns the Redis generation (redisstore.Store.Generation) reconcile last
// recorded for the key prefix; ok is false when none is recorded (a new deployment).
func RedisGeneration(ctx context.Context, q Querier, prefix string) (gen string, ok bool, err error) {
	err = q.QueryRow(ctx, `SELECT generation FROM redis_generations WHERE prefix = $1`, prefix).Scan(&gen)
	if IsNoRows(err) {
		return "", false, nil
	}
	return gen, err == nil, pgErr(err)
}

// RecordRedisGeneration records gen as the Redis generation of the key prefix.
func RecordRedisGeneration(ctx context.Context, q Querier, prefix, gen string) error {
	_, err := q.Exec(ctx, `INSERT INTO redis_generations (prefix, generation) VALUES ($1, $2)
		ON CONFLICT (prefix) DO UPDATE SET generation = excluded.generation, recorded_at = now()`, prefix, gen)
	return pgErr(err)
}
