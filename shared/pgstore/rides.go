package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/flagdown/flagdown/shared/dispatch"
)

// Querier is what both a pool and a transaction offer.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

const rideCols = `id, rider_id, status, pickup_lat, pickup_lng, dropoff_lat, dropoff_lng, coalesce(driver_id, ''),
	fare_estimate_cents, est_distance_m, est_duration_s, match_attempts, coalesce(match_note, ''), version,
	created_at, match_started_at, first_match_at, first_offered_at, accepted_at, started_at, completed_at, cancelled_at,
	surge_multiplier, surge_computed, quoted_wait_s, quoted_wait_cal_s`

func scanRide(row pgx.Row) (*dispatch.Ride, error) {
	var r dispatch.Ride
	var status string
	err := row.Scan(&r.ID, &r.RiderID, &status, &r.Pickup.Lat, &r.Pickup.Lng, &r.Dropoff.Lat, &r.Dropoff.Lng,
		&r.DriverID, &r.FareEstimateCents, &r.EstDistanceM, &r.EstDurationS, &r.MatchAttempts, &r.MatchNote, &r.Version,
		&r.CreatedAt, &r.MatchStartedAt, &r.FirstMatchAt, &r.FirstOfferedAt, &r.AcceptedAt, &r.StartedAt, &r.CompletedAt, &r.CancelledAt,
		&r.SurgeMultiplier, &r.SurgeComputed, &r.QuotedWaitS, &r.QuotedWaitCalS)
	if err != nil {
		return nil, err
	}
	r.Status = dispatch.RideStatus(status)
	return &r, nil
}

// pgErr maps PostgreSQL failures to flagdown errors: unique violations of the ride guards become
// conflicts with their reason, connection failures unavailable, everything else internal.
func pgErr(err error) error {
	if err == nil {
		return nil
	}
	var de *dispatch.Error
	if errors.As(err, &de) {
		return err
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "23505" && pe.ConstraintName == "rides_one_active_per_driver":
			return &dispatch.Error{Code: dispatch.CodeConflict, Reason: dispatch.ReasonDriverBusy,
				Message: "the driver already has an active ride", Err: err}
		case pe.Code == "23505" && pe.ConstraintName == "rides_one_open_per_rider":
			return &dispatch.Error{Code: dispatch.CodeConflict, Reason: dispatch.ReasonRiderHasOpenRide,
				Message: "the rider already has an open ride", Err: err}
		case pe.Code == "23505" && pe.ConstraintName == "offers_one_pending_per_ride":
			return &dispatch.Error{Code: dispatch.CodeConflict, Reason: "offer_pending",
				Message: "the ride already has a pending offer", Err: err}
		case pe.Code == "23505" && pe.ConstraintName == "offers_one_pending_per_driver":
			return &dispatch.Error{Code: dispatch.CodeConflict, Reason: dispatch.ReasonDriverBusy,
				Message: "the driver already holds a pending offer", Err: err}
		case pe.Code == "23514" && pe.ConstraintName == "offers_driver_not_on_ride":
			return &dispatch.Error{Code: dispatch.CodeConflict, Reason: dispatch.ReasonDriverBusy,
				Message: "the driver is on a ride and cannot be offered another", Err: err}
		case pe.Code[:2] == "08" || pe.Code[:2] == "53" || pe.Code[:2] == "57":
			return dispatch.Unavailable("postgres", err)
		}
		return dispatch.Internal(err)
	}
	if pgconn.SafeToRetry(err) || pgconn.Timeout(err) {
		return dispatch.Unavailable("postgres", err)
	}
	return dispatch.Internal(err)
}

// IsUniqueViolation reports whether err is a unique violation of the named index.
func IsUniqueViolation(err error, index string) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505" && pe.ConstraintName == index
}

// InsertRide inserts r (status REQUESTED) with an optional idempotency key. A second open ride of
// the same rider is a conflict (rider_has_open_ride), enforced by the rides_one_open_per_rider index.
func InsertRide(ctx context.Context, tx pgx.Tx, r *dispatch.Ride, idempotencyKey string) error {
	var key *string
	if idempotencyKey != "" {
		key = &idempotencyKey
	}
	err := tx.QueryRow(ctx, insertRideSQL, insertRideArgs(r, key)...).Scan(&r.CreatedAt, &r.MatchStartedAt, &r.Version)
	if IsUniqueViolation(err, "rides_idempotency") {
		return err // the caller looks the ride up
	}
	return pgErr(err)
}

const insertRideSQL = `INSERT INTO rides (id, rider_id, status, pickup_lat, pickup_lng, dropoff_lat, dropoff_lng,
		fare_estimate_cents, est_distance_m, est_duration_s, idempotency_key, surge_multiplier, surge_computed, quoted_wait_s, quoted_wait_cal_s)
		VALUES ($1, $2, 'REQUESTED', $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) RETURNING created_at, match_started_at, version`

