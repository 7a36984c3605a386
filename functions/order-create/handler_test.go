package function_test

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/internal/testkit/fntest"
	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/dispatch"
)

var (
	pickup  = dispatch.Point{Lat: 40.7549, Lng: -73.9840}
	dropoff = dispatch.Point{Lat: 40.7306, Lng: -73.9866}
)

func order(rider string, pu, do dispatch.Point) fntest.JSON {
	return fntest.JSON{"rider_id": rider, "pickup": pu, "dropoff": do}
}

func TestOrderCreateRejectsBadInputAndWritesNothing(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, func(c *config.Config) { c.MaxBodyBytes = 1024 })
	env.CreateRide(t, "r-existing", pickup, dropoff) // existing state that must stay as it is

	body := func(pu, do string) string {
		return fmt.Sprintf(`{"rider_id": "r-1", "pickup": %s, "dropoff": %s}`, pu, do)
	}
	pt := func(lat, lng string) string { return fmt.Sprintf(`{"lat": %s, "lng": %s}`, lat, lng) }
	okPU, okDO := pt("40.7549", "-73.9840"), pt("40.7306", "-73.9866")

	tests := []struct {
		name       string
		body       string
		headers    map[string]string
		wantStatus int
		wantField  string
		wantRule   string
	}{
		{"pickup lat above 90", body(pt("90.1", "-73.98"), okDO), nil, 400, "pickup.lat", "between -90 and 90"},
		{"dropoff lng below -180", body(okPU, pt("40.73", "-180.5")), nil, 400, "dropoff.lng", "between -180 and 180"},
		{"pickup lat beyond the Redis GEO limit", body(pt("85.1", "-73.98"), okDO), nil, 400, "pickup.lat", "85.05112878"},
		{"pickup outside the service area", body(pt("51.5072", "-0.1276"), okDO), nil, 400, "pickup", "service area"},
		{"dropoff with a zero coordinate", body(okPU, pt("40.73", "0")), nil, 400, "dropoff", "must not be 0"},
		{"NaN literal", body(pt("NaN", "-73.98"), okDO), nil, 400, "body", "NaN"},
		{"Infinity literal", body(okPU, pt("40.73", "-Infinity")), nil, 400, "body", "Infinity"},
		{"number sent as a string", body(pt(`"40.7549"`, "-73.98"), okDO), nil, 400, "pickup.lat", "must be a JSON number"},
		{"unknown field", `{"rider_id": "r-1", "pickup": ` + okPU + `, "dropoff": ` + okDO + `, "tip": 5}`, nil, 400, "tip", "not a known field"},
		{"unknown nested field", body(`{"lat": 40.75, "lng": -73.98, "alt": 3}`, okDO), nil, 400, "alt", "not a known field"},
		{"trailing bytes after the JSON", body(okPU, okDO) + `{}`, nil, 400, "body", "trailing"},
		{"body over the size limit", `{"rider_id": "` + strings.Repeat("r", 1100) + `"}`, nil, 413, "body", "at most 1024 bytes"},
		{"another rider's id", `{"rider_id": "r-2", "pickup": ` + okPU + `, "dropoff": ` + okDO + `}`, nil, 403, "rider_id", "token's subject"},
		{"rider id over 128 bytes", `{"rider_id": "` + strings.Repeat("r", 129) + `", "pickup": ` + okPU + `, "dropoff": ` + okDO + `}`, nil, 400, "rider_id", "at most 128"},
		{"missing dropoff", `{"rider_id": "r-1", "pickup": ` + okPU + `}`, nil, 400, "dropoff", "is required"},
		{"missing pickup lng", body(`{"lat": 40.75}`, okDO), nil, 400, "pickup.lng", "is required"},
		{"idempotency key over 128 bytes", body(okPU, okDO), map[string]string{"Idempotency-Key": strings.Repeat("k", 129)}, 400, "Idempotency-Key", "at most 128"},
		{"not JSON content type", body(okPU, okDO), map[string]string{"Content-Type": "text/plain"}, 400, "Content-Type", "application/json"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assertRejected(t, env, tc.body, tc.headers, tc.wantStatus, tc.wantField, tc.wantRule)
		})
	}
}

