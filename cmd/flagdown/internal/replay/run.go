// Package replay drives a running flagdown platform through its HTTP API with real NYC taxi trips:
// simulated drivers ping their positions, see offers in the ping answers, accept or decline, drive
// straight-line to the pickup and the dropoff; simulated riders create one order per trip at its real
// pickup time. Simulated time runs Speedup times faster than wall time; the platform's own timers
// (offer window, heartbeat TTL) are wall time.
package replay

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"
)

// PlatformDefaultMaxSpeedMPS is the platform's default FLAGDOWN_MAX_SPEED_MPS (metres per wall
// second); a ping moving farther than that × wall seconds since the last applied ping, plus
// PlatformGPSNoiseM, is rejected as gps_jump (its heartbeat still counts).
const PlatformDefaultMaxSpeedMPS = 55

// PlatformGPSNoiseM is the distance in metres the platform always allows between two pings on top of
// its maximum speed × elapsed wall time before calling a move a gps_jump.
const PlatformGPSNoiseM = 50

// maxSentSpeedMPS caps the speed_mps sent in pings: the platform rejects a whole batch if one ping's
// speed_mps exceeds 2 × FLAGDOWN_MAX_SPEED_MPS.
const maxSentSpeedMPS = 100

// gpsJumpCheck returns how far a moving driver travels between two pings (metres) and how far the
// platform's default gps_jump rule allows for the wall time between them (metres).
func gpsJumpCheck(o Options) (stepM, allowedM float64) {
	stepM = o.DriverSpeedMPS * o.PingInterval.Seconds()
	allowedM = PlatformDefaultMaxSpeedMPS*o.PingInterval.Seconds()/o.Speedup + PlatformGPSNoiseM
	return stepM, allowedM
}

// MaxBatchSize is the largest number of pings the replay puts in one location-update call.
const MaxBatchSize = 500

// Options configure a replay. Durations marked simulated are replay time; wall = simulated / Speedup.
type Options struct {
	// URL is the platform's base URL (gateway), e.g. http://127.0.0.1:8080, without a trailing slash.
	URL string
	// TripsPath is the trips CSV (pickup_time,pickup_lat,pickup_lng,dropoff_lat,dropoff_lng).
	TripsPath string
	// Trips, when non-nil, is used instead of reading TripsPath (tests); sorted by pickup time.
	Trips []Trip
	// Drivers is the number of simulated drivers (≥ 1).
	Drivers int
	// Minutes is the replayed window in simulated minutes from the first pickup: [first, first+Minutes).
	Minutes float64
	// Speedup is simulated seconds per wall second (> 0).
	Speedup float64
	// PingInterval is each driver's ping interval, simulated time.
	PingInterval time.Duration
	// AcceptProb is the probability (0..1) a driver accepts an offer; otherwise he declines.
	AcceptProb float64
	// DriverSpeedMPS is the straight-line driving speed, metres per simulated second.
	DriverSpeedMPS float64
	// Seed seeds every random draw (driver start positions, think times, accept decisions).
	Seed uint64
	// SummaryPath is where the summary JSON is written; empty writes none.
	SummaryPath string
	// Concurrency is the number of HTTP workers (and of idle connections kept per host).
	Concurrency int
	// Drain is the extra simulated time after the last order-create before the replay stops.
	Drain time.Duration
	// BatchSize is the number of pings per location-update call, 1..MaxBatchSize; 1 sends each ping
	// as a single-ping request.
	BatchSize int
	// CheckURL makes Run fail fast unless GET URL/readyz answers 200.
	CheckURL bool
	// Progress draws a progress bar over simulated time on out.
	Progress bool
	// RunID is embedded in driver and rider ids so runs do not collide; empty picks one from the clock.
	RunID string
	// SpreadMinute spreads trips whose pickup time is a whole minute (the 2013 data's resolution)
	// uniformly over that minute, so demand arrives as it did and not in one burst per minute.
	SpreadMinute bool
	// HTTPClient overrides the HTTP client (tests); nil builds one with connection reuse tuned to Concurrency.
	HTTPClient *http.Client
}