func insertRideArgs(r *dispatch.Ride, key *string) []any {
	return []any{r.ID, r.RiderID, r.Pickup.Lat, r.Pickup.Lng, r.Dropoff.Lat, r.Dropoff.Lng,
		r.FareEstimateCents, r.EstDistanceM, r.EstDurationS, key, dispatch.RoundMultiplier(r.SurgeMultiplier), r.SurgeComputed, r.QuotedWaitS, r.QuotedWaitCalS}
}

// CreateRide inserts r (status REQUESTED, as InsertRide) and its ride.requested outbox event ev in
// one transaction and one round trip: both INSERTs go in one pipelined batch, which PostgreSQL runs
// as one implicit transaction (committed at the batch's Sync, rolled back whole if either fails).
// ev.Data must marshal to a JSON object; its requested_at member is set to the transaction's
// now(), which is the ride's created_at (the column's default), as r.CreatedAt is on return; the
// outbox row records ctx's trace context, as InsertOutbox's does, and the commit wakes the local
// relay (DB.OnOutboxCommit). It returns the outbox event id.
// Errors are InsertRide's (the raw unique violation of rides_idempotency, the rider_has_open_ride
// conflict, ...), or the outbox INSERT's.
func CreateRide(ctx context.Context, db *DB, r *dispatch.Ride, idempotencyKey string, ev OutboxEvent) (string, error) {
	var key *string
	if idempotencyKey != "" {
		key = &idempotencyKey
	}
	id, args, err := outboxArgs(ctx, ev)
	if err != nil {
		return "", err
	}
	b := &pgx.Batch{}
	b.Queue(insertRideSQL, insertRideArgs(r, key)...)
	b.Queue(`INSERT INTO outbox (event_id, type, source, subject, ordering_key, data, traceparent, tracestate)
		VALUES ($1, $2, $3, $4, $5, jsonb_set($6::jsonb, '{requested_at}', to_jsonb(now())), $7, $8)`, args...)
	br := db.Pool.SendBatch(ctx, b)
	err = br.QueryRow().Scan(&r.CreatedAt, &r.MatchStartedAt, &r.Version)
	if err == nil {
		if _, err = br.Exec(); err != nil {
			err = fmt.Errorf("pgstore: insert outbox: %w", err)
		}
	}
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr // the commit at Sync
	}
	switch {
	case err == nil:
		db.committedOutbox()
		return id, nil
	case IsUniqueViolation(err, "rides_idempotency"):
		return "", err // the caller looks the ride up
	case errors.As(err, new(*pgconn.PgError)):
		return "", pgErr(err)
	}
	return "", dispatch.Unavailable("postgres", err)
}

// RideByIdempotencyKey returns the ride riderID created with key, or nil.
func RideByIdempotencyKey(ctx context.Context, q Querier, riderID, key string) (*dispatch.Ride, error) {
	r, err := scanRide(q.QueryRow(ctx, `SELECT `+rideCols+` FROM rides WHERE rider_id = $1 AND idempotency_key = $2`, riderID, key))
	if IsNoRows(err) {
		return nil, nil
	}
	return r, pgErr(err)
}

// OpenRideOf returns riderID's REQUESTED, ACCEPTED or IN_PROGRESS ride, or nil.
func OpenRideOf(ctx context.Context, q Querier, riderID string) (*dispatch.Ride, error) {
	r, err := scanRide(q.QueryRow(ctx, `SELECT `+rideCols+` FROM rides
		WHERE rider_id = $1 AND status IN ('REQUESTED','ACCEPTED','IN_PROGRESS')`, riderID))
	if IsNoRows(err) {
		return nil, nil
	}
	return r, pgErr(err)
}

// CurrentRideOfDriver returns driverID's ACCEPTED or IN_PROGRESS ride without locking it, or nil.
func CurrentRideOfDriver(ctx context.Context, q Querier, driverID string) (*dispatch.Ride, error) {
	r, err := scanRide(q.QueryRow(ctx, `SELECT `+rideCols+` FROM rides
		WHERE driver_id = $1 AND status IN ('ACCEPTED','IN_PROGRESS')`, driverID))
	if IsNoRows(err) {
		return nil, nil
	}
	return r, pgErr(err)
}

