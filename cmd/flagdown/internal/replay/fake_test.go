package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// fakePlatform implements just enough of the README's HTTP API for Run: pings (single and batch),
// order-create, accept, decline, start, complete and GET ride. A REQUESTED ride is offered to the
// next available pinging driver without a live offer; offers last offerWindow (wall).
type fakePlatform struct {
	t           *testing.T
	offerWindow time.Duration
	rejectRow   string // rider id suffix whose order is refused with 400

	mu       sync.Mutex
	rides    map[string]*fakeRide
	queue    []string // REQUESTED rides waiting for an offer
	drivers  map[string]*fakeDriver
	nextID   int
	idem     map[string]string
	pings    int
	batches  int
	singles  int
	statuses map[string]int // ping status field values seen
}

type fakeRide struct {
	id, rider, status, driver string
	pickup, dropoff           LatLng
	created, firstOffered     time.Time
	declined                  map[string]bool
}

type fakeDriver struct {
	status  string
	pos     LatLng
	offer   *Offer
	offerTo time.Time
	ride    string
}

func newFakePlatform(t *testing.T) *fakePlatform {
	return &fakePlatform{t: t, offerWindow: 15 * time.Second, rides: map[string]*fakeRide{},
		drivers: map[string]*fakeDriver{}, idem: map[string]string{}, statuses: map[string]int{}}
}

