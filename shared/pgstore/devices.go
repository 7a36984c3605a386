package pgstore

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Device is a devices row: a phone a rider or driver registered for mobile push, and the Amazon SNS
// platform endpoint that delivers to it (shared/push writes and reads these rows).
type Device struct {
	// Role is the owner's role, driver or rider.
	Role string
	// UserID is the owner's rider or driver id.
	UserID string
	// Platform is the push service: fcm, apns or apns_sandbox.
	Platform string
	// Token is the device token the push service gave the app.
	Token string
	// EndpointARN is the SNS platform endpoint of Token; one row per endpoint.
	EndpointARN string
	// Enabled is false once SNS said the endpoint is disabled; no push goes to a disabled device.
	Enabled bool
	// CreatedAt is when this owner registered the token first (PostgreSQL's clock).
	CreatedAt time.Time
	// UpdatedAt is when the row last changed: registration, re-registration or disabling.
	UpdatedAt time.Time
}

const deviceCols = `role, user_id, platform, token, endpoint_arn, enabled, created_at, updated_at`

func scanDevices(rows pgx.Rows) ([]Device, error) {
	defer rows.Close()
	var out []Device
	for rows.Next() {
		var d Device
		if err := rows.Scan(&d.Role, &d.UserID, &d.Platform, &d.Token, &d.EndpointARN, &d.Enabled, &d.CreatedAt, &d.UpdatedAt); err != nil {
			return nil, pgErr(err)
		}
		out = append(out, d)
	}
	return out, pgErr(rows.Err())
}

// UpsertDevice records in tx that d.Role/d.UserID owns device token d.Token, delivered through
// d.EndpointARN, and that the device is enabled; it fills d's Enabled, CreatedAt and UpdatedAt from
// the stored row. An SNS endpoint belongs to one user at a time: a row of another owner with the
// same endpoint (a phone on which another user signed in) becomes this owner's (CreatedAt restarts),
// and a row of this owner and token with a stale endpoint (re-created in SNS) is replaced. Callers
// validate the values first; a value breaking a column rule is an internal error.
func UpsertDevice(ctx context.Context, tx pgx.Tx, d *Device) error {
	if _, err := tx.Exec(ctx, `DELETE FROM devices WHERE role = $1 AND user_id = $2 AND token = $3 AND endpoint_arn <> $4`,
		d.Role, d.UserID, d.Token, d.EndpointARN); err != nil {
		return pgErr(err)
	}
	err := tx.QueryRow(ctx, `INSERT INTO devices AS d (role, user_id, platform, token, endpoint_arn)
		VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (endpoint_arn) DO UPDATE SET role = EXCLUDED.role, user_id = EXCLUDED.user_id,
			platform = EXCLUDED.platform, token = EXCLUDED.token, enabled = true, updated_at = now(),
			created_at = CASE WHEN (d.role, d.user_id) = (EXCLUDED.role, EXCLUDED.user_id) THEN d.created_at ELSE now() END
		RETURNING enabled, created_at, updated_at`,
		d.Role, d.UserID, d.Platform, d.Token, d.EndpointARN).Scan(&d.Enabled, &d.CreatedAt, &d.UpdatedAt)
	return pgErr(err)
}

// EnabledDevices returns the enabled devices of role/userID, most recently registered first.
func EnabledDevices(ctx context.Context, q Querier, role, userID string) ([]Device, error) {
	rows, err := q.Query(ctx, `SELECT `+deviceCols+` FROM devices WHERE role = $1 AND user_id = $2 AND enabled
		ORDER BY updated_at DESC, endpoint_arn`, role, userID)
	if err != nil {
		return nil, pgErr(err)
	}
	return scanDevices(rows)
}

// UserDevices returns every device of role/userID, disabled ones included, most recently
// registered first.
func UserDevices(ctx context.Context, q Querier, role, userID string) ([]Device, error) {
	rows, err := q.Query(ctx, `SELECT `+deviceCols+` FROM devices WHERE role = $1 AND user_id = $2
		ORDER BY updated_at DESC, endpoint_arn`, role, userID)
	if err != nil {
		return nil, pgErr(err)
	}
	return scanDevices(rows)
}

// DisableDevice marks the device of endpointARN disabled and reports whether it was enabled.
func DisableDevice(ctx context.Context, q Querier, endpointARN string) (bool, error) {
	tag, err := q.Exec(ctx, `UPDATE devices SET enabled = false, updated_at = now() WHERE endpoint_arn = $1 AND enabled`, endpointARN)
	if err != nil {
		return false, pgErr(err)
	}
	return tag.RowsAffected() == 1, nil
}

// DeleteDeviceByEndpoint deletes the device of endpointARN and reports whether there was one.
func DeleteDeviceByEndpoint(ctx context.Context, q Querier, endpointARN string) (bool, error) {
	tag, err := q.Exec(ctx, `DELETE FROM devices WHERE endpoint_arn = $1`, endpointARN)
	if err != nil {
		return false, pgErr(err)
	}
	return tag.RowsAffected() == 1, nil
}

// DeleteDevice deletes the device of role/userID with token (the app unregistered it) and reports
// whether there was one.
func DeleteDevice(ctx context.Context, q Querier, role, userID, token string) (bool, error) {
	tag, err := q.Exec(ctx, `DELETE FROM devices WHERE role = $1 AND user_id = $2 AND token = $3`, role, userID, token)
	if err != nil {
		return false, pgErr(err)
	}
	return tag.RowsAffected() == 1, nil
}
