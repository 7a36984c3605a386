package pgstore_test

import (
	"context"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/pgstore"
)

// retention is the Retention of the tests: 72 h, 72 h and 30 days, like the config defaults.
var retention = pgstore.Retention{ProcessedEvents: 72 * time.Hour, Outbox: 72 * time.Hour, Offers: 720 * time.Hour}

func exec(t *testing.T, db *pgstore.DB, sql string, args ...any) {
	t.Helper()
	if _, err := db.Pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// insertRide inserts a ride in status (with a driver when the status needs one) and returns its id.
func insertRide(t *testing.T, db *pgstore.DB, status string) string {
	t.Helper()
	id := uuid.NewString()
	var driver *string
	if status == "ACCEPTED" || status == "IN_PROGRESS" || status == "COMPLETED" {
		d := "d-" + id[:8]
		driver = &d
	}
	exec(t, db, `INSERT INTO rides (id, rider_id, status, pickup_lat, pickup_lng, dropoff_lat, dropoff_lng,
		driver_id, fare_estimate_cents, est_distance_m, est_duration_s, created_at)
		VALUES ($1, $2, $3, 40.75, -73.98, 40.78, -73.96, $4, 1200, 3000, 420, now() - interval '60 days')`,
		id, "r-"+id[:8], status, driver)
	return id
}

// insertOffer inserts an offer of ride in status created age ago (PostgreSQL's clock) and returns its id.
func insertOffer(t *testing.T, db *pgstore.DB, ride, status string, age time.Duration) string {
	t.Helper()
	id := uuid.NewString()
	exec(t, db, `INSERT INTO offers (id, ride_id, driver_id, status, distance_m, score, created_at, expires_at)
		VALUES ($1, $2, $3, $4, 420, 420, now() - $5 * interval '1 millisecond',
		        now() - $5 * interval '1 millisecond' + interval '15 seconds')`,
		id, ride, "d-"+id[:8], status, age.Milliseconds())
	return id
}

// insertOutbox inserts an outbox row with subject label, created createdAge ago and published
// publishedAge ago (never when publishedAge < 0).
func insertOutbox(t *testing.T, db *pgstore.DB, label string, createdAge, publishedAge time.Duration) {
	t.Helper()
	var published *int64
	if publishedAge >= 0 {
		ms := publishedAge.Milliseconds()
		published = &ms
	}
	exec(t, db, `INSERT INTO outbox (event_id, type, source, subject, ordering_key, data, created_at, published_at)
		VALUES ($1, 'io.flagdown.test.v1', '/flagdown/test', $2, $2, '{}', now() - $3 * interval '1 millisecond',
		        now() - $4 * interval '1 millisecond')`,
		uuid.NewString(), label, createdAge.Milliseconds(), published)
}

// insertProcessed inserts a processed_events row with id label, processed age ago.
func insertProcessed(t *testing.T, db *pgstore.DB, label string, age time.Duration) {
	t.Helper()
	exec(t, db, `INSERT INTO processed_events (consumer, source, id, processed_at)
		VALUES ('match', '/flagdown/test', $1, now() - $2 * interval '1 millisecond')`, label, age.Milliseconds())
}

// column returns the text values of one column of a query, sorted.
func column(t *testing.T, db *pgstore.DB, sql string) []string {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), sql)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func sorted(s ...string) []string {
	s = slices.Clone(s)
	sort.Strings(s)
	return s
}

const (
	hour = time.Hour
	day  = 24 * time.Hour
)

func TestPruneDeletesExactlyTheOldEligibleRows(t *testing.T) {
	db := testkit.DB(t)
	ctx := context.Background()

	// processed_events: cutoff 72 h.
	insertProcessed(t, db, "pe-old", 73*hour)
	insertProcessed(t, db, "pe-very-old", 30*day)
	insertProcessed(t, db, "pe-recent", 71*hour)
	insertProcessed(t, db, "pe-new", 0)

	// outbox: cutoff 72 h by published_at, whatever created_at says.
	insertOutbox(t, db, "ob-published-old", 80*hour, 73*hour)
	insertOutbox(t, db, "ob-published-recent", 80*hour, 71*hour)
	insertOutbox(t, db, "ob-published-new", 0, 0)
	insertOutbox(t, db, "ob-unpublished-old", 30*day, -1)
	insertOutbox(t, db, "ob-unpublished-new", 0, -1)

	// offers: cutoff 30 days by created_at, only decided offers of terminal rides.
	var gone, kept []string
	for _, st := range []string{"COMPLETED", "CANCELLED", "UNMATCHED"} {
		ride := insertRide(t, db, st)
		for _, offerStatus := range []string{"ACCEPTED", "DECLINED", "EXPIRED", "CANCELLED"} {
			gone = append(gone, insertOffer(t, db, ride, offerStatus, 31*day))
			kept = append(kept, insertOffer(t, db, ride, offerStatus, 29*day))
		}
		kept = append(kept, insertOffer(t, db, ride, "PENDING", 31*day))
	}
	for _, st := range []string{"REQUESTED", "ACCEPTED", "IN_PROGRESS"} {
		ride := insertRide(t, db, st)
		for _, offerStatus := range []string{"ACCEPTED", "DECLINED", "EXPIRED", "CANCELLED"} {
			kept = append(kept, insertOffer(t, db, ride, offerStatus, 31*day))
		}
		kept = append(kept, insertOffer(t, db, ride, "PENDING", 31*day))
	}

	rep, err := db.Prune(ctx, retention)
	if err != nil {
		t.Fatal(err)
	}
	if want := (pgstore.PruneReport{ProcessedEvents: 2, Outbox: 1, Offers: int64(len(gone))}); rep != want {
		t.Errorf("report %+v, want %+v", rep, want)
	}
	if got, want := column(t, db, `SELECT id FROM processed_events`), sorted("pe-recent", "pe-new"); !slices.Equal(got, want) {
		t.Errorf("processed_events left %v, want %v", got, want)
	}
	if got, want := column(t, db, `SELECT subject FROM outbox`),
		sorted("ob-published-recent", "ob-published-new", "ob-unpublished-old", "ob-unpublished-new"); !slices.Equal(got, want) {
		t.Errorf("outbox left %v, want %v", got, want)
	}
	if got, want := column(t, db, `SELECT id::text FROM offers`), sorted(kept...); !slices.Equal(got, want) {
		t.Errorf("offers left %d rows %v, want the %d kept %v", len(got), got, len(want), want)
	}
	if got := column(t, db, `SELECT count(*)::text FROM rides`); !slices.Equal(got, []string{"6"}) {
		t.Errorf("rides count %v, want 6: Prune never deletes rides", got)
	}

	// A second run finds nothing more.
	rep, err = db.Prune(ctx, retention)
	if err != nil || rep != (pgstore.PruneReport{}) {
		t.Errorf("second Prune: %+v, %v; want nothing deleted", rep, err)
	}
}