func writeErr(w http.ResponseWriter, status int, code, reason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"code": code, "reason": reason, "message": msg, "field": "", "details": map[string]any{}}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func strictDecode(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

func (f *fakePlatform) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	switch {
	case r.URL.Path == "/readyz":
		w.WriteHeader(200)
	case r.URL.Path == "/function/location-update":
		var raw map[string]json.RawMessage
		if err := json.NewDecoder(r.Body).Decode(&raw); err != nil {
			writeErr(w, 400, "invalid_argument", "", err.Error())
			return
		}
		b, _ := json.Marshal(raw)
		var pings []Ping
		if _, ok := raw["pings"]; ok {
			var req struct {
				Pings []Ping `json:"pings"`
			}
			if err := json.Unmarshal(b, &req); err != nil || len(req.Pings) == 0 || len(req.Pings) > 500 {
				writeErr(w, 400, "invalid_argument", "", "bad batch")
				return
			}
			pings = req.Pings
			f.batches++
		} else {
			var p Ping
			if err := json.Unmarshal(b, &p); err != nil {
				writeErr(w, 400, "invalid_argument", "", err.Error())
				return
			}
			pings = []Ping{p}
			f.singles++
		}
		var res []PingResult
		for _, p := range pings {
			if p.Lat < 40 || p.Lat > 41.2 || p.Lng > -73 || p.Lng < -75 {
				f.t.Errorf("ping %+v not lat,lng in NYC", p)
			}
			if _, err := time.Parse(time.RFC3339Nano, p.TS); err != nil {
				f.t.Errorf("ping ts %q: %v", p.TS, err)
			}
			f.pings++
			f.statuses[p.Status]++
			d := f.drivers[p.DriverID]
			if d == nil {
				d = &fakeDriver{status: "offline"}
				f.drivers[p.DriverID] = d
			}
			d.pos = LatLng{p.Lat, p.Lng}
			if p.Status != "" && d.ride == "" {
				d.status = p.Status
			}
			if d.offer != nil && now.After(d.offerTo) {
				f.queue = append(f.queue, d.offer.RideID)
				d.offer = nil
			}
			if d.offer == nil && d.ride == "" && d.status == "available" {
				for i, id := range f.queue {
					rd := f.rides[id]
					if rd.status != "REQUESTED" || rd.declined[p.DriverID] {
						continue
					}
					f.queue = append(f.queue[:i:i], f.queue[i+1:]...)
					f.nextID++
					d.offer = &Offer{OfferID: fmt.Sprintf("o%d", f.nextID), RideID: id, Pickup: rd.pickup, Dropoff: rd.dropoff,
						DistanceM: Haversine(d.pos, rd.pickup), ExpiresAt: now.Add(f.offerWindow).UTC().Format(time.RFC3339Nano)}
					d.offerTo = now.Add(f.offerWindow)
					if rd.firstOffered.IsZero() {
						rd.firstOffered = now
					}
					break
				}
			}
			res = append(res, PingResult{DriverID: p.DriverID, Applied: true, Status: d.status, Offer: d.offer})
		}
		if _, ok := raw["pings"]; ok {
			writeJSON(w, 200, map[string]any{"results": res})
		} else {
			writeJSON(w, 200, res[0])
		}
	case r.URL.Path == "/function/order-create":
		var req struct {
			RiderID string `json:"rider_id"`
			Pickup  LatLng `json:"pickup"`
			Dropoff LatLng `json:"dropoff"`
		}
		if err := strictDecode(r, &req); err != nil {
			writeErr(w, 400, "invalid_argument", "", err.Error())
			return
		}
		if f.rejectRow != "" && strings.HasSuffix(req.RiderID, "-"+f.rejectRow) {
			writeErr(w, 400, "invalid_argument", "", "pickup: outside the service area")
			return
		}
		key := r.Header.Get("Idempotency-Key")
		if key == "" {
			f.t.Error("order-create without Idempotency-Key")
		}
		if id, ok := f.idem[key]; ok {
			writeJSON(w, 200, map[string]any{"ride_id": id, "status": "REQUESTED"})
			return
		}
		f.nextID++
		id := fmt.Sprintf("r%d", f.nextID)
		f.idem[key] = id
		f.rides[id] = &fakeRide{id: id, rider: req.RiderID, status: "REQUESTED", pickup: req.Pickup, dropoff: req.Dropoff, created: now, declined: map[string]bool{}}
		f.queue = append(f.queue, id)
		writeJSON(w, 202, map[string]any{"ride_id": id, "status": "REQUESTED"})
	case r.URL.Path == "/function/accept":
		var req struct {
			RideID   string `json:"ride_id"`
			DriverID string `json:"driver_id"`
		}
		if err := strictDecode(r, &req); err != nil {
			writeErr(w, 400, "invalid_argument", "", err.Error())
			return
		}
		d, rd := f.drivers[req.DriverID], f.rides[req.RideID]
		switch {
		case d == nil || rd == nil:
			writeErr(w, 404, "not_found", "", "no such ride or driver")
		case rd.status != "REQUESTED":
			writeErr(w, 409, "conflict", "ride_taken", "ride taken")
		case d.offer == nil || d.offer.RideID != req.RideID:
			writeErr(w, 409, "conflict", "not_your_offer", "not your offer")
		case now.After(d.offerTo):
			writeErr(w, 409, "conflict", "offer_expired", "offer expired")
		default:
			rd.status, rd.driver = "ACCEPTED", req.DriverID
			d.offer, d.ride, d.status = nil, req.RideID, "navigating"
			writeJSON(w, 200, map[string]any{"ride_id": rd.id, "driver_id": req.DriverID, "status": "ACCEPTED"})
		}
	case strings.HasPrefix(r.URL.Path, "/function/ride/"):
		parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/function/ride/"), "/")
		rd := f.rides[parts[0]]
		if rd == nil {
			writeErr(w, 404, "not_found", "", "no such ride")
			return
		}
		if r.Method == http.MethodGet && len(parts) == 1 {
			v := map[string]any{"ride_id": rd.id, "status": rd.status, "created_at": rd.created.UTC(), "first_offered_at": nil}
			if !rd.firstOffered.IsZero() {
				v["first_offered_at"] = rd.firstOffered.UTC()
			}
			writeJSON(w, 200, v)
			return
		}
		var req struct {
			DriverID string `json:"driver_id"`
		}
		if err := strictDecode(r, &req); err != nil {
			writeErr(w, 400, "invalid_argument", "", err.Error())
			return
		}
		d := f.drivers[req.DriverID]
		from, to := map[string]string{"start": "ACCEPTED", "complete": "IN_PROGRESS"}[parts[1]], map[string]string{"start": "IN_PROGRESS", "complete": "COMPLETED"}[parts[1]]
		switch {
		case parts[1] == "decline":
			if d == nil || d.offer == nil || d.offer.RideID != rd.id {
				writeErr(w, 409, "conflict", "not_your_offer", "no live offer")
				return
			}
			d.offer = nil
			rd.declined[req.DriverID] = true
			f.queue = append(f.queue, rd.id)
		case from == "" || d == nil:
			writeErr(w, 400, "invalid_argument", "", "bad action")
			return
		case rd.status != from || rd.driver != req.DriverID:
			writeErr(w, 409, "conflict", "illegal_transition", "illegal transition from "+rd.status)
			return
		default:
			rd.status = to
			if to == "COMPLETED" {
				d.ride, d.status, d.pos = "", "available", rd.dropoff
			} else {
				d.status = "busy"
			}
		}
		writeJSON(w, 200, map[string]any{"ride_id": rd.id, "status": rd.status})
	default:
		writeErr(w, 404, "not_found", "", r.URL.Path)
	}
}