// DefaultOptions returns the flag defaults of `flagdown replay`.
func DefaultOptions() Options {
	return Options{
		URL:            "http://127.0.0.1:8080",
		TripsPath:      "testdata/trips.csv",
		Drivers:        2000,
		Minutes:        20,
		Speedup:        8,
		PingInterval:   4 * time.Second,
		AcceptProb:     0.9,
		DriverSpeedMPS: 8,
		Seed:           1,
		SummaryPath:    "demo-summary.json",
		Concurrency:    32,
		Drain:          2 * time.Minute,
		BatchSize:      200,
		CheckURL:       true,
		SpreadMinute:   true,
		Progress:       true,
	}
}

func (o *Options) validate() error {
	switch {
	case o.URL == "":
		return errors.New("url is empty")
	case o.Drivers < 1:
		return errors.New("drivers must be ≥ 1")
	case !(o.Minutes > 0):
		return errors.New("minutes must be > 0")
	case !(o.Speedup > 0) || math.IsInf(o.Speedup, 0):
		return errors.New("speedup must be > 0")
	case o.PingInterval <= 0:
		return errors.New("ping-interval must be > 0")
	case !(o.AcceptProb >= 0 && o.AcceptProb <= 1):
		return errors.New("accept-prob must be within 0..1")
	case !(o.DriverSpeedMPS > 0):
		return errors.New("driver-speed-mps must be > 0")
	case o.Concurrency < 1:
		return errors.New("concurrency must be ≥ 1")
	case o.Drain < 0:
		return errors.New("drain must be ≥ 0")
	case o.BatchSize < 1 || o.BatchSize > MaxBatchSize:
		return fmt.Errorf("batch size must be within 1..%d", MaxBatchSize)
	}
	return nil
}

type driverState int

const (
	stIdle      driverState = iota
	stAccepting             // accept call in flight
	stToPickup              // driving to the pickup (or start call in flight)
	stToDropoff             // driving to the dropoff (or complete call in flight)
)

type driver struct {
	id       string
	pos      LatLng // position when not on a leg
	leg      *Leg
	state    driverState
	rideID   string
	dropoff  LatLng
	online   bool // the platform reported a status other than offline
	inFlight bool // a ping of this driver is being sent
	nextPing time.Duration
	rng      *rand.Rand
	seen     map[string]bool // offer ids handled
}

func (d *driver) position(t time.Duration) LatLng {
	if d.leg != nil {
		return d.leg.At(t)
	}
	return d.pos
}

type ride struct {
	requested   bool
	requestedAt time.Duration // simulated
	offered     bool
	accepted    bool
	acceptedAt  time.Duration // simulated
	pickupDistM float64
	completed   bool
}

type event struct {
	at  time.Duration
	seq int
	fn  func()
}

type eventHeap []event

// Len, Less, Swap, Push and Pop implement heap.Interface ordered by simulated time, then insertion.
func (h eventHeap) Len() int { return len(h) }

// Less orders by simulated time, then by insertion order.
func (h eventHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}

// Swap implements heap.Interface.
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }

// Push implements heap.Interface.
func (h *eventHeap) Push(x any) { *h = append(*h, x.(event)) }

// Pop implements heap.Interface.
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// sim is the replay state. Everything but the atomic counters and the inbox is owned by the scheduler
// goroutine; workers hand results back by posting closures to the inbox.
type sim struct {
	ctx    context.Context
	opts   Options
	c      *client
	origin time.Time // wall time of simulated offset 0 (the first pickup)
	trips  []Trip
	t0     time.Time // first pickup (real)

	drivers []*driver
	rides   map[string]*ride
	events  eventHeap
	seq     int
	jobs    chan func(context.Context)
	closed  bool // jobs is closed: nothing more is sent

	inboxMu sync.Mutex
	inbox   []func()

	pingsTotal, pingRequests, pingsSkipped, gpsRejected, staleRejected atomic.Int64

	ridesRejected    int
	rejectedExamples []string
	offersTotal      int
	declines         int
	declineConflicts int
	acceptConflicts  int
	conflictReasons  map[string]int
	transitionConf   int
	httpErrors       map[string]int
	errorExamples    []string
}

