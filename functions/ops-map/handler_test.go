package function_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	opsmap "github.com/flagdown/flagdown/functions/ops-map"
	"github.com/flagdown/flagdown/internal/testkit/fntest"
	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/opsview"
)

// Places more than 8 km (the widest match radius) apart, so each ride is offered to the driver
// placed at its pickup.
var (
	timesSquare  = dispatch.Point{Lat: 40.7580, Lng: -73.9855}
	jfk          = dispatch.Point{Lat: 40.6413, Lng: -73.7781}
	newark       = dispatch.Point{Lat: 40.6900, Lng: -74.1700}
	bronx        = dispatch.Point{Lat: 40.9000, Lng: -73.8700}
	statenIsland = dispatch.Point{Lat: 40.5800, Lng: -74.1500}
)

// fleet lays out, over a fresh deployment: d-idle available at Times Square; a ride at JFK offered
// to d-jfk; one at Newark accepted by d-ewr (who pinged since); one in the Bronx in progress with
// d-bx (pinged since); one on Staten Island completed by d-si (available again at its dropoff).
func fleet(t *testing.T) (*fntest.Env, map[string]string) {
	t.Helper()
	e := fntest.NewEnv(t, nil)
	e.Ping(t, "d-idle", timesSquare)
	rides := map[string]string{}
	ping := func(driver string, p dispatch.Point) {
		st, body := fntest.Do(t, e.Location, http.MethodPost, "/", fntest.JSON{"lat": p.Lat, "lng": p.Lng}, e.As(auth.RoleDriver, driver))
		if st != http.StatusOK {
			t.Fatalf("ping %s: %d %v", driver, st, body)
		}
	}
	for _, c := range []struct {
		name, driver string
		at           dispatch.Point
		steps        []string
	}{
		{"jfk", "d-jfk", jfk, nil},
		{"ewr", "d-ewr", newark, []string{"accept"}},
		{"bx", "d-bx", bronx, []string{"accept", "start"}},
		{"si", "d-si", statenIsland, []string{"accept", "start", "complete"}},
	} {
		e.Ping(t, c.driver, c.at)
		id := e.CreateRide(t, "r-"+c.name, fntest.Offset(c.at, 30, 0), fntest.Offset(c.at, 600, 300))
		rides[c.name] = id
		if out := e.MatchRide(t, id); e.OfferedDriver(t, id) != c.driver {
			t.Fatalf("ride %s: match %q offered %q, want %s", c.name, out, e.OfferedDriver(t, id), c.driver)
		}
		for _, step := range c.steps {
			var st int
			var body fntest.JSON
			if step == "accept" {
				st, body = e.AcceptRide(t, id, c.driver)
				ping(c.driver, fntest.Offset(c.at, 10, 0))
			} else {
				st, body = e.RideAction(t, id, step, fntest.JSON{"driver_id": c.driver})
			}
			if st != http.StatusOK {
				t.Fatalf("ride %s %s: %d %v", c.name, step, st, body)
			}
		}
	}
	return e, rides
}

func snapshotOf(t *testing.T, h http.Handler, e *fntest.Env, query string) (int, opsview.Snapshot) {
	t.Helper()
	st, raw := fntest.DoRaw(t, h, http.MethodGet, "/snapshot"+query, nil, e.Ops())
	var s opsview.Snapshot
	if st == http.StatusOK {
		if err := json.Unmarshal(raw, &s); err != nil {
			t.Fatalf("snapshot: %v: %s", err, raw)
		}
	}
	return st, s
}