func testTrips(t *testing.T, n int) []Trip {
	tf := loadReal(t)
	return tf.Trips[:n]
}

func fastOptions(t *testing.T, url string) Options {
	o := DefaultOptions()
	o.URL = url
	o.Trips = testTrips(t, 160) // 00:00 and 00:01 pickups
	o.Drivers = 60
	o.Minutes = 2
	o.Speedup = 60
	o.DriverSpeedMPS = 60
	o.Drain = 90 * time.Second
	o.Concurrency = 8
	o.BatchSize = 25
	o.Progress = true
	o.SummaryPath = filepath.Join(t.TempDir(), "summary.json")
	o.RunID = "t"
	return o
}

func TestRunAgainstFakePlatform(t *testing.T) {
	if testing.Short() {
		t.Skip("runs ~4 s")
	}
	fp := newFakePlatform(t)
	fp.rejectRow = "7"
	srv := httptest.NewServer(fp)
	defer srv.Close()
	o := fastOptions(t, srv.URL)
	var out strings.Builder
	sum, err := Run(context.Background(), o, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	defer func() {
		if t.Failed() {
			t.Logf("\n%s", out.String())
		}
	}()
	tripsIn := len(SelectWindow(o.Trips, 2*time.Minute))
	if sum.RidesRequested+sum.RidesRejected != tripsIn || sum.RidesRejected != 1 || len(sum.RejectedExamples) != 1 ||
		!strings.Contains(sum.RejectedExamples[0], "outside the service area") {
		t.Errorf("requested %d rejected %d %v, trips in window %d", sum.RidesRequested, sum.RidesRejected, sum.RejectedExamples, tripsIn)
	}
	if sum.RidesMatched == 0 || sum.RidesCompleted == 0 || sum.RidesOffered < sum.RidesMatched || sum.Declines == 0 {
		t.Errorf("nothing happened: %+v", sum)
	}
	if sum.RidesUnmatched != sum.RidesRequested-sum.RidesMatched || sum.MatchRate <= 0 || sum.MatchRate > 1 {
		t.Errorf("unmatched %d rate %v", sum.RidesUnmatched, sum.MatchRate)
	}
	if sum.OfferLatencyCount != sum.RidesOffered || sum.TimeToMatchCount != sum.RidesMatched || sum.TimeToMatchP50S < 2 {
		t.Errorf("latency n=%d offered %d, ttm n=%d p50 %v", sum.OfferLatencyCount, sum.RidesOffered, sum.TimeToMatchCount, sum.TimeToMatchP50S)
	}
	if sum.RideStatusCounts["COMPLETED"] != sum.RidesCompleted || len(sum.HTTPErrors) != 0 {
		t.Errorf("status counts %v completed %d, errors %v %v", sum.RideStatusCounts, sum.RidesCompleted, sum.HTTPErrors, sum.ErrorExamples)
	}
	fp.mu.Lock()
	if fp.singles != 0 || fp.batches == 0 || int64(fp.pings) != sum.PingsTotal {
		t.Errorf("singles %d batches %d pings %d/%d", fp.singles, fp.batches, fp.pings, sum.PingsTotal)
	}
	if fp.statuses["available"] != o.Drivers || fp.statuses["busy"]+fp.statuses["navigating"]+fp.statuses["offline"] != 0 {
		t.Errorf("ping statuses %v: want exactly one go-online ping per driver", fp.statuses)
	}
	fp.mu.Unlock()
	raw, err := os.ReadFile(o.SummaryPath)
	if err != nil {
		t.Fatal(err)
	}
	var back Summary
	if err := json.Unmarshal(raw, &back); err != nil || back.RidesMatched != sum.RidesMatched {
		t.Errorf("summary file: %v %+v", err, back)
	}
}

func TestRunSinglePings(t *testing.T) {
	if testing.Short() {
		t.Skip("runs ~2 s")
	}
	fp := newFakePlatform(t)
	srv := httptest.NewServer(fp)
	defer srv.Close()
	o := fastOptions(t, srv.URL)
	o.Trips = testTrips(t, 20)
	o.Drivers = 10
	o.BatchSize = 1
	o.Drain = 30 * time.Second
	sum, err := Run(context.Background(), o, nil)
	if err != nil {
		t.Fatal(err)
	}
	fp.mu.Lock()
	defer fp.mu.Unlock()
	if fp.batches != 0 || fp.singles == 0 || sum.PingRequests != sum.PingsTotal {
		t.Errorf("batches %d singles %d requests %d pings %d", fp.batches, fp.singles, sum.PingRequests, sum.PingsTotal)
	}
}

func TestRunInterrupted(t *testing.T) {
	fp := newFakePlatform(t)
	srv := httptest.NewServer(fp)
	defer srv.Close()
	o := fastOptions(t, srv.URL)
	o.Speedup = 4
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	var out strings.Builder
	start := time.Now()
	sum, err := Run(ctx, o, &out)
	if !errors.Is(err, context.DeadlineExceeded) || sum == nil || !sum.Interrupted {
		t.Fatalf("err %v sum %+v", err, sum)
	}
	if time.Since(start) > 3*time.Second {
		t.Errorf("shutdown took %v", time.Since(start))
	}
	if sum.PingsTotal == 0 || !strings.Contains(out.String(), "INTERRUPTED") {
		t.Errorf("pings %d\n%s", sum.PingsTotal, out.String())
	}
	if _, err := os.Stat(o.SummaryPath); err != nil {
		t.Errorf("partial summary not written: %v", err)
	}
}

func TestRunPreflight(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(503) }))
	o := fastOptions(t, srv.URL)
	_, err := Run(context.Background(), o, nil)
	if err == nil || !strings.Contains(err.Error(), "flagdown dev") || !strings.Contains(err.Error(), "503") {
		t.Errorf("503 readyz: %v", err)
	}
	srv.Close()
	if _, err := Run(context.Background(), o, nil); err == nil || !strings.Contains(err.Error(), "make demo") {
		t.Errorf("closed server: %v", err)
	}
	o.Drivers = 0
	if _, err := Run(context.Background(), o, nil); err == nil {
		t.Error("0 drivers accepted")
	}
}