const maxExamples = 5

func (s *sim) now() time.Duration {
	return time.Duration(float64(time.Since(s.origin)) * s.opts.Speedup)
}

func (s *sim) post(fn func()) {
	s.inboxMu.Lock()
	s.inbox = append(s.inbox, fn)
	s.inboxMu.Unlock()
}

func (s *sim) drainInbox() {
	for {
		s.inboxMu.Lock()
		fns := s.inbox
		s.inbox = nil
		s.inboxMu.Unlock()
		if len(fns) == 0 {
			return
		}
		for _, fn := range fns {
			fn()
		}
	}
}

func (s *sim) schedule(at time.Duration, fn func()) {
	s.seq++
	heap.Push(&s.events, event{at: at, seq: s.seq, fn: fn})
}

// submit hands a job to the workers; it blocks while they are all busy (back-pressure).
func (s *sim) submit(job func(context.Context)) {
	if s.closed {
		return
	}
	select {
	case s.jobs <- job:
	case <-s.ctx.Done():
	}
}

func (s *sim) ride(id string) *ride {
	r := s.rides[id]
	if r == nil {
		r = &ride{}
		s.rides[id] = r
	}
	return r
}

// noteErr counts an unexpected error of endpoint; errors caused by cancellation are ignored.
func (s *sim) noteErr(endpoint string, err error) {
	if s.ctx.Err() != nil {
		return
	}
	s.httpErrors[endpoint]++
	if len(s.errorExamples) < maxExamples {
		s.errorExamples = append(s.errorExamples, endpoint+": "+err.Error())
	}
}

func isConflict(err error) (*APIError, bool) {
	var ae *APIError
	if errors.As(err, &ae) && ae.Status == http.StatusConflict {
		return ae, true
	}
	return nil, false
}

func retryable(err error) bool {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Status >= 500
	}
	return true // transport error
}