func TestPruneBatches(t *testing.T) {
	db := testkit.DB(t)
	ctx := context.Background()
	for _, l := range []string{"a", "b", "c", "d", "e"} {
		insertProcessed(t, db, l, 100*hour)
		insertOutbox(t, db, l, 100*hour, 100*hour)
	}
	insertProcessed(t, db, "keep", time.Minute)

	// Two statements of 2 rows per table: 4 of 5 gone, More set.
	r := retention
	r.Batch, r.MaxBatches = 2, 2
	rep, err := db.Prune(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if want := (pgstore.PruneReport{ProcessedEvents: 4, Outbox: 4, More: true}); rep != want {
		t.Errorf("capped Prune: %+v, want %+v", rep, want)
	}
	if got := column(t, db, `SELECT count(*)::text FROM processed_events`); !slices.Equal(got, []string{"2"}) {
		t.Errorf("processed_events count %v after the capped run, want 2 (one old, one recent)", got)
	}

	// The next call deletes the rest: a batch of 1 < 2 ends each table's loop.
	rep, err = db.Prune(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if want := (pgstore.PruneReport{ProcessedEvents: 1, Outbox: 1}); rep != want {
		t.Errorf("second Prune: %+v, want %+v", rep, want)
	}
	if got := column(t, db, `SELECT id FROM processed_events`); !slices.Equal(got, []string{"keep"}) {
		t.Errorf("processed_events left %v, want [keep]", got)
	}
	if got := column(t, db, `SELECT count(*)::text FROM outbox`); !slices.Equal(got, []string{"0"}) {
		t.Errorf("outbox count %v, want 0", got)
	}

	// Many batches in one call when allowed: 7 rows, batches of 3, no cap reached.
	for _, l := range []string{"f", "g", "h", "i", "j", "k", "l"} {
		insertProcessed(t, db, l, 100*hour)
	}
	r.Batch, r.MaxBatches = 3, 0
	rep, err = db.Prune(ctx, r)
	if err != nil || rep != (pgstore.PruneReport{ProcessedEvents: 7}) {
		t.Errorf("Prune in batches of 3: %+v, %v; want 7 processed_events deleted", rep, err)
	}
}

func TestPruneRejectsNonPositiveAges(t *testing.T) {
	db := testkit.DB(t)
	insertProcessed(t, db, "old", 100*hour)
	insertOutbox(t, db, "old", 100*hour, 100*hour)
	for name, r := range map[string]pgstore.Retention{
		"NoProcessedEvents": {Outbox: hour, Offers: hour},
		"NoOutbox":          {ProcessedEvents: hour, Offers: hour},
		"NegativeOffers":    {ProcessedEvents: hour, Outbox: hour, Offers: -hour},
		"NegativeBatch":     {ProcessedEvents: hour, Outbox: hour, Offers: hour, Batch: -1},
	} {
		t.Run(name, func(t *testing.T) {
			rep, err := db.Prune(context.Background(), r)
			if dispatch.ErrorCode(err) != dispatch.CodeInvalidArgument || rep != (pgstore.PruneReport{}) {
				t.Errorf("got %+v, %v; want an invalid_argument error and nothing deleted", rep, err)
			}
		})
	}
	if got := column(t, db, `SELECT ((SELECT count(*) FROM processed_events) + (SELECT count(*) FROM outbox))::text`); !slices.Equal(got, []string{"2"}) {
		t.Errorf("rows left %v, want 2: a refused Prune deletes nothing", got)
	}
}