// TestRunLoadFake measures the replay's own ping throughput at the default scale (2000 drivers,
// 4 s simulated ping interval, speedup 8 → 4000 pings/s wall) against the in-process fake.
// Run with FLAGDOWN_REPLAY_LOAD=1 (optionally FLAGDOWN_REPLAY_BATCH=1 for single pings,
// FLAGDOWN_REPLAY_MINUTES=20 for the full default window with its 2 min drain, ~3 min wall).
func TestRunLoadFake(t *testing.T) {
	if os.Getenv("FLAGDOWN_REPLAY_LOAD") == "" {
		t.Skip("set FLAGDOWN_REPLAY_LOAD=1")
	}
	fp := newFakePlatform(t)
	srv := httptest.NewServer(fp)
	defer srv.Close()
	o := DefaultOptions()
	o.URL = srv.URL
	o.Trips = loadReal(t).Trips
	o.Minutes = 2
	o.Drain = 0
	o.Progress = false
	o.SummaryPath = ""
	if m := os.Getenv("FLAGDOWN_REPLAY_MINUTES"); m != "" { // full default run: 20, and drain 2m
		fmt.Sscan(m, &o.Minutes)
		o.Drain = DefaultOptions().Drain
	}
	if b := os.Getenv("FLAGDOWN_REPLAY_BATCH"); b != "" {
		fmt.Sscan(b, &o.BatchSize)
	}
	var out strings.Builder
	var ru0, ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	sum, err := Run(context.Background(), o, &out)
	if err != nil {
		t.Fatal(err)
	}
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := time.Duration(ru1.Utime.Nano()+ru1.Stime.Nano()-ru0.Utime.Nano()-ru0.Stime.Nano()) * time.Nanosecond
	t.Logf("\n%s\nCPU (replay + fake, one process): %v over %.1f s wall = %.2f cores", out.String(), cpu, sum.WallSeconds, cpu.Seconds()/sum.WallSeconds)
	want := float64(o.Drivers) / o.PingInterval.Seconds() * o.Speedup
	if sum.PingsPerS < 0.9*want {
		t.Errorf("sustained %.0f pings/s, want ≈ %.0f", sum.PingsPerS, want)
	}
}