// Run replays the trips against the platform at opts.URL until the last order-create plus opts.Drain
// (simulated) or until ctx is cancelled, prints a summary table on out, writes opts.SummaryPath, and
// returns the summary. On cancellation it returns the partial summary (Interrupted set) and ctx.Err().
func Run(ctx context.Context, opts Options, out io.Writer) (*Summary, error) {
	if out == nil {
		out = io.Discard
	}
	opts.URL = strings.TrimRight(opts.URL, "/")
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if opts.RunID == "" {
		opts.RunID = strconv.FormatInt(time.Now().Unix()%1_000_000_000, 36)
	}
	hc := opts.HTTPClient
	if hc == nil {
		hc = newHTTPClient(opts.Concurrency)
	}
	c := &client{base: opts.URL, http: hc}
	if opts.CheckURL {
		if err := c.ready(ctx); err != nil {
			return nil, fmt.Errorf("platform at %s is not ready (%v): start the platform with `flagdown dev` or use `make demo`", opts.URL, err)
		}
	}

	all := opts.Trips
	skipped := 0
	if all == nil {
		tf, err := LoadTripsFile(opts.TripsPath)
		if err != nil {
			return nil, err
		}
		all, skipped = tf.Trips, tf.Skipped
		if skipped > 0 {
			fmt.Fprintf(out, "skipped %d unparsable rows of %s: %s\n", skipped, opts.TripsPath, strings.Join(tf.SkipReasons, "; "))
		}
	}
	trips := SelectWindow(all, time.Duration(opts.Minutes*float64(time.Minute)))
	if len(trips) == 0 {
		return nil, fmt.Errorf("no trips in the window (%d rows read)", len(all))
	}
	if opts.SpreadMinute {
		trips = SpreadMinute(trips, opts.Seed)
	}
	if step, allowed := gpsJumpCheck(opts); step > allowed {
		fmt.Fprintf(out, "warning: a moving driver covers %.0f m between pings (%.2f s wall apart) but the platform's default gps_jump rule "+
			"allows only %.0f m (FLAGDOWN_MAX_SPEED_MPS %d × dt + %d m noise): lower --speedup or --driver-speed-mps\n",
			step, opts.PingInterval.Seconds()/opts.Speedup, allowed, PlatformDefaultMaxSpeedMPS, PlatformGPSNoiseM)
	}
	s := &sim{
		ctx: ctx, opts: opts, c: c, trips: trips, t0: trips[0].PickupTime,
		rides: map[string]*ride{}, conflictReasons: map[string]int{}, httpErrors: map[string]int{},
		jobs: make(chan func(context.Context), opts.Concurrency*4),
	}
	starts := DrawDriverStarts(all, opts.Drivers, opts.Seed)
	warmup := opts.PingInterval // every driver is online before the first order
	for i, p := range starts {
		s.drivers = append(s.drivers, &driver{
			id:       fmt.Sprintf("replay-%d-%s-d%d", opts.Seed, opts.RunID, i),
			pos:      p,
			nextPing: -warmup + time.Duration(int64(opts.PingInterval)*int64(i)/int64(len(starts))),
			rng:      rand.New(rand.NewPCG(opts.Seed, uint64(i)+1)),
			seen:     map[string]bool{},
		})
	}
	lastOffset := trips[len(trips)-1].PickupTime.Sub(s.t0)
	end := lastOffset + opts.Drain

	fmt.Fprintf(out, "replaying %d trips (%s .. +%g min) with %d drivers at %gx against %s (run %s)\n",
		len(trips), s.t0.Format(time.RFC3339), opts.Minutes, opts.Drivers, opts.Speedup, opts.URL, opts.RunID)

	var wg sync.WaitGroup
	for range opts.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for job := range s.jobs {
				job(ctx)
			}
		}()
	}

	var bar *progressbar.ProgressBar
	total := int64((warmup + end).Seconds())
	if opts.Progress {
		bar = progressbar.NewOptions64(total,
			progressbar.OptionSetWriter(out),
			progressbar.OptionSetDescription("simulated s"),
			progressbar.OptionShowCount(),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionThrottle(200*time.Millisecond),
			progressbar.OptionSetWidth(30),
		)
	}

	wallStart := time.Now()
	s.origin = wallStart.Add(time.Duration(float64(warmup) / opts.Speedup))
	tick := time.NewTicker(20 * time.Millisecond)
	nextTrip := 0
	interrupted := false
loop:
	for {
		select {
		case <-ctx.Done():
			interrupted = true
			break loop
		case <-tick.C:
		}
		s.drainInbox()
		t := s.now()
		if t >= end {
			break loop
		}
		for nextTrip < len(trips) && trips[nextTrip].PickupTime.Sub(s.t0) <= t {
			s.orderCreate(trips[nextTrip])
			nextTrip++
		}
		for len(s.events) > 0 && s.events[0].at <= t {
			heap.Pop(&s.events).(event).fn()
		}
		s.pingDue(t)
		if bar != nil {
			_ = bar.Set64(min(total, int64((t + warmup).Seconds())))
		}
	}
	tick.Stop()
	pingWall := time.Since(wallStart)
	s.closed = true
	close(s.jobs)
	wg.Wait()
	s.drainInbox()
	if bar != nil {
		if !interrupted {
			_ = bar.Finish()
		}
		fmt.Fprintln(out)
	}

	sum := s.summary(nextTrip, skipped, pingWall)
	sum.Interrupted = interrupted
	if !interrupted {
		fmt.Fprintf(out, "fetching %d rides for offer latency…\n", sum.RidesRequested)
		s.fetchRides(ctx, sum)
		if ctx.Err() != nil {
			sum.Interrupted = true
		}
	}
	sum.WallSeconds = time.Since(wallStart).Seconds()
	sum.WriteTable(out)
	if opts.SummaryPath != "" {
		if err := sum.WriteJSON(opts.SummaryPath); err != nil {
			return sum, fmt.Errorf("writing summary: %w", err)
		}
		fmt.Fprintf(out, "summary written to %s\n", opts.SummaryPath)
	}
	if sum.Interrupted {
		return sum, ctx.Err()
	}
	return sum, nil
}