// TestSnapshotCountsAndPositions: every count of the snapshot is the state laid out by fleet, each
// driver shows once in the state he is in, the open rides are listed with their driver's position,
// the offer in flight from its driver to its pickup, and the match rate is over the four rides.
func TestSnapshotCountsAndPositions(t *testing.T) {
	e, rides := fleet(t)
	h := opsmap.New(e.D.Deps)
	st, s := snapshotOf(t, h, e, "")
	if st != http.StatusOK {
		t.Fatalf("snapshot: HTTP %d", st)
	}
	want := opsview.Counts{Drivers: 5, DriversAvailable: 2, DriversOffered: 1, DriversToPickup: 1, DriversOnTrip: 1,
		RidesOpen: 3, RidesRequested: 1, RidesAccepted: 1, RidesInProgress: 1, OffersInFlight: 1}
	if s.Counts != want {
		t.Errorf("counts %+v, want %+v", s.Counts, want)
	}
	states := map[string]string{}
	for _, d := range s.Drivers {
		if _, dup := states[d.ID]; dup {
			t.Errorf("driver %s listed twice", d.ID)
		}
		states[d.ID] = d.State
	}
	wantStates := map[string]string{"d-idle": opsview.DriverAvailable, "d-si": opsview.DriverAvailable, "d-jfk": opsview.DriverOffered,
		"d-ewr": opsview.DriverToPickup, "d-bx": opsview.DriverOnTrip}
	for id, w := range wantStates {
		if states[id] != w {
			t.Errorf("driver %s: state %q, want %q (all: %v)", id, states[id], w, states)
		}
	}
	var open []string
	for _, r := range s.Rides {
		open = append(open, r.ID)
		if (r.Status == dispatch.RideAccepted || r.Status == dispatch.RideInProgress) && (r.Driver == nil || r.DriverID == "") {
			t.Errorf("ride %s %s: driver %q at %v, want his live position", r.ID, r.Status, r.DriverID, r.Driver)
		}
	}
	slices.Sort(open)
	wantOpen := []string{rides["jfk"], rides["ewr"], rides["bx"]}
	slices.Sort(wantOpen)
	if !slices.Equal(open, wantOpen) {
		t.Errorf("open rides %v, want %v", open, wantOpen)
	}
	if len(s.Offers) != 1 || s.Offers[0].RideID != rides["jfk"] || s.Offers[0].DriverID != "d-jfk" || s.Offers[0].Driver == nil {
		t.Errorf("offers %+v, want the JFK ride's to d-jfk with his position", s.Offers)
	}
	if m := s.Metrics; m.Requested != 4 || m.Matched != 3 || m.MatchRate != 0.75 || m.Unmatched != 0 {
		t.Errorf("metrics %+v, want 4 requested, 3 matched, rate 0.75", m)
	}
	if s.DriversCapped || s.RidesCapped || s.OffersCapped || s.Seq != 1 {
		t.Errorf("capped %v %v %v seq %d, want none capped, seq 1", s.DriversCapped, s.RidesCapped, s.OffersCapped, s.Seq)
	}

	// The snapshot of a number is the one served under it.
	st, again := snapshotOf(t, h, e, "?seq=1")
	if st != http.StatusOK || again.Seq != 1 || again.Counts != s.Counts || len(again.Drivers) != len(s.Drivers) {
		t.Errorf("snapshot ?seq=1: HTTP %d seq %d counts %+v, want the first one", st, again.Seq, again.Counts)
	}
}

// TestSnapshotCapsLists: with a cap of one point a list, the counts stay exact and the lists say
// they were cut.
func TestSnapshotCapsLists(t *testing.T) {
	e, _ := fleet(t)
	rd := opsview.New(e.D.DB, e.D.Redis)
	rd.MaxPoints = 1
	s, err := rd.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if s.Counts.DriversAvailable != 2 || s.Counts.RidesOpen != 3 {
		t.Errorf("counts %+v, want 2 available and 3 open rides whatever the cap", s.Counts)
	}
	if len(s.Rides) != 1 || !s.RidesCapped || !s.DriversCapped || s.OffersCapped {
		t.Errorf("%d rides listed, capped rides %v drivers %v offers %v; want 1 ride, rides and drivers capped, offers not (1 of 1)",
			len(s.Rides), s.RidesCapped, s.DriversCapped, s.OffersCapped)
	}
	available := 0
	for _, d := range s.Drivers {
		if d.State == opsview.DriverAvailable {
			available++
		}
	}
	if available != 1 {
		t.Errorf("%d available drivers listed, want the cap, 1", available)
	}
}

