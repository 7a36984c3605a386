package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flagdown/flagdown/internal/testkit"
)

// TestOutboxLagAndOpenRides: the lag is the age of the oldest unpublished row (published rows and
// newer ones do not count, 0 with none waiting); open rides count REQUESTED, ACCEPTED and
// IN_PROGRESS only.
func TestOutboxLagAndOpenRides(t *testing.T) {
	db := testkit.DB(t)
	ctx := context.Background()
	if lag, err := db.OutboxLag(ctx); err != nil || lag != 0 {
		t.Fatalf("empty outbox: lag %v (%v), want 0", lag, err)
	}
	row := func(age string, published bool) {
		pub := "NULL"
		if published {
			pub = "now()"
		}
		exec(t, db, `INSERT INTO outbox (event_id, type, source, subject, ordering_key, data, created_at, published_at)
			VALUES ($1, 't', '/s', 'x', 'x', '{}', now() - $2::interval, `+pub+`)`, uuid.NewString(), age)
	}
	row("1 hour", true) // published: no lag
	row("90 seconds", false)
	row("10 seconds", false)
	lag, err := db.OutboxLag(ctx)
	if err != nil || lag < 89*time.Second || lag > 120*time.Second {
		t.Errorf("lag %v (%v), want about 90 s (the oldest unpublished row)", lag, err)
	}

	for _, s := range []string{"REQUESTED", "ACCEPTED", "IN_PROGRESS", "COMPLETED", "CANCELLED", "UNMATCHED"} {
		insertRide(t, db, s)
	}
	if n, err := db.OpenRides(ctx); err != nil || n != 3 {
		t.Errorf("open rides %d (%v), want 3", n, err)
	}
}