// TestOrderCreateRejectsUnsafeIDsAndKeys sends ids and Idempotency-Keys that must never reach
// PostgreSQL (NUL, invalid UTF-8) or a Redis Cluster key (braces, spaces), and expects a 400 naming
// the field with nothing written.
func TestOrderCreateRejectsUnsafeIDsAndKeys(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	env.CreateRide(t, "r-existing", pickup, dropoff)
	const ends = `"pickup": {"lat": 40.7549, "lng": -73.9840}, "dropoff": {"lat": 40.7306, "lng": -73.9866}`
	rider := func(rawJSONString string) string { return `{"rider_id": ` + rawJSONString + `, ` + ends + `}` }
	good := rider(`"r-1"`)
	const charset = "must contain only ASCII letters, digits and -_.:@+="
	tests := []struct {
		name      string
		body      string
		key       string
		wantField string
		wantRule  string
	}{
		{"rider id with NUL (JSON escape)", rider(`"r\u00001"`), "", "rider_id", "found U+0000 at byte 1"},
		{"rider id with another control character", rider(`"r\u001b1"`), "", "rider_id", "found U+001B"},
		{"rider id with an opening brace", rider(`"{r-1"`), "", "rider_id", "found '{' at byte 0"},
		{"rider id with a Redis hash tag", rider(`"r-{1}"`), "", "rider_id", "found '{' at byte 2"},
		{"rider id with a closing brace", rider(`"r}1"`), "", "rider_id", "found '}'"},
		{"rider id with a space", rider(`"r 1"`), "", "rider_id", "found U+0020 at byte 1"},
		{"rider id with a newline (JSON escape)", rider(`"r\n1"`), "", "rider_id", "found U+000A"},
		{"rider id with invalid UTF-8 bytes in the raw body", rider("\"r\xff\xfe1\""), "", "rider_id", charset},
		{"rider id with a lone surrogate escape", rider(`"r\ud8001"`), "", "rider_id", charset},
		{"rider id with non-ASCII letters", rider(`"司机"`), "", "rider_id", charset},
		{"rider id over 128 bytes of multi-byte characters", rider(`"` + strings.Repeat("é", 65) + `"`), "", "rider_id", "at most 128 bytes"},
		{"rider id far over the limit", rider(`"` + strings.Repeat("r", 600) + `"`), "", "rider_id", "at most 128 bytes"},
		{"invalid UTF-8 outside any string", good[:len(good)-1] + "\xff}", "", "body", "valid JSON"},
		{"Idempotency-Key with NUL", good, "k\x001", "Idempotency-Key", "found U+0000 at byte 1"},
		{"Idempotency-Key with a control character", good, "k\x01", "Idempotency-Key", "control characters"},
		{"Idempotency-Key with a tab", good, "k\t1", "Idempotency-Key", "found U+0009"},
		{"Idempotency-Key with DEL", good, "k\x7f", "Idempotency-Key", "found U+007F"},
		{"Idempotency-Key with invalid UTF-8", good, "k\xff", "Idempotency-Key", "must be valid UTF-8"},
		{"Idempotency-Key over 128 bytes", good, strings.Repeat("k", 129), "Idempotency-Key", "at most 128 bytes"},
		{"Idempotency-Key over 128 bytes of multi-byte characters", good, strings.Repeat("é", 65), "Idempotency-Key", "at most 128 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var headers map[string]string
			if tc.key != "" {
				headers = map[string]string{"Idempotency-Key": tc.key}
			}
			rides := env.Count(t, "SELECT count(*) FROM rides")
			assertRejected(t, env, tc.body, headers, http.StatusBadRequest, tc.wantField, tc.wantRule)
			if got := env.Count(t, "SELECT count(*) FROM rides"); got != rides {
				t.Errorf("rides = %d after a rejected request, want %d", got, rides)
			}
		})
	}

	t.Run("ids and keys inside the documented sets are accepted", func(t *testing.T) {
		for i, tc := range []struct{ rider, key string }{
			{"a-b_c.d:e@f+g=H9", ""},
			{strings.Repeat("r", 128), strings.Repeat("k", 128)},
			{"r-key", "{client} key é 🚕 " + strings.Repeat("é", 50)},
		} {
			status, body := fntest.Do(t, env.Order, http.MethodPost, "/", order(tc.rider, pickup, dropoff),
				env.AsWith(auth.RoleRider, tc.rider, map[string]string{"Idempotency-Key": tc.key}))
			if got, want := status, http.StatusAccepted; got != want {
				t.Fatalf("%d: status = %d, want %d (%v)", i, got, want, body)
			}
		}
	})
}