// TestTimeline: a completed ride's timeline runs from the request to the completion through its
// offer; a bad id names the field, an unknown ride is 404.
func TestTimeline(t *testing.T) {
	e, rides := fleet(t)
	h := opsmap.New(e.D.Deps)
	st, raw := fntest.DoRaw(t, h, http.MethodGet, "/rides/"+rides["si"], nil, e.Ops())
	if st != http.StatusOK {
		t.Fatalf("timeline: HTTP %d %s", st, raw)
	}
	var tl opsview.Timeline
	if err := json.Unmarshal(raw, &tl); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for i, ev := range tl.Events {
		kinds = append(kinds, ev.Kind)
		if i > 0 && ev.At.Before(tl.Events[i-1].At) {
			t.Errorf("event %d (%s) before the one it follows", i, ev.Kind)
		}
	}
	for _, k := range []string{opsview.EventRequested, opsview.EventFirstMatch, opsview.EventOffered, opsview.EventOfferAccepted,
		opsview.EventAccepted, opsview.EventStarted, opsview.EventCompleted} {
		if !slices.Contains(kinds, k) {
			t.Errorf("timeline %v lacks %s", kinds, k)
		}
	}
	if len(kinds) == 0 || kinds[0] != opsview.EventRequested || kinds[len(kinds)-1] != opsview.EventCompleted {
		t.Errorf("timeline %v, want it to start requested and end completed", kinds)
	}
	if tl.Ride.Status != dispatch.RideCompleted || tl.Ride.DriverID != "d-si" || tl.Ride.Offers != 1 || tl.Ride.RiderID != "r-si" {
		t.Errorf("ride %+v", tl.Ride)
	}

	st, body := fntest.Do(t, h, http.MethodGet, "/rides/NOT-A-UUID", nil, e.Ops())
	if st != http.StatusBadRequest || fntest.ErrorOf(t, body).Field != "ride_id" {
		t.Errorf("bad id: HTTP %d %v, want 400 naming ride_id", st, body)
	}
	st, _ = fntest.Do(t, h, http.MethodGet, "/rides/5b0b9c5e-8a51-4f7b-9d7e-0d2f3c7c1a11", nil, e.Ops())
	if st != http.StatusNotFound {
		t.Errorf("unknown ride: HTTP %d, want 404", st)
	}
}