// orderCreate sends the trip's order; retried (same Idempotency-Key) on transport errors and 5xx.
func (s *sim) orderCreate(tr Trip) {
	rider := fmt.Sprintf("replay-%d-%s-%d", s.opts.Seed, s.opts.RunID, tr.Row)
	s.submit(func(ctx context.Context) {
		at := s.now()
		var (
			id  string
			err error
		)
		for attempt := 0; attempt < 3; attempt++ {
			if attempt > 0 {
				select {
				case <-ctx.Done():
				case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
				}
			}
			id, _, err = s.c.orderCreate(ctx, rider, tr.Pickup, tr.Dropoff, rider)
			if err == nil || !retryable(err) || ctx.Err() != nil {
				break
			}
		}
		s.post(func() {
			var ae *APIError
			switch {
			case err == nil:
				r := s.ride(id)
				if !r.requested {
					r.requested, r.requestedAt = true, at
				}
			case errors.As(err, &ae) && ae.Status >= 400 && ae.Status < 500:
				s.ridesRejected++
				if len(s.rejectedExamples) < maxExamples {
					s.rejectedExamples = append(s.rejectedExamples, fmt.Sprintf("row %d: %v", tr.Row, err))
				}
			default:
				s.noteErr("order-create", err)
			}
		})
	})
}

// pingDue sends the pings due at simulated time t, BatchSize per call.
func (s *sim) pingDue(t time.Duration) {
	var batch []Ping
	var who []*driver
	wall := time.Now().UTC().Format(time.RFC3339Nano)
	flush := func() {
		if len(batch) == 0 {
			return
		}
		pings, ds := batch, who
		batch, who = nil, nil
		s.submit(func(ctx context.Context) {
			res, err := s.c.locationUpdate(ctx, pings, s.opts.BatchSize > 1)
			s.pingRequests.Add(1)
			s.post(func() { s.pingResults(ds, res, err) })
		})
	}
	for _, d := range s.drivers {
		if d.nextPing > t {
			continue
		}
		d.nextPing += s.opts.PingInterval
		if d.nextPing <= t { // fell behind: do not burst, keep the phase
			d.nextPing += (t - d.nextPing) / s.opts.PingInterval * s.opts.PingInterval
			d.nextPing += s.opts.PingInterval
		}
		if d.inFlight {
			s.pingsSkipped.Add(1)
			continue
		}
		d.inFlight = true
		p := d.position(t)
		ping := Ping{DriverID: d.id, Lat: p.Lat, Lng: p.Lng, TS: wall}
		if d.leg != nil && d.leg.End() > t {
			h := d.leg.Heading()
			ping.Heading, ping.SpeedMPS = &h, min(s.opts.DriverSpeedMPS, maxSentSpeedMPS)
		}
		if !d.online && d.state == stIdle {
			ping.Status = "available"
		}
		batch = append(batch, ping)
		who = append(who, d)
		if len(batch) >= s.opts.BatchSize {
			flush()
		}
	}
	flush()
}

func (s *sim) pingResults(ds []*driver, res []PingResult, err error) {
	for _, d := range ds {
		d.inFlight = false
	}
	if err != nil && len(res) == 0 {
		s.noteErr("location-update", err)
		return
	}
	if err != nil {
		s.noteErr("location-update", err)
	}
	for i, r := range res {
		if i >= len(ds) {
			break
		}
		d := ds[i]
		s.pingsTotal.Add(1)
		switch r.Rejected {
		case "gps_jump":
			s.gpsRejected.Add(1)
		case "stale":
			s.staleRejected.Add(1)
		}
		if r.Status != "" {
			d.online = r.Status != "offline"
		}
		if o := r.Offer; o != nil && o.OfferID != "" && !d.seen[o.OfferID] {
			d.seen[o.OfferID] = true
			s.offersTotal++
			s.ride(o.RideID).offered = true
			think := 2*time.Second + time.Duration(d.rng.Float64()*float64(6*time.Second))
			accept := d.rng.Float64() < s.opts.AcceptProb
			offer := *o
			s.schedule(s.now()+think, func() { s.decide(d, offer, accept) })
		}
	}
}