func assertRejected(t *testing.T, env *fntest.Env, body string, headers map[string]string, wantStatus int, wantField, wantRule string) {
	t.Helper()
	before := env.Snapshot(t)
	status, answer := fntest.Do(t, env.Order, http.MethodPost, "/", body, env.AsWith(auth.RoleRider, "r-1", headers))
	if got, want := status, wantStatus; got != want {
		t.Fatalf("status = %d, want %d (%v)", got, want, answer)
	}
	e := fntest.ErrorOf(t, answer)
	if got, want := e.Field, wantField; got != want {
		t.Errorf("field = %q, want %q (%s)", got, want, e.Message)
	}
	if !strings.Contains(e.Message, wantField) || !strings.Contains(e.Message, wantRule) {
		t.Errorf("message %q should name the field %q and the rule %q", e.Message, wantField, wantRule)
	}
	if diff := before.Diff(env.Snapshot(t)); diff != "" {
		t.Errorf("a rejected request wrote something: %s", diff)
	}
}

// TestOrderCreateRejectsDirtyTaxiRows sends the real problematic NYC rows (zero coordinates, points
// outside the service area) and expects a 400 naming the first bad end of the trip.
func TestOrderCreateRejectsDirtyTaxiRows(t *testing.T) {
	t.Parallel()
	env := fntest.NewEnv(t, nil)
	f, err := os.Open(filepath.Join(testkit.RepoRoot(t), "testdata", "trips-dirty-sample.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(rows)-1, 200; got != want {
		t.Fatalf("dirty sample rows = %d, want %d", got, want)
	}
	area := env.D.ServiceArea()
	bad := func(p dispatch.Point) bool { return p.Lat == 0 || p.Lng == 0 || !area.Contains(p) }
	for i, row := range rows[1:] {
		num := func(j int) float64 {
			v, err := strconv.ParseFloat(row[j], 64)
			if err != nil {
				t.Fatalf("line %d: %v", i+2, err)
			}
			return v
		}
		pu, do := dispatch.Point{Lat: num(1), Lng: num(2)}, dispatch.Point{Lat: num(3), Lng: num(4)}
		wantField := "dropoff"
		if bad(pu) {
			wantField = "pickup"
		}
		if !bad(pu) && !bad(do) {
			t.Fatalf("line %d: %v → %v is not dirty", i+2, pu, do)
		}
		t.Run(fmt.Sprintf("line %d %s", i+2, wantField), func(t *testing.T) {
			raw := fmt.Sprintf(`{"rider_id": "r-dirty", "pickup": {"lat": %s, "lng": %s}, "dropoff": {"lat": %s, "lng": %s}}`,
				row[1], row[2], row[3], row[4])
			status, answer := fntest.Do(t, env.Order, http.MethodPost, "/", raw, env.As(auth.RoleRider, "r-dirty"))
			if got, want := status, http.StatusBadRequest; got != want {
				t.Fatalf("status = %d, want %d (%v)", got, want, answer)
			}
			e := fntest.ErrorOf(t, answer)
			// pickup or dropoff, or one of their coordinates (pickup.lat) for out-of-range values.
			if e.Field != wantField && !strings.HasPrefix(e.Field, wantField+".") {
				t.Errorf("field = %q, want %q or %q.lat/lng (%s)", e.Field, wantField, wantField, e.Message)
			}
			if !strings.HasPrefix(e.Message, e.Field+": ") {
				t.Errorf("message %q should start with the field", e.Message)
			}
		})
	}
	if got, want := env.Count(t, "SELECT count(*) FROM rides")+env.Count(t, "SELECT count(*) FROM outbox"), 0; got != want {
		t.Errorf("rides + outbox rows = %d, want %d", got, want)
	}
}

func TestOrderCreate(t *testing.T) {
	t.Parallel()

	t.Run("answers 202 with the fare estimate and writes the ride with its ride.requested outbox row", func(t *testing.T) {
		t.Parallel()
		env := fntest.NewEnv(t, nil)
		status, body := fntest.Do(t, env.Order, http.MethodPost, "/", order("r-1", pickup, dropoff), env.As(auth.RoleRider, "r-1"))
		if got, want := status, http.StatusAccepted; got != want {
			t.Fatalf("status = %d, want %d (%v)", got, want, body)
		}
		c := env.D.Config
		est := dispatch.EstimateFare(dispatch.FareParams{
			BaseCents: c.FareBaseCents, PerKmCents: c.FarePerKmCents, PerMinCents: c.FarePerMinCents,
			MinimumCents: c.FareMinimumCents, RoadFactor: c.RoadFactor, AvgSpeedMPS: c.AvgSpeedMPS,
		}, pickup, dropoff)
		rideID, _ := body["ride_id"].(string)
		if rideID == "" {
			t.Fatalf("no ride_id: %v", body)
		}
		if got, want := body["status"], "REQUESTED"; got != want {
			t.Errorf("status = %v, want %v", got, want)
		}
		if got, want := body["fare_estimate_cents"], float64(est.FareCents); got != want {
			t.Errorf("fare_estimate_cents = %v, want %v", got, want)
		}
		if got, want := body["est_distance_m"], est.DistanceM; got != want {
			t.Errorf("est_distance_m = %v, want %v", got, want)
		}
		if got, want := fmt.Sprint(env.OutboxTypes(t, rideID)), fmt.Sprint([]string{events.RideRequested}); got != want {
			t.Errorf("outbox types = %s, want %s", got, want)
		}
		var data []byte
		if err := env.D.DB.Pool.QueryRow(t.Context(), `SELECT data FROM outbox WHERE subject = $1`, rideID).Scan(&data); err != nil {
			t.Fatal(err)
		}
		var ev events.RideRequestedData
		if err := json.Unmarshal(data, &ev); err != nil {
			t.Fatal(err)
		}
		if got, want := ev, (events.RideRequestedData{RideID: rideID, RiderID: "r-1",
			Pickup: events.Point(pickup), Dropoff: events.Point(dropoff), FareEstimateCents: est.FareCents,
			RequestedAt: ev.RequestedAt}); got != want {
			t.Errorf("outbox data = %+v, want %+v", got, want)
		}
		if ev.RequestedAt.IsZero() {
			t.Errorf("outbox requested_at is zero")
		}
		view := env.GetRide(t, rideID)
		for _, end := range []struct {
			name string
			want dispatch.Point
		}{{"pickup", pickup}, {"dropoff", dropoff}} {
			m := view[end.name].(map[string]any)
			if got := (dispatch.Point{Lat: m["lat"].(float64), Lng: m["lng"].(float64)}); got != end.want {
				t.Errorf("GET ride %s = %v, want %v as sent", end.name, got, end.want)
			}
		}
	})

	t.Run("the same Idempotency-Key replays the same ride with 200", func(t *testing.T) {
		t.Parallel()
		env := fntest.NewEnv(t, nil)
		key := env.AsWith(auth.RoleRider, "r-1", map[string]string{"Idempotency-Key": "k-1"})
		s1, b1 := fntest.Do(t, env.Order, http.MethodPost, "/", order("r-1", pickup, dropoff), key)
		s2, b2 := fntest.Do(t, env.Order, http.MethodPost, "/", order("r-1", pickup, dropoff), key)
		if s1 != http.StatusAccepted || s2 != http.StatusOK {
			t.Fatalf("statuses = %d, %d, want 202, 200 (%v, %v)", s1, s2, b1, b2)
		}
		if got, want := b2["ride_id"], b1["ride_id"]; got != want {
			t.Errorf("replayed ride_id = %v, want %v", got, want)
		}
		if got, want := env.Count(t, "SELECT count(*) FROM rides")*10+env.Count(t, "SELECT count(*) FROM outbox"), 11; got != want {
			t.Errorf("rides*10 + outbox = %d, want %d", got, want)
		}
	})

	t.Run("the same Idempotency-Key with a different body is a conflict", func(t *testing.T) {
		t.Parallel()
		env := fntest.NewEnv(t, nil)
		key := env.AsWith(auth.RoleRider, "r-1", map[string]string{"Idempotency-Key": "k-1"})
		_, b1 := fntest.Do(t, env.Order, http.MethodPost, "/", order("r-1", pickup, dropoff), key)
		before := env.Snapshot(t)
		status, body := fntest.Do(t, env.Order, http.MethodPost, "/", order("r-1", pickup, fntest.Offset(dropoff, 500, 0)), key)
		if got, want := status, http.StatusConflict; got != want {
			t.Fatalf("status = %d, want %d (%v)", got, want, body)
		}
		e := fntest.ErrorOf(t, body)
		if got, want := e.Reason, dispatch.ReasonIdempotencyKeyReused; got != want {
			t.Errorf("reason = %q, want %q", got, want)
		}
		if got, want := e.Details["ride_id"], b1["ride_id"]; got != want {
			t.Errorf("details.ride_id = %v, want %v", got, want)
		}
		if diff := before.Diff(env.Snapshot(t)); diff != "" {
			t.Errorf("conflict wrote something: %s", diff)
		}
	})

	t.Run("concurrent requests with the same Idempotency-Key create one ride", func(t *testing.T) {
		t.Parallel()
		env := fntest.NewEnv(t, nil)
		const n = 10
		statuses := make([]int, n)
		ids := make([]any, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				var body fntest.JSON
				statuses[i], body = fntest.Do(t, env.Order, http.MethodPost, "/", order("r-1", pickup, dropoff),
					env.AsWith(auth.RoleRider, "r-1", map[string]string{"Idempotency-Key": "k-race"}))
				ids[i] = body["ride_id"]
			})
		}
		wg.Wait()
		created, replayed := 0, 0
		for i, s := range statuses {
			switch s {
			case http.StatusAccepted:
				created++
			case http.StatusOK:
				replayed++
			default:
				t.Errorf("request %d: status %d", i, s)
			}
			if ids[i] != ids[0] {
				t.Errorf("request %d: ride_id %v, want %v", i, ids[i], ids[0])
			}
		}
		if created != 1 || replayed != n-1 {
			t.Errorf("created, replayed = %d, %d, want 1, %d", created, replayed, n-1)
		}
		if got, want := env.Count(t, "SELECT count(*) FROM rides"), 1; got != want {
			t.Errorf("rides = %d, want %d", got, want)
		}
	})

	t.Run("a second open ride for the same rider is a conflict", func(t *testing.T) {
		t.Parallel()
		env := fntest.NewEnv(t, nil)
		first := env.CreateRide(t, "r-1", pickup, dropoff)
		before := env.Snapshot(t)
		status, body := fntest.Do(t, env.Order, http.MethodPost, "/", order("r-1", dropoff, pickup), env.As(auth.RoleRider, "r-1"))
		if got, want := status, http.StatusConflict; got != want {
			t.Fatalf("status = %d, want %d (%v)", got, want, body)
		}
		e := fntest.ErrorOf(t, body)
		if got, want := e.Reason, dispatch.ReasonRiderHasOpenRide; got != want {
			t.Errorf("reason = %q, want %q", got, want)
		}
		if got, want := e.Details["ride_id"], first; got != want {
			t.Errorf("details.ride_id = %v, want %v", got, want)
		}
		if diff := before.Diff(env.Snapshot(t)); diff != "" {
			t.Errorf("conflict wrote something: %s", diff)
		}
		// Another rider may still order.
		env.CreateRide(t, "r-2", pickup, dropoff)
	})

	t.Run("only POST is allowed", func(t *testing.T) {
		t.Parallel()
		env := fntest.NewEnv(t, nil)
		status, body := fntest.Do(t, env.Order, http.MethodGet, "/", nil, env.As(auth.RoleRider, "r-1"))
		if got, want := status, http.StatusMethodNotAllowed; got != want {
			t.Errorf("status = %d, want %d (%v)", got, want, body)
		}
	})
}