// GetRide returns ride id, locking its row until the end of the transaction when forUpdate is true.
// It returns a not_found error when there is no such ride (or id is not a UUID).
func GetRide(ctx context.Context, q Querier, id string, forUpdate bool) (*dispatch.Ride, error) {
	sql := `SELECT ` + rideCols + ` FROM rides WHERE id = $1`
	if forUpdate {
		sql += ` FOR UPDATE`
	}
	r, err := scanRide(q.QueryRow(ctx, sql, id))
	if IsNoRows(err) {
		return nil, dispatch.NotFound("ride", id)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "22P02" { // invalid input syntax for type uuid
		return nil, dispatch.NotFound("ride", id)
	}
	return r, pgErr(err)
}

// timestampColumn is the column stamped when a ride enters a status.
var timestampColumn = map[dispatch.RideStatus]string{
	dispatch.RideAccepted:   "accepted_at",
	dispatch.RideInProgress: "started_at",
	dispatch.RideCompleted:  "completed_at",
	dispatch.RideCancelled:  "cancelled_at",
}

// StatusChange describes a ride status update.
type StatusChange struct {
	From, To dispatch.RideStatus
	// DriverID is the ride's driver after the change ("" clears it).
	DriverID string
	// CancelledBy and CancelReason are recorded when To is CANCELLED.
	CancelledBy  dispatch.Actor
	CancelReason string
}

// SetRideStatus moves ride id from c.From to c.To (conditional UPDATE ... WHERE status = From),
// stamps the matching timestamp and bumps the ride's version. A re-opened ride (To REQUESTED) loses
// its acceptance and starts a fresh retry budget (match_attempts 0, match_started_at now). It returns
// when the change happened and the new version, a ride_taken conflict if the ride was no longer in
// c.From, and driver_busy if the driver already has another active ride (the partial unique index).
func SetRideStatus(ctx context.Context, tx pgx.Tx, id string, c StatusChange) (time.Time, int64, error) {
	var driver *string
	if c.DriverID != "" {
		driver = &c.DriverID
	}
	set := ""
	if col, ok := timestampColumn[c.To]; ok {
		set = ", " + col + " = now()"
	}
	if c.To == dispatch.RideRequested {
		set = ", accepted_at = NULL, match_attempts = 0, match_started_at = now()"
	}
	var by, reason *string
	if c.To == dispatch.RideCancelled {
		b := string(c.CancelledBy)
		by, reason = &b, &c.CancelReason
	}
	var at time.Time
	var version int64
	err := tx.QueryRow(ctx, `UPDATE rides SET status = $3, driver_id = $4, updated_at = now(), version = version + 1,
		cancelled_by = coalesce($5, cancelled_by), cancel_reason = coalesce($6, cancel_reason)`+set+`
		WHERE id = $1 AND status = $2 RETURNING updated_at, version`,
		id, string(c.From), string(c.To), driver, by, reason).Scan(&at, &version)
	if IsNoRows(err) {
		return at, 0, dispatch.Conflict(dispatch.ReasonRideTaken, fmt.Sprintf("ride %s is no longer %s", id, c.From))
	}
	return at, version, pgErr(err)
}

// NoteMatchAttempt counts a match attempt on ride id and records note (why nobody was offered, or "").
// It stamps first_match_at on the first attempt, and first_offered_at when offered is true and it is unset,
// and answers every ride.retry issued for the ride so far (unanswered_retries 0, see NoteRetryIssued).
func NoteMatchAttempt(ctx context.Context, tx pgx.Tx, id string, offered bool, note string) error {
	_, err := tx.Exec(ctx, `UPDATE rides SET match_attempts = match_attempts + 1, match_note = nullif($2, ''),
		first_offered_at = CASE WHEN $3 THEN coalesce(first_offered_at, now()) ELSE first_offered_at END,
		first_match_at = coalesce(first_match_at, now()), unanswered_retries = 0,
		updated_at = now() WHERE id = $1`, id, note, offered)
	return pgErr(err)
}

// InsertHailedRide inserts r as a street-hail pairing made it (origin hail): ACCEPTED at once with
// driver r.DriverID (accepted_at now), without any offer. It sets r.CreatedAt, r.MatchStartedAt,
// r.AcceptedAt and r.Version. The ride guards decide the last race: a driver who already has an
// active ride gets driver_busy (rides_one_active_per_driver), a rider with an open ride
// rider_has_open_ride (rides_one_open_per_rider).
func InsertHailedRide(ctx context.Context, tx pgx.Tx, r *dispatch.Ride) error {
	var accepted time.Time
	err := tx.QueryRow(ctx, `INSERT INTO rides (id, rider_id, status, pickup_lat, pickup_lng, dropoff_lat, dropoff_lng,
		fare_estimate_cents, est_distance_m, est_duration_s, driver_id, accepted_at, origin)
		VALUES ($1, $2, 'ACCEPTED', $3, $4, $5, $6, $7, $8, $9, $10, now(), 'hail')
		RETURNING created_at, match_started_at, accepted_at, version`,
		r.ID, r.RiderID, r.Pickup.Lat, r.Pickup.Lng, r.Dropoff.Lat, r.Dropoff.Lng,
		r.FareEstimateCents, r.EstDistanceM, r.EstDurationS, r.DriverID).Scan(&r.CreatedAt, &r.MatchStartedAt, &accepted, &r.Version)
	if err != nil {
		return pgErr(err)
	}
	r.AcceptedAt = &accepted
	return nil
}