// decide accepts or declines offer for d after the think time.
func (s *sim) decide(d *driver, o Offer, accept bool) {
	if !accept || d.state != stIdle {
		s.submit(func(ctx context.Context) {
			err := s.c.rideAction(ctx, o.RideID, "decline", d.id)
			s.post(func() {
				if err == nil {
					s.declines++
				} else if _, ok := isConflict(err); ok {
					s.declineConflicts++
				} else {
					s.noteErr("decline", err)
				}
			})
		})
		return
	}
	d.state = stAccepting
	s.submit(func(ctx context.Context) {
		err := s.c.accept(ctx, o.RideID, d.id)
		s.post(func() {
			if err != nil {
				d.state = stIdle
				if ae, ok := isConflict(err); ok {
					s.acceptConflicts++
					s.conflictReasons[ae.Reason]++
				} else {
					s.noteErr("accept", err)
				}
				return
			}
			t := s.now()
			r := s.ride(o.RideID)
			r.accepted, r.acceptedAt, r.pickupDistM = true, t, o.DistanceM
			d.state, d.rideID, d.dropoff = stToPickup, o.RideID, o.Dropoff
			s.drive(d, t, o.Pickup, func() { s.transition(d, "start", 0) })
		})
	})
}

// drive starts a straight-line leg of d from its position at t to dest and calls arrived on arrival.
func (s *sim) drive(d *driver, t time.Duration, dest LatLng, arrived func()) {
	leg := &Leg{From: d.position(t), To: dest, Start: t, SpeedMPS: s.opts.DriverSpeedMPS}
	d.leg = leg
	s.schedule(leg.End(), func() {
		d.pos, d.leg = dest, nil
		arrived()
	})
}

// transition posts start or complete for d's ride; transport errors and 5xx are retried a few times.
func (s *sim) transition(d *driver, action string, attempt int) {
	rideID := d.rideID
	s.submit(func(ctx context.Context) {
		err := s.c.rideAction(ctx, rideID, action, d.id)
		s.post(func() {
			if err != nil {
				if _, ok := isConflict(err); ok {
					s.transitionConf++
				} else {
					s.noteErr(action, err)
					if retryable(err) && attempt < 3 && s.ctx.Err() == nil {
						s.schedule(s.now()+2*time.Second, func() { s.transition(d, action, attempt+1) })
						return
					}
				}
				d.state, d.rideID = stIdle, "" // give up on the ride
				return
			}
			if action == "start" {
				d.state = stToDropoff
				s.drive(d, s.now(), d.dropoff, func() { s.transition(d, "complete", 0) })
				return
			}
			s.ride(rideID).completed = true
			d.state, d.rideID = stIdle, ""
		})
	})
}