// TestAccessAndParameters: the page needs no token and loads nothing from elsewhere; every data
// endpoint needs an ops token; snapshot parameters are checked.
func TestAccessAndParameters(t *testing.T) {
	e := fntest.NewEnv(t, nil)
	h := opsmap.New(e.D.Deps)
	st, raw := fntest.DoRaw(t, h, http.MethodGet, "/", nil, nil)
	page := string(raw)
	if st != http.StatusOK || !strings.Contains(page, "<canvas id=\"map\"") {
		t.Fatalf("page: HTTP %d", st)
	}
	for _, bad := range []string{"http://", "https://", "src=", "href="} {
		if strings.Contains(page, bad) {
			t.Errorf("the page contains %q: it must load nothing but its own endpoints", bad)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'sha256-") {
		t.Errorf("Content-Security-Policy %q", csp)
	}
	if st, raw := fntest.DoRaw(t, h, http.MethodGet, "/backdrop.png", nil, nil); st != http.StatusOK || len(raw) == 0 || len(raw) > 300<<10 {
		t.Errorf("backdrop: HTTP %d, %d bytes (at most 300 KiB)", st, len(raw))
	}

	for _, path := range []string{"/snapshot", "/stream", "/rides/5b0b9c5e-8a51-4f7b-9d7e-0d2f3c7c1a11"} {
		if st, _ := fntest.Do(t, h, http.MethodGet, path, nil, nil); st != http.StatusUnauthorized {
			t.Errorf("%s without a token: HTTP %d, want 401", path, st)
		}
		for _, role := range []auth.Role{auth.RoleRider, auth.RoleDriver} {
			if st, _ := fntest.Do(t, h, http.MethodGet, path, nil, e.As(role, "x-1")); st != http.StatusForbidden {
				t.Errorf("%s as %s: HTTP %d, want 403", path, role, st)
			}
		}
	}
	for q, field := range map[string]string{"?seq=abc": "seq", "?seq=0": "seq", "?seq=1&seq=2": "seq", "?city=nyc": "city"} {
		st, body := fntest.Do(t, h, http.MethodGet, "/snapshot"+q, nil, e.Ops())
		if st != http.StatusBadRequest || fntest.ErrorOf(t, body).Field != field {
			t.Errorf("snapshot%s: HTTP %d %v, want 400 naming %s", q, st, body, field)
		}
	}
	if st, _ := fntest.Do(t, h, http.MethodGet, "/snapshot?seq=99", nil, e.Ops()); st != http.StatusNotFound {
		t.Errorf("snapshot ?seq=99 never built: HTTP %d, want 404", st)
	}
}

// TestStreamSendsSnapshots: the stream is text/event-stream, its first event is a snapshot
// numbered by its id, and it ends when the server shuts down.
func TestStreamSendsSnapshots(t *testing.T) {
	e := fntest.NewEnv(t, nil)
	e.Ping(t, "d-idle", timesSquare)
	srv := httptest.NewServer(opsmap.New(e.D.Deps))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/stream", nil)
	req.Header.Set("Authorization", "Bearer "+e.Token(auth.RoleOps, "ops-test"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		t.Fatalf("stream: HTTP %d %s", resp.StatusCode, ct)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	var lines []string
	for sc.Scan() && sc.Text() != "" {
		lines = append(lines, sc.Text())
	}
	if len(lines) != 3 || lines[0] != "id: 1" || lines[1] != "event: snapshot" || !strings.HasPrefix(lines[2], "data: ") {
		t.Fatalf("first event %q, want id: 1, event: snapshot, data: {...}", lines)
	}
	var s opsview.Snapshot
	if err := json.Unmarshal([]byte(strings.TrimPrefix(lines[2], "data: ")), &s); err != nil {
		t.Fatal(err)
	}
	if s.Seq != 1 || s.Counts.DriversAvailable != 1 || len(s.Drivers) != 1 || s.Drivers[0].ID != "d-idle" {
		t.Errorf("streamed snapshot %+v, want seq 1 with d-idle available", s)
	}

	// A server shutting down ends the stream (Shutdown waits for active requests; an open map would
	// otherwise hold it for StreamMax).
	sctx, scancel := context.WithTimeout(context.Background(), opsmap.StreamMax/2)
	defer scancel()
	if err := srv.Config.Shutdown(sctx); err != nil {
		t.Errorf("shutdown with a stream open: %v", err)
	}
	for sc.Scan() {
	}
	resp.Body.Close()
	srv.Close()
}

// TestTimelineOfAnUnmatchedRide: a ride whose accepted driver was lost and that was then given up
// shows the re-open after the accept and ends UNMATCHED with its match note.
func TestTimelineOfAnUnmatchedRide(t *testing.T) {
	e := fntest.NewEnv(t, nil)
	h := opsmap.New(e.D.Deps)
	e.Ping(t, "d-gone", dispatch.Point{Lat: 40.7580, Lng: -73.9855})
	ride := e.CreateRide(t, "r-gone", dispatch.Point{Lat: 40.7570, Lng: -73.9860}, dispatch.Point{Lat: 40.7306, Lng: -73.9866})
	e.MatchRide(t, ride)
	if st, body := e.AcceptRide(t, ride, "d-gone"); st != http.StatusOK {
		t.Fatalf("accept: HTTP %d %v", st, body)
	}
	// What re-open and the retry budget leave in the row (the lifecycle's own paths are tested in
	// shared/lifecycle): no driver, UNMATCHED, the last note.
	e.Exec(t, `UPDATE rides SET status = 'UNMATCHED', driver_id = NULL, accepted_at = NULL,
		match_note = 'no available driver within 8000 m', updated_at = now() + interval '1 minute' WHERE id = $1`, ride)
	st, raw := fntest.DoRaw(t, h, http.MethodGet, "/rides/"+ride, nil, e.Ops())
	if st != http.StatusOK {
		t.Fatalf("timeline: HTTP %d %s", st, raw)
	}
	var tl opsview.Timeline
	if err := json.Unmarshal(raw, &tl); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, ev := range tl.Events {
		kinds = append(kinds, ev.Kind)
	}
	want := []string{opsview.EventRequested, opsview.EventFirstMatch, opsview.EventOffered, opsview.EventOfferAccepted,
		opsview.EventReopened, opsview.EventUnmatched}
	if !slices.Equal(kinds, want) {
		t.Fatalf("timeline %v, want %v", kinds, want)
	}
	if last := tl.Events[len(tl.Events)-1]; last.Detail != "no available driver within 8000 m" {
		t.Errorf("unmatched event %+v, want the match note as its detail", last)
	}
}
