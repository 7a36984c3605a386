package pgstore_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/pgstore"
)

const (
	arn1 = "arn:aws:sns:us-east-1:123456789012:endpoint/GCM/flagdown-android/11111111-1111-1111-1111-111111111111"
	arn2 = "arn:aws:sns:us-east-1:123456789012:endpoint/GCM/flagdown-android/22222222-2222-2222-2222-222222222222"
)

func upsert(t *testing.T, db *pgstore.DB, d pgstore.Device) pgstore.Device {
	t.Helper()
	if err := db.Tx(context.Background(), func(tx pgx.Tx) error { return pgstore.UpsertDevice(context.Background(), tx, &d) }); err != nil {
		t.Fatalf("UpsertDevice(%+v): %v", d, err)
	}
	return d
}

func devicesOf(t *testing.T, db *pgstore.DB, role, user string) []pgstore.Device {
	t.Helper()
	ds, err := pgstore.UserDevices(context.Background(), db.Pool, role, user)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// TestDevices: one row per endpoint, owned by the last user who registered it; disabling, enabling
// by registering again, deleting.
func TestDevices(t *testing.T) {
	ctx := context.Background()
	db := testkit.DB(t)
	a := upsert(t, db, pgstore.Device{Role: "driver", UserID: "d-1", Platform: "fcm", Token: "tok-1", EndpointARN: arn1})
	if !a.Enabled || a.CreatedAt.IsZero() || a.UpdatedAt.Before(a.CreatedAt) {
		t.Errorf("new device %+v, want enabled with timestamps", a)
	}
	again := upsert(t, db, a)
	if !again.CreatedAt.Equal(a.CreatedAt) {
		t.Errorf("re-registration moved created_at from %v to %v", a.CreatedAt, again.CreatedAt)
	}

	if ok, err := pgstore.DisableDevice(ctx, db.Pool, arn1); !ok || err != nil {
		t.Fatalf("DisableDevice = %v, %v", ok, err)
	}
	if ok, _ := pgstore.DisableDevice(ctx, db.Pool, arn1); ok {
		t.Error("DisableDevice of a disabled device reported a change")
	}
	if got, err := pgstore.EnabledDevices(ctx, db.Pool, "driver", "d-1"); len(got) != 0 || err != nil {
		t.Errorf("EnabledDevices after disabling = %+v, %v; want none", got, err)
	}
	if got := upsert(t, db, a); !got.Enabled {
		t.Error("registering again did not enable the device")
	}

	// Another driver signs in on the same phone: the endpoint is his now.
	b := upsert(t, db, pgstore.Device{Role: "driver", UserID: "d-2", Platform: "fcm", Token: "tok-1", EndpointARN: arn1})
	if got := devicesOf(t, db, "driver", "d-1"); len(got) != 0 {
		t.Errorf("previous owner's devices = %+v, want none", got)
	}
	if got := devicesOf(t, db, "driver", "d-2"); len(got) != 1 || got[0].EndpointARN != arn1 || !got[0].CreatedAt.Equal(b.CreatedAt) || !b.CreatedAt.After(a.CreatedAt) {
		t.Errorf("new owner's devices = %+v, want the endpoint with a fresh created_at", got)
	}

	// The endpoint of d-2's token was re-created in SNS: the stale row is replaced.
	upsert(t, db, pgstore.Device{Role: "driver", UserID: "d-2", Platform: "fcm", Token: "tok-1", EndpointARN: arn2})
	if got := devicesOf(t, db, "driver", "d-2"); len(got) != 1 || got[0].EndpointARN != arn2 {
		t.Errorf("devices = %+v, want only the new endpoint %s", got, arn2)
	}

	if ok, err := pgstore.DeleteDeviceByEndpoint(ctx, db.Pool, arn2); !ok || err != nil {
		t.Errorf("DeleteDeviceByEndpoint = %v, %v", ok, err)
	}
	upsert(t, db, pgstore.Device{Role: "rider", UserID: "r-1", Platform: "apns", Token: "ab12", EndpointARN: arn1})
	if ok, err := pgstore.DeleteDevice(ctx, db.Pool, "rider", "r-1", "ab12"); !ok || err != nil {
		t.Errorf("DeleteDevice = %v, %v", ok, err)
	}
	if ok, _ := pgstore.DeleteDevice(ctx, db.Pool, "rider", "r-1", "ab12"); ok {
		t.Error("second DeleteDevice reported a row")
	}
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM devices`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d rows left (%v), want 0", n, err)
	}
}

// TestDevicesSchemaRules: the table refuses what no valid registration writes.
func TestDevicesSchemaRules(t *testing.T) {
	db := testkit.DB(t)
	for name, d := range map[string]pgstore.Device{
		"OpsRole":        {Role: "ops", UserID: "o-1", Platform: "fcm", Token: "t", EndpointARN: arn1},
		"UnknownPlat":    {Role: "driver", UserID: "d-1", Platform: "gcm", Token: "t", EndpointARN: arn1},
		"EmptyToken":     {Role: "driver", UserID: "d-1", Platform: "fcm", Token: "", EndpointARN: arn1},
		"AppNotEndpoint": {Role: "driver", UserID: "d-1", Platform: "fcm", Token: "t", EndpointARN: "arn:aws:sns:us-east-1:123456789012:app/GCM/flagdown"},
	} {
		t.Run(name, func(t *testing.T) {
			err := db.Tx(context.Background(), func(tx pgx.Tx) error { return pgstore.UpsertDevice(context.Background(), tx, &d) })
			if err == nil {
				t.Fatalf("UpsertDevice(%+v) succeeded", d)
			}
		})
	}
}