func (s *sim) summary(tripsSent, skipped int, pingWall time.Duration) *Summary {
	o := s.opts
	sum := &Summary{
		RidesRejected: s.ridesRejected, RejectedExamples: nonNil(s.rejectedExamples),
		OffersTotal: s.offersTotal, Declines: s.declines, DeclineConflicts: s.declineConflicts,
		AcceptConflicts: s.acceptConflicts, AcceptConflictReasons: s.conflictReasons,
		TransitionConflicts: s.transitionConf, RideStatusCounts: map[string]int{},
		PingsTotal: s.pingsTotal.Load(), PingRequests: s.pingRequests.Load(), PingsSkipped: s.pingsSkipped.Load(),
		GPSRejected: s.gpsRejected.Load(), StaleRejected: s.staleRejected.Load(),
		HTTPErrors: s.httpErrors, ErrorExamples: nonNil(s.errorExamples),
		TripsInWindow: len(s.trips), TripsSkippedRows: skipped,
		Drivers: o.Drivers, Speedup: o.Speedup, WindowMinutes: o.Minutes, PingIntervalS: o.PingInterval.Seconds(),
		AcceptProb: o.AcceptProb, DriverSpeedMPS: o.DriverSpeedMPS, DrainS: o.Drain.Seconds(), Seed: o.Seed,
		Concurrency: o.Concurrency, BatchSize: o.BatchSize, TripsPath: o.TripsPath, URL: o.URL, RunID: o.RunID,
	}
	if pingWall > 0 {
		sum.PingsPerS = float64(sum.PingsTotal) / pingWall.Seconds()
	}
	var ttm, dist []float64
	for _, r := range s.rides {
		if !r.requested {
			continue
		}
		sum.RidesRequested++
		if r.offered {
			sum.RidesOffered++
		}
		if r.accepted {
			sum.RidesAccepted++
			ttm = append(ttm, max(0, (r.acceptedAt-r.requestedAt).Seconds()))
			dist = append(dist, r.pickupDistM)
		}
		if r.completed {
			sum.RidesCompleted++
		}
	}
	sum.RidesMatched = sum.RidesAccepted
	sum.RidesUnmatched = sum.RidesRequested - sum.RidesMatched
	if sum.RidesRequested > 0 {
		sum.MatchRate = float64(sum.RidesMatched) / float64(sum.RidesRequested)
	}
	sum.TimeToMatchCount = len(ttm)
	sum.TimeToMatchP50S, sum.TimeToMatchP95S, sum.TimeToMatchP99S = Percentile(ttm, 50), Percentile(ttm, 95), Percentile(ttm, 99)
	sum.PickupDistanceCount = len(dist)
	sum.PickupDistanceMeanM, sum.PickupDistanceP50M, sum.PickupDistanceP95M = Mean(dist), Percentile(dist, 50), Percentile(dist, 95)
	return sum
}

// fetchRides reads every requested ride with bounded concurrency for the offer latency
// (first_offered_at − created_at, wall ms) and the final status counts.
func (s *sim) fetchRides(ctx context.Context, sum *Summary) {
	ids := make([]string, 0, len(s.rides))
	for id, r := range s.rides {
		if r.requested {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	var (
		mu     sync.Mutex
		lat    []float64
		wg     sync.WaitGroup
		idx    atomic.Int64
		errs   int
		status = map[string]int{}
	)
	for range s.opts.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(idx.Add(1)) - 1
				if i >= len(ids) || ctx.Err() != nil {
					return
				}
				rv, err := s.c.getRide(ctx, ids[i])
				mu.Lock()
				if err != nil {
					if ctx.Err() == nil {
						errs++
						if len(sum.ErrorExamples) < maxExamples {
							sum.ErrorExamples = append(sum.ErrorExamples, "ride "+ids[i]+": "+err.Error())
						}
					}
				} else {
					status[rv.Status]++
					if rv.CreatedAt != nil && rv.FirstOfferedAt != nil {
						lat = append(lat, float64(rv.FirstOfferedAt.Sub(*rv.CreatedAt))/float64(time.Millisecond))
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	sum.RideFetchErrors = errs
	sum.RideStatusCounts = status
	sum.OfferLatencyCount = len(lat)
	sum.OfferLatencyP50Ms, sum.OfferLatencyP99Ms = Percentile(lat, 50), Percentile(lat, 99)
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// SpreadMinute returns a copy of trips in which every pickup time with zero seconds is moved by a
// seeded uniform offset in [0, 60 s): the source records pickups to the minute, and replaying all
// of a minute's requests in the same instant would measure the data's rounding, not the platform.
// The result stays inside each trip's own minute and is sorted by the new pickup time.
func SpreadMinute(trips []Trip, seed uint64) []Trip {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	out := append([]Trip(nil), trips...)
	for i := range out {
		if t := out[i].PickupTime; t.Second() == 0 && t.Nanosecond() == 0 {
			out[i].PickupTime = t.Add(time.Duration(rng.Float64() * float64(time.Minute)))
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].PickupTime.Before(out[j].PickupTime) })
	return out
}
