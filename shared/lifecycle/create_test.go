package lifecycle_test

import (
	"testing"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/lifecycle"
)

// TestCreateRide: a valid request becomes a REQUESTED ride with its ride.requested outbox row; a
// repeat with the same Idempotency-Key returns the same ride (nothing written); the same key for
// another request, a second open ride, and a pickup outside the service area are refused.
func TestCreateRide(t *testing.T) {
	t.Parallel()
	d := testkit.Deps(t, nil)
	lc := d.Lifecycle("/test")
	ctx := t.Context()
	req := lifecycle.RideRequest{RiderID: "r-1", Pickup: pickup, Dropoff: dropoff, IdempotencyKey: "k-1"}

	ride, err := lc.NewRide(req)
	if err != nil {
		t.Fatalf("NewRide: %v", err)
	}
	if ride.Status != dispatch.RideRequested || ride.RiderID != "r-1" || ride.Pickup != pickup {
		t.Fatalf("NewRide = %+v, want REQUESTED for r-1 at the pickup", ride)
	}
	ride.FareEstimateCents = 1234
	got, created, err := lc.CreateRide(ctx, ride, req.IdempotencyKey)
	if err != nil || !created || got.ID != ride.ID {
		t.Fatalf("CreateRide = %v, %v, %v; want the ride, created", got, created, err)
	}
	var outbox int
	if err := d.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE subject = $1 AND type = $2`, ride.ID, events.RideRequested).Scan(&outbox); err != nil || outbox != 1 {
		t.Fatalf("ride.requested outbox rows = %d (%v), want 1", outbox, err)
	}

	again, _ := lc.NewRide(req)
	got, created, err = lc.CreateRide(ctx, again, req.IdempotencyKey)
	if err != nil || created || got.ID != ride.ID {
		t.Fatalf("repeat: CreateRide = %v, %v, %v; want the first ride, not created", got, created, err)
	}

	other := req
	other.Dropoff = pickup
	o, _ := lc.NewRide(other)
	if _, _, err := lc.CreateRide(ctx, o, req.IdempotencyKey); dispatch.AsError(err).Reason != dispatch.ReasonIdempotencyKeyReused {
		t.Errorf("same key, other request: err = %v, want %s", err, dispatch.ReasonIdempotencyKeyReused)
	}
	o, _ = lc.NewRide(other)
	_, _, err = lc.CreateRide(ctx, o, "")
	if e := dispatch.AsError(err); e.Reason != dispatch.ReasonRiderHasOpenRide || e.Details["ride_id"] != ride.ID {
		t.Errorf("second open ride: err = %v (details %v), want %s naming %s", err, e.Details, dispatch.ReasonRiderHasOpenRide, ride.ID)
	}

	far := req
	far.Pickup = dispatch.Point{Lat: 10, Lng: 10}
	if _, err := lc.NewRide(far); dispatch.AsError(err).Field != "pickup" {
		t.Errorf("pickup outside the service area: err = %v, want invalid pickup", err)
	}
}
