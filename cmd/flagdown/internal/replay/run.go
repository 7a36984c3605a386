// Package replay drives a running flagdown platform through its HTTP API with real NYC taxi trips:
// simulated drivers ping their positions, see offers in the ping answers, accept or decline, drive
// straight-line to the pickup and the dropoff; simulated riders create one order per trip at its real
// pickup time. Simulated time runs Speedup times faster than wall time; the platform's own timers
// (offer window, heartbeat TTL, match retries) are wall time.
//
// Drivers misbehave on purpose: with NoAnswerProb a driver ignores an offer (neither accepts nor
// declines, so the platform times it out and offers the ride to the next driver), and with
// OfflineProbPerHour he stops pinging for good (the platform takes him offline after its heartbeat TTL
// and re-opens an ACCEPTED ride of his). The summary counts what the client can see of both.
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

	"github.com/flagdown/flagdown/shared/config"
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
	// Minutes is the replayed window in simulated minutes, opening SkipMinutes after the file's
	// first pickup: [first+SkipMinutes, first+SkipMinutes+Minutes).
	Minutes float64
	// SkipMinutes is how many simulated minutes of the file, from its first pickup, the window skips
	// (≥ 0). The trips of those minutes are not replayed; the dropoffs of those that ended before the
	// window opens place the drivers (StartsDropoffsBefore). DefaultOptions: DefaultSkipMinutes.
	SkipMinutes float64
	// MatchMode names the platform's matching mode (FLAGDOWN_MATCH_MODE: "greedy", "batch" or "auto") for
	// the summary. The replay cannot observe it: it is what the replay was told the platform runs
	// with (flagdown replay: --match-mode, default the FLAGDOWN_MATCH_MODE of its own environment,
	// which make demo shares with flagdown dev). DefaultOptions: "greedy".
	MatchMode string
	// Speedup is simulated seconds per wall second (> 0).
	Speedup float64
	// PingInterval is each driver's ping interval, simulated time.
	PingInterval time.Duration
	// AcceptProb is the probability (0..1) a driver accepts an offer he answers; otherwise he declines.
	AcceptProb float64
	// NoAnswerProb is the probability (0..1), drawn per offer before AcceptProb, that the driver ignores
	// the offer: he neither accepts nor declines, and the platform times it out after its offer window
	// (FLAGDOWN_OFFER_WINDOW, wall time).
	NoAnswerProb float64
	// OfflineProbPerHour is the probability (0..1, 1 excluded) that a driver drops offline for good
	// within any one simulated hour of his shift (constant hazard −ln(1−p) per simulated hour, counted
	// from his first ping). A dropped driver stops pinging and answering: he abandons an offer he holds
	// and an ACCEPTED ride he is driving to (the platform re-opens it once his heartbeat TTL,
	// FLAGDOWN_HEARTBEAT_TTL wall time, lapses). A driver carrying a passenger (start sent, or driving to
	// the dropoff) completes that ride first and drops right after.
	OfflineProbPerHour float64
	// DriverSpeedMPS is the straight-line driving speed, metres per simulated second.
	DriverSpeedMPS float64
	// DriverStarts is where the drivers start (see BuildStartPool); DefaultOptions:
	// StartsDropoffsBefore.
	DriverStarts DriverStarts
	// Seed seeds every random draw (driver start positions, think times, accept, no-answer and
	// offline decisions).
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
	// Push makes every simulated driver and rider hold a WebSocket to the platform's gateway (GET
	// /ws, the local API Gateway of flagdown dev): drivers react to offers pushed to them instead of
	// waiting for their next ping answer, riders receive their ride's statuses, and the summary
	// reports offer push latency and messages lost. false keeps polling only.
	Push bool
	// Progress shows how far the replay is on out: a progress bar over simulated time when out is a
	// terminal, otherwise (a file, a pipe, CI) one plain line every ProgressEvery of wall time.
	Progress bool
	// ProgressEvery is the wall time between two progress lines when out is not a terminal; ≤ 0 means
	// DefaultProgressEvery.
	ProgressEvery time.Duration
	// RunID is embedded in driver and rider ids so runs do not collide; empty picks one from the clock.
	RunID string
	// SpreadMinute spreads trips whose pickup time is a whole minute (the 2013 data's resolution)
	// uniformly over that minute, so demand arrives as it did and not in one burst per minute.
	SpreadMinute bool
	// HTTPClient overrides the HTTP client (tests); nil builds one with connection reuse tuned to Concurrency.
	HTTPClient *http.Client
	// Verify makes Run check the platform's invariants at the end (package shared/invariants, as
	// `flagdown verify` does), VerifyGrace + VerifySettle after its last request, reading the
	// platform's PostgreSQL and Redis directly: the replay must run where it can reach them. Run
	// fails when a count is not 0 or when the check cannot run.
	Verify bool
	// VerifyGrace is the grace of that check (≥ 0): what is only eventually true counts once it has
	// stayed wrong this long.
	VerifyGrace time.Duration
	// JWTSecret is the platform's FLAGDOWN_JWT_SECRET: the replay mints every simulated driver's and
	// rider's token (and one ops token for batched pings) with it. Required.
	JWTSecret string
	// JWTIssuer and JWTAudience are the iss and aud of those tokens (the platform's
	// FLAGDOWN_JWT_ISSUER and FLAGDOWN_JWT_AUDIENCE; DefaultOptions: "flagdown").
	JWTIssuer, JWTAudience string
	// VerifyConfig names the platform's PostgreSQL and Redis (URLs, schema, key prefix); nil reads
	// them from the environment (config.Load), as `flagdown dev` does.
	VerifyConfig *config.Config
}

// DefaultOptions returns the flag defaults of `flagdown replay`.
func DefaultOptions() Options {
	return Options{
		URL:                "http://127.0.0.1:8080",
		TripsPath:          "testdata/trips.csv",
		Drivers:            2000,
		Minutes:            20,
		SkipMinutes:        DefaultSkipMinutes,
		MatchMode:          MatchModeGreedy,
		Speedup:            8,
		PingInterval:       4 * time.Second,
		AcceptProb:         0.9,
		NoAnswerProb:       0.05,
		OfflineProbPerHour: 0.02,
		DriverSpeedMPS:     8,
		DriverStarts:       StartsDropoffsBefore,
		Seed:               1,
		SummaryPath:        "demo-summary.json",
		Concurrency:        32,
		JWTIssuer:          "flagdown",
		JWTAudience:        "flagdown",
		Drain:              2 * time.Minute,
		BatchSize:          200,
		CheckURL:           true,
		Push:               true,
		SpreadMinute:       true,
		Progress:           true,
		Verify:             true,
		VerifyGrace:        DefaultVerifyGrace,
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
	case !(o.SkipMinutes >= 0) || math.IsInf(o.SkipMinutes, 0):
		return errors.New("skip-minutes must be ≥ 0")
	case o.MatchMode != MatchModeGreedy && o.MatchMode != MatchModeBatch && o.MatchMode != MatchModeAuto:
		return fmt.Errorf("match-mode %q: want %s, %s or %s", o.MatchMode, MatchModeGreedy, MatchModeBatch, MatchModeAuto)
	case !(o.Speedup > 0) || math.IsInf(o.Speedup, 0):
		return errors.New("speedup must be > 0")
	case o.PingInterval <= 0:
		return errors.New("ping-interval must be > 0")
	case !(o.AcceptProb >= 0 && o.AcceptProb <= 1):
		return errors.New("accept-prob must be within 0..1")
	case !(o.NoAnswerProb >= 0 && o.NoAnswerProb <= 1):
		return errors.New("no-answer-prob must be within 0..1")
	case !(o.OfflineProbPerHour >= 0 && o.OfflineProbPerHour < 1):
		return errors.New("offline-prob must be within 0..1 (1 excluded: it is a per-hour probability)")
	case !(o.DriverSpeedMPS > 0):
		return errors.New("driver-speed-mps must be > 0")
	case o.Concurrency < 1:
		return errors.New("concurrency must be ≥ 1")
	case o.Drain < 0:
		return errors.New("drain must be ≥ 0")
	case o.BatchSize < 1 || o.BatchSize > MaxBatchSize:
		return fmt.Errorf("batch size must be within 1..%d", MaxBatchSize)
	case o.VerifyGrace < 0:
		return errors.New("verify-grace must be ≥ 0")
	}
	if _, err := ParseDriverStarts(string(o.DriverStarts)); err != nil {
		return err
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
	fate     *rand.Rand      // no-answer and offline draws (a stream of their own)
	offline  bool            // dropped for good: no more pings, offers or actions
	// dropDue is set when his drop time came while he carried a passenger: he drops when that ride ends.
	dropDue bool
	// ignoring is the offer he is ignoring until it vanishes from his ping answers (nil when none).
	ignoring *ignoredOffer
	// sock is his phone's WebSocket (Options.Push); pushed the offer ids that came on it.
	sock   *socket
	pushed map[string]bool
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
	offeredTo   map[string]bool // distinct drivers seen offered this ride in their ping answers
	accepted    bool            // at least one accept answered 200
	accepts     int             // accepts answered 200 (more than one: re-opened and matched again)
	acceptedAt  time.Duration   // simulated, of the latest successful accept
	acceptedBy  string          // driver of the latest successful accept
	acceptedExp time.Time       // expires_at of the offer accepted latest (zero if unparsable)
	pickupDistM float64         // offer distance_m of the latest successful accept
	completed   bool
	// offeredAfterAccept: another driver saw an offer of it created after the latest accept (its
	// expires_at is later than the accepted offer's), so the platform re-opened it.
	offeredAfterAccept bool
	// abandoned: the driver of the latest accept dropped offline before starting it.
	abandoned    bool
	abandonments int    // accepts abandoned by a driver dropping offline
	abandonedBy  string // driver of the latest abandonment
	// rematchedAfterAbandon: a different driver accepted it after an abandonment.
	rematchedAfterAbandon bool
	ignored               []*ignoredOffer // offers of it that a driver ignored
	// createdWall is when order-create answered (wall); firstPushWall when the first offer of the
	// ride arrived on a driver's socket (wall; zero when none did).
	createdWall, firstPushWall time.Time
	// riderSock is the rider's WebSocket while his ride is open (Options.Push); pushedStatus the
	// statuses pushed to him, in arrival order.
	riderSock    *socket
	pushedStatus []string
	// acceptExpectPush: the rider's socket was up when the accept was sent, so ACCEPTED must reach it.
	acceptExpectPush bool
	final            *RideView // end-of-run GET /function/ride/{id}; nil when not fetched
	// quote is the fare-estimate answer the ride was ordered at (nil when none); arrivedAt when its
	// driver reached the pickup (simulated, of the latest accept; 0 when none did).
	quote     *FareQuote
	arrivedAt time.Duration
}

// ignoredOffer is an offer a simulated driver left unanswered (no-answer draw, or he dropped offline
// holding it).
type ignoredOffer struct {
	offerID, driverID string
	expiresAt         time.Time // the offer's expires_at (zero if unparsable)
	timedOut          bool      // seen to time out: vanished from his ping answers, or ride offered to another driver after it
}

// Final ride statuses the summary tells apart (dispatch.RideStatus values as the API spells them).
const (
	statusRequested = "REQUESTED"
	statusUnmatched = "UNMATCHED"
)

// reopened reports whether the ride was seen re-opened after an accept: a second successful accept,
// an offer created after the accept, or a final GET showing it REQUESTED/UNMATCHED with accepted_at set
// or held by a driver other than the latest accepter.
func (r *ride) reopened() bool {
	if r.accepts > 1 || r.offeredAfterAccept {
		return true
	}
	f := r.final
	if f == nil {
		return false
	}
	if f.AcceptedAt != nil && (f.Status == statusRequested || f.Status == statusUnmatched) {
		return true
	}
	return r.acceptedBy != "" && f.DriverID != "" && f.DriverID != r.acceptedBy
}

// matched reports whether the ride's latest accept stuck: accepted, not abandoned by a driver who
// dropped offline, and not back to REQUESTED/UNMATCHED in the final GET.
func (r *ride) matched() bool {
	if !r.accepted || r.abandoned {
		return false
	}
	return r.final == nil || (r.final.Status != statusRequested && r.final.Status != statusUnmatched)
}

// rematchedAfterOffline reports whether a ride abandoned by a driver who dropped offline was accepted
// by another driver afterwards (a successful accept seen, or the final GET naming another driver).
func (r *ride) rematchedAfterOffline() bool {
	if r.abandonments == 0 {
		return false
	}
	if r.rematchedAfterAbandon {
		return true
	}
	f := r.final
	return f != nil && f.DriverID != "" && f.DriverID != r.abandonedBy &&
		f.Status != statusRequested && f.Status != statusUnmatched
}

// parseExpiry parses an offer's expires_at; zero when absent or malformed.
func parseExpiry(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}
	}
	return t
}

// laterOffer reports whether an offer expiring at a was created after one expiring at b (all offers
// have the same window); unknown times count as later (ping answers arrive in order).
func laterOffer(a, b time.Time) bool {
	return a.IsZero() || b.IsZero() || a.After(b)
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
	starts StartPool // where the drivers' start positions were drawn from

	drivers []*driver
	rides   map[string]*ride
	events  eventHeap
	seq     int
	jobs    chan func(context.Context)
	closed  bool // jobs is closed: nothing more is sent

	inboxMu sync.Mutex
	inbox   []func()

	pingsTotal, pingRequests, pingsSkipped, gpsRejected, staleRejected atomic.Int64

	push            pushStats
	dialSem         chan struct{}
	pingOffers      []pingOffer
	offersByPush    int
	offersByPing    int
	positionsPushed int
	riderSockets    sync.WaitGroup
	lostOffers      int
	lostStatuses    int

	offersIgnored  int
	offerTimeouts  int
	driversOffline int
	fetched        bool // the end-of-run GET of every ride ran
	fetchErrs      int
	offerLatMs     []float64
	matchLatMs     []float64
	statusCounts   map[string]int

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
// (simulated) or until ctx is cancelled, checks the platform's invariants when opts.Verify is set,
// prints a summary table on out, writes opts.SummaryPath, and returns the summary. On cancellation it
// returns the partial summary (Interrupted set) and ctx.Err(). After writing the summary it returns
// an error when the invariants could not be checked or any invariant_* count is not 0.
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
	c := &client{base: opts.URL, http: hc, tokens: &tokens{secret: []byte(opts.JWTSecret), issuer: opts.JWTIssuer, aud: opts.JWTAudience, cache: map[string]string{}}}
	if opts.CheckURL {
		if err := c.ready(ctx); err != nil {
			return nil, fmt.Errorf("platform at %s is not ready (%v): start the platform with `flagdown dev` or use `make demo`", opts.URL, err)
		}
	}
	if opts.JWTSecret == "" {
		return nil, fmt.Errorf("no token secret: give the replay the platform's FLAGDOWN_JWT_SECRET (make dev writes it to .local/dev.env; flagdown dev alone logs the one it generated) to mint its drivers' and riders' tokens")
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
	window := time.Duration(opts.Minutes * float64(time.Minute))
	skip := time.Duration(opts.SkipMinutes * float64(time.Minute))
	trips := SelectWindowAt(all, skip, window)
	if len(trips) == 0 {
		return nil, fmt.Errorf("no trips in the window (%d rows read; the window skips %g min of the file: lower --skip-minutes)", len(all), opts.SkipMinutes)
	}
	opens := WindowStart(all, skip)
	pool, err := BuildStartPool(all, opens, opens.Add(window), opts.DriverStarts)
	if err != nil {
		return nil, err
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
		ctx: ctx, opts: opts, c: c, trips: trips, t0: trips[0].PickupTime, starts: pool,
		rides: map[string]*ride{}, conflictReasons: map[string]int{}, httpErrors: map[string]int{},
		jobs: make(chan func(context.Context), opts.Concurrency*4), dialSem: make(chan struct{}, maxParallelDials),
	}
	starts := DrawDriverStarts(pool.Points, opts.Drivers, opts.Seed)
	warmup := opts.PingInterval // every driver is online before the first order
	lastOffset := trips[len(trips)-1].PickupTime.Sub(s.t0)
	end := lastOffset + opts.Drain
	for i, p := range starts {
		d := &driver{
			id:       fmt.Sprintf("replay-%d-%s-d%d", opts.Seed, opts.RunID, i),
			pos:      p,
			nextPing: -warmup + time.Duration(int64(opts.PingInterval)*int64(i)/int64(len(starts))),
			rng:      rand.New(rand.NewPCG(opts.Seed, uint64(i)+1)),
			seen:     map[string]bool{},
			fate:     newFateRand(opts.Seed, i),
		}
		s.drivers = append(s.drivers, d)
		if opts.Push {
			s.driverSocket(d, i)
		}
		// His shift starts at his first ping; the drop, if any, is scheduled in simulated time.
		if after, ok := drawOffline(d.fate, opts.OfflineProbPerHour); ok && d.nextPing+after < end {
			s.schedule(d.nextPing+after, func() { s.dropOffline(d) })
		}
	}

	fmt.Fprintf(out, "replaying %d trips (%s .. +%g min, %g min of the file skipped) with %d drivers at %gx against %s (run %s, match mode %s)\n",
		len(trips), opens.Format(time.RFC3339), opts.Minutes, opts.SkipMinutes, opts.Drivers, opts.Speedup, opts.URL, opts.RunID, opts.MatchMode)
	fmt.Fprintf(out, "drivers start at: %s\n", pool.describe())

	if opts.Push {
		for _, d := range s.drivers {
			select {
			case <-d.sock.ready:
			case <-ctx.Done():
			}
		}
		fmt.Fprintf(out, "%d driver sockets open on %s\n", len(s.drivers), wsURL(opts.URL))
	}

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

	total := warmup + end
	wallStart := time.Now()
	s.origin = wallStart.Add(time.Duration(float64(warmup) / opts.Speedup))
	var prog *progress
	if opts.Progress {
		prog = newProgress(out, total, opts.ProgressEvery, wallStart)
	}
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
		if prog != nil {
			prog.update(time.Now(), t+warmup, s.progressCounts)
		}
	}
	tick.Stop()
	pingWall := time.Since(wallStart)
	s.closed = true
	close(s.jobs)
	wg.Wait()
	lastRequest := time.Now() // every ping, order and action has been answered
	s.drainInbox()
	if opts.Push {
		s.closeSockets()
	}
	if prog != nil {
		prog.finish(time.Now(), !interrupted, s.progressCounts)
	}

	if !interrupted {
		fmt.Fprintf(out, "fetching %d rides for offer latency and final status…\n", s.requestedCount())
		s.fetchRides(ctx)
		if ctx.Err() != nil {
			interrupted = true
		}
	}
	sum := s.summary(nextTrip, skipped, pingWall)
	var verifyErr error
	if !interrupted && opts.Verify {
		if err := waitBeforeVerify(ctx, opts, lastRequest, out); err != nil {
			interrupted = true
		} else if verifyErr = verifyInto(ctx, opts, sum, out); ctx.Err() != nil {
			interrupted, verifyErr = true, nil
		}
	}
	sum.Interrupted = interrupted
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
	if verifyErr != nil {
		return sum, verifyErr
	}
	return sum, invariantsError(sum)
}

// orderCreate sends the trip's order; retried (same Idempotency-Key) on transport errors and 5xx.
func (s *sim) orderCreate(tr Trip) {
	rider := fmt.Sprintf("replay-%d-%s-%d", s.opts.Seed, s.opts.RunID, tr.Row)
	s.submit(func(ctx context.Context) {
		var sock *socket
		if s.opts.Push {
			sock = s.riderSocket(rider, tr.Row)
			select {
			case <-sock.ready:
			case <-ctx.Done():
			}
		}
		at := s.now()
		var (
			id  string
			err error
		)
		// The rider looks at the price first (fare-estimate) and orders at that quote; a platform
		// without fare-estimate (or one that fails) is ordered from without a quote.
		quote, qerr := s.c.fareEstimate(ctx, rider, tr.Pickup, tr.Dropoff)
		quoteID := ""
		if qerr == nil {
			quoteID = quote.QuoteID
		} else {
			quote = nil
		}
		for attempt := 0; attempt < 3; attempt++ {
			if attempt > 0 {
				select {
				case <-ctx.Done():
				case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
				}
			}
			id, _, err = s.c.orderCreate(ctx, rider, tr.Pickup, tr.Dropoff, rider, quoteID)
			var ae *APIError
			if quoteID != "" && errors.As(err, &ae) && ae.Reason == "quote_expired" {
				quoteID = "" // waited past the quote's validity: priced at order time
				continue
			}
			if err == nil || !retryable(err) || ctx.Err() != nil {
				break
			}
		}
		answered := time.Now()
		s.post(func() {
			var ae *APIError
			if qerr != nil && !(errors.As(qerr, &ae) && ae.Status == http.StatusNotFound) {
				s.noteErr("fare-estimate", qerr) // a platform without fare-estimate (404) is not an error
			}
			if err != nil && sock != nil {
				s.closeRider(&ride{riderSock: sock})
			}
			switch {
			case err == nil:
				r := s.ride(id)
				if !r.requested {
					r.requested, r.requestedAt, r.createdWall = true, at, answered
					r.quote = quote
				}
				if r.riderSock == nil {
					r.riderSock = sock
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
		if d.offline || d.nextPing > t {
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
		// An ignored offer that is no longer in his answer has timed out (he neither accepted nor
		// declined it, and our riders never cancel).
		if ig := d.ignoring; ig != nil && (r.Offer == nil || r.Offer.OfferID != ig.offerID) {
			s.offerTimedOut(ig)
			d.ignoring = nil
		}
		if o := r.Offer; o != nil && o.OfferID != "" {
			s.offerArrived(d, *o, time.Now(), false)
		}
	}
}

// offerArrived handles offer o reaching d at wall time at, on his socket (viaPush) or in a ping
// answer, whichever comes first: he answers it once.
func (s *sim) offerArrived(d *driver, offer Offer, at time.Time, viaPush bool) {
	if viaPush {
		if d.pushed == nil {
			d.pushed = map[string]bool{}
		}
		d.pushed[offer.OfferID] = true
		if r := s.ride(offer.RideID); r.firstPushWall.IsZero() {
			r.firstPushWall = at
		}
		if d.offline {
			return
		}
	}
	if d.seen[offer.OfferID] {
		return
	}
	d.seen[offer.OfferID] = true
	s.offersTotal++
	if viaPush {
		s.offersByPush++
	} else {
		s.offersByPing++
		if d.sock != nil {
			// It should have come by push too, unless his socket was down when it was made (at most
			// one ping interval before this answer).
			made := at.Add(-time.Duration(float64(s.opts.PingInterval)/s.opts.Speedup) - time.Second)
			s.pingOffers = append(s.pingOffers, pingOffer{d: d, offerID: offer.OfferID, sock: d.sock,
				downs: d.sock.downs.Load(), expected: d.sock.connectedSince(made)})
		}
	}
	s.offerSeen(d, offer)
	// Every draw is made for every offer, so the streams do not depend on the outcome.
	think := 2*time.Second + time.Duration(d.rng.Float64()*float64(6*time.Second))
	accept := d.rng.Float64() < s.opts.AcceptProb
	if drawNoAnswer(d.fate, s.opts.NoAnswerProb) || d.offline {
		s.ignore(d, offer)
		return
	}
	s.schedule(s.now()+think, func() { s.decide(d, offer, accept) })
}

// offerSeen records that d saw offer o in a ping answer: the ride's distinct offered drivers, a
// re-opening (an offer created after the ride's latest accept, to another driver) and the timeout of
// offers of the same ride that other drivers ignored (one pending offer per ride: a later offer means
// the ignored one ended, and unanswered it could only time out).
func (s *sim) offerSeen(d *driver, o Offer) {
	r := s.ride(o.RideID)
	r.offered = true
	if r.offeredTo == nil {
		r.offeredTo = map[string]bool{}
	}
	r.offeredTo[d.id] = true
	exp := parseExpiry(o.ExpiresAt)
	if r.accepts > 0 && d.id != r.acceptedBy && laterOffer(exp, r.acceptedExp) {
		r.offeredAfterAccept = true
	}
	for _, ig := range r.ignored {
		if !ig.timedOut && ig.driverID != d.id && laterOffer(exp, ig.expiresAt) {
			s.offerTimedOut(ig)
		}
	}
}

// ignore records that d leaves offer o unanswered.
func (s *sim) ignore(d *driver, o Offer) {
	s.offersIgnored++
	ig := &ignoredOffer{offerID: o.OfferID, driverID: d.id, expiresAt: parseExpiry(o.ExpiresAt)}
	r := s.ride(o.RideID)
	r.ignored = append(r.ignored, ig)
	d.ignoring = ig
}

// offerTimedOut counts an ignored offer once it is seen to have timed out.
func (s *sim) offerTimedOut(ig *ignoredOffer) {
	if !ig.timedOut {
		ig.timedOut = true
		s.offerTimeouts++
	}
}

// dropOffline takes d offline for good: he stops pinging and answering. A driver carrying a passenger
// (start sent, or driving to the dropoff) finishes that ride first. A driver driving to a pickup
// abandons his ACCEPTED ride (the platform re-opens it after its heartbeat TTL); one whose accept is
// in flight abandons the ride if the accept succeeds (see decide).
func (s *sim) dropOffline(d *driver) {
	if d.offline {
		return
	}
	if d.state == stToDropoff || (d.state == stToPickup && d.leg == nil) {
		d.dropDue = true
		return
	}
	d.offline, d.dropDue = true, false
	s.driversOffline++
	if k := d.sock; k != nil {
		s.riderSockets.Add(1)
		go func() { defer s.riderSockets.Done(); k.stop() }()
	}
	if d.state == stToPickup {
		now := s.now()
		d.pos, d.leg = d.position(now), nil
		s.abandon(d, s.ride(d.rideID))
		d.state, d.rideID = stIdle, ""
	}
}

// abandon records that d, who dropped offline, leaves r (ACCEPTED by him) behind.
func (s *sim) abandon(d *driver, r *ride) {
	r.abandoned = true
	r.abandonments++
	r.abandonedBy = d.id
}

// rideEnded makes d available again after his ride ended (completed or given up), unless his drop
// offline was due meanwhile.
func (s *sim) rideEnded(d *driver) {
	d.state, d.rideID = stIdle, ""
	if d.dropDue {
		s.dropOffline(d)
	}
}

// decide accepts or declines offer for d after the think time; a driver who dropped offline
// meanwhile leaves it unanswered.
func (s *sim) decide(d *driver, o Offer, accept bool) {
	if d.offline {
		s.ignore(d, o)
		return
	}
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
	riderUp := s.ride(o.RideID).riderSock.connectedSince(time.Now())
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
			if r.abandonments > 0 && d.id != r.abandonedBy {
				r.rematchedAfterAbandon = true
			}
			r.accepted, r.accepts, r.acceptedAt, r.acceptedBy = true, r.accepts+1, t, d.id
			r.acceptExpectPush = r.acceptExpectPush || riderUp
			r.acceptedExp, r.pickupDistM, r.abandoned = parseExpiry(o.ExpiresAt), o.DistanceM, false
			if d.offline { // dropped while his accept was in flight: he never drives to it
				d.state = stIdle
				s.abandon(d, r)
				return
			}
			d.state, d.rideID, d.dropoff = stToPickup, o.RideID, o.Dropoff
			s.drive(d, t, o.Pickup, func() {
				if r := s.ride(d.rideID); r.acceptedBy == d.id {
					r.arrivedAt = s.now()
				}
				s.transition(d, "start", 0)
			})
		})
	})
}

// drive starts a straight-line leg of d from its position at t to dest and calls arrived on arrival.
func (s *sim) drive(d *driver, t time.Duration, dest LatLng, arrived func()) {
	leg := &Leg{From: d.position(t), To: dest, Start: t, SpeedMPS: s.opts.DriverSpeedMPS}
	d.leg = leg
	s.schedule(leg.End(), func() {
		if d.offline || d.leg != leg { // dropped offline on the way: the leg was abandoned
			return
		}
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
				s.rideEnded(d) // give up on the ride
				return
			}
			if action == "start" {
				d.state = stToDropoff
				s.drive(d, s.now(), d.dropoff, func() { s.transition(d, "complete", 0) })
				return
			}
			s.ride(rideID).completed = true
			s.rideEnded(d)
		})
	})
}

// progressCounts are the rides created so far and those whose latest accept stuck so far.
func (s *sim) progressCounts() progressCounts {
	var c progressCounts
	for _, r := range s.rides {
		if r.requested {
			c.rides++
			if r.matched() {
				c.matched++
			}
		}
	}
	return c
}

// requestedCount is how many rides this replay created.
func (s *sim) requestedCount() int {
	n := 0
	for _, r := range s.rides {
		if r.requested {
			n++
		}
	}
	return n
}

// summary assembles the figures; call it after fetchRides (when that ran) so the final statuses count.
func (s *sim) summary(tripsSent, skipped int, pingWall time.Duration) *Summary {
	o := s.opts
	sum := &Summary{
		RidesRejected: s.ridesRejected, RejectedExamples: nonNil(s.rejectedExamples),
		OffersTotal: s.offersTotal, Declines: s.declines, DeclineConflicts: s.declineConflicts,
		AcceptConflicts: s.acceptConflicts, AcceptConflictReasons: nonNilMap(s.conflictReasons),
		TransitionConflicts: s.transitionConf, RideStatusCounts: nonNilMap(s.statusCounts),
		RideFetchErrors: s.fetchErrs, FinalStatusKnown: s.fetched,
		OffersIgnored: s.offersIgnored, OfferTimeouts: s.offerTimeouts, DriversWentOffline: s.driversOffline,
		PingsTotal: s.pingsTotal.Load(), PingRequests: s.pingRequests.Load(), PingsSkipped: s.pingsSkipped.Load(),
		GPSRejected: s.gpsRejected.Load(), StaleRejected: s.staleRejected.Load(),
		HTTPErrors: nonNilMap(s.httpErrors), ErrorExamples: nonNil(s.errorExamples),
		TripsInWindow: len(s.trips), TripsSkippedRows: skipped,
		Drivers: o.Drivers, Speedup: o.Speedup, WindowMinutes: o.Minutes, PingIntervalS: o.PingInterval.Seconds(),
		AcceptProb: o.AcceptProb, NoAnswerProb: o.NoAnswerProb, OfflineProbPerHour: o.OfflineProbPerHour,
		DriverSpeedMPS: o.DriverSpeedMPS, DrainS: o.Drain.Seconds(), Seed: o.Seed,
		Concurrency: o.Concurrency, BatchSize: o.BatchSize, TripsPath: o.TripsPath, URL: o.URL, RunID: o.RunID,
		VerifyGraceS: o.VerifyGrace.Seconds(), VerifyExamples: map[string][]string{},
		WindowSkipMinutes: o.SkipMinutes,
		MatchMode:         o.MatchMode, DriverStarts: string(o.DriverStarts),
		DriverStartTripsBefore: s.starts.TripsBefore, DriverStartTripsFallback: s.starts.TripsFallback,
	}
	if pingWall > 0 {
		sum.PingsPerS = float64(sum.PingsTotal) / pingWall.Seconds()
	}
	var ttm, dist []float64
	for id, r := range s.rides {
		if !r.requested {
			continue
		}
		sum.RidesRequested++
		sum.RideIDs = append(sum.RideIDs, id)
		if r.offered {
			sum.RidesOffered++
		}
		if r.accepted {
			sum.RidesAccepted++
		}
		if r.matched() {
			sum.RidesMatched++
			ttm = append(ttm, max(0, (r.acceptedAt-r.requestedAt).Seconds()))
			dist = append(dist, r.pickupDistM)
		}
		if r.completed {
			sum.RidesCompleted++
		}
		reoffered, reopened := len(r.offeredTo) > 1, r.reopened()
		if reoffered {
			sum.RidesReoffered++
		}
		if reopened {
			sum.RidesReopened++
		}
		if reoffered || reopened {
			sum.Rematches++
		}
		if r.abandonments > 0 {
			sum.OfflineRidesAbandoned++
			if reopened {
				sum.OfflineRidesReopened++
			}
			if r.rematchedAfterOffline() {
				sum.OfflineRidesRematched++
			}
		}
		if r.final != nil {
			switch r.final.Status {
			case statusUnmatched:
				sum.RidesUnmatched++
			case statusRequested:
				sum.RidesNeverMatched++
			}
		}
	}
	if sum.RidesRequested > 0 {
		sum.MatchRate = float64(sum.RidesMatched) / float64(sum.RidesRequested)
	}
	sum.TimeToMatchCount = len(ttm)
	sum.TimeToMatchP50S, sum.TimeToMatchP95S, sum.TimeToMatchP99S = Percentile(ttm, 50), Percentile(ttm, 95), Percentile(ttm, 99)
	sum.PickupDistanceCount = len(dist)
	sum.PickupDistanceMeanM, sum.PickupDistanceP50M, sum.PickupDistanceP95M = Mean(dist), Percentile(dist, 50), Percentile(dist, 95)
	sum.OfferLatencyCount = len(s.offerLatMs)
	sum.OfferLatencyP50Ms, sum.OfferLatencyP99Ms = Percentile(s.offerLatMs, 50), Percentile(s.offerLatMs, 99)
	sum.Push, sum.PushConnectionsLeft = o.Push, -1
	if o.Push {
		var lat []float64
		for _, r := range s.rides {
			// As offer_latency: rides offered at their first match attempt (the final GET says), so
			// a ride that waited for a driver to come free does not count its wait as push latency.
			f := r.final
			first := f != nil && f.FirstOfferedAt != nil && f.FirstMatchAt != nil && f.FirstOfferedAt.Equal(*f.FirstMatchAt)
			if first && !r.createdWall.IsZero() && !r.firstPushWall.IsZero() {
				lat = append(lat, max(0, float64(r.firstPushWall.Sub(r.createdWall))/float64(time.Millisecond)))
			}
		}
		sum.OfferPushLatencyCount = len(lat)
		sum.OfferPushLatencyP50Ms, sum.OfferPushLatencyP99Ms = Percentile(lat, 50), Percentile(lat, 99)
		sum.OffersSeenByPush, sum.OffersSeenByPing = s.offersByPush, s.offersByPing
		if n := s.offersByPush + s.offersByPing; n > 0 {
			sum.OfferPushShare = float64(s.offersByPush) / float64(n)
		}
		sum.PushMessagesReceived, sum.DriverPositionsPushed = s.push.received.Load(), s.positionsPushed
		sum.PushReconnects, sum.PushDialFailures = s.push.reconnects.Load(), s.push.dialFailures.Load()
		sum.PushMessagesLost = s.lostOffers + s.lostStatuses
	}
	sum.MatchLatencyCount = len(s.matchLatMs)
	sum.MatchLatencyP50Ms, sum.MatchLatencyP99Ms = Percentile(s.matchLatMs, 50), Percentile(s.matchLatMs, 99)
	s.surgeSummary(sum)
	return sum
}

// surgeSummary fills the summary's surge and wait-estimate figures from the quotes the rides were
// ordered at. Minutes are simulated minutes since the window opened. The wait estimate is compared
// in simulated seconds: its match part (the platform's wall seconds) × Speedup, plus its drive part
// (seconds of driving, which the replay's drivers do in simulated time); what happened is request
// (fare-estimate) → the driver of the latest accept reaching the pickup, for rides accepted once
// that got there.
func (s *sim) surgeSummary(sum *Summary) {
	byMin := map[int]*SurgeMinute{}
	var charged, computed, errs, est, act []float64
	for _, r := range s.rides {
		q := r.quote
		if !r.requested || q == nil {
			continue
		}
		sum.SurgeQuotes++
		sum.SurgeMode = q.SurgeMode
		c := q.SurgeMultiplier
		if q.SurgeComputed != nil {
			c = *q.SurgeComputed
		}
		charged, computed = append(charged, q.SurgeMultiplier), append(computed, c)
		m := int(r.requestedAt / time.Minute)
		row := byMin[m]
		if row == nil {
			row = &SurgeMinute{Minute: m}
			byMin[m] = row
		}
		row.Quotes++
		row.charged, row.computed = append(row.charged, q.SurgeMultiplier), append(row.computed, c)
		if q.WaitMatchS != nil && q.WaitDriveS != nil && r.accepts == 1 && r.arrivedAt > 0 {
			e := *q.WaitMatchS*s.opts.Speedup + *q.WaitDriveS
			a := (r.arrivedAt - r.requestedAt).Seconds()
			est, act, errs = append(est, e), append(act, a), append(errs, math.Abs(e-a))
		}
	}
	sum.SurgeChargedP50, sum.SurgeChargedMax = Percentile(charged, 50), Percentile(charged, 100)
	sum.SurgeComputedP50, sum.SurgeComputedMax = Percentile(computed, 50), Percentile(computed, 100)
	sum.SurgeByMinute = make([]SurgeMinute, 0, len(byMin))
	for _, row := range byMin {
		row.ChargedP50, row.ChargedMax = Percentile(row.charged, 50), Percentile(row.charged, 100)
		row.ComputedP50, row.ComputedMax = Percentile(row.computed, 50), Percentile(row.computed, 100)
		row.charged, row.computed = nil, nil
		sum.SurgeByMinute = append(sum.SurgeByMinute, *row)
	}
	sort.Slice(sum.SurgeByMinute, func(i, j int) bool { return sum.SurgeByMinute[i].Minute < sum.SurgeByMinute[j].Minute })
	sum.WaitEstimateCount = len(errs)
	sum.WaitEstimateMAES, sum.WaitEstimateMeanS, sum.WaitActualMeanS = Mean(errs), Mean(est), Mean(act)
}

// fetchRides reads every requested ride with bounded concurrency (GET /function/ride/{id}) and keeps
// each answer as the ride's final view: its status, driver and accepted_at feed the matched,
// re-opened, UNMATCHED and still-REQUESTED figures; first_offered_at − created_at (wall ms) of rides
// offered at their first match attempt the offer latency; first_match_at − created_at the match latency. It runs on the scheduler goroutine after the workers stopped.
func (s *sim) fetchRides(ctx context.Context) {
	ids := make([]string, 0, len(s.rides))
	for id, r := range s.rides {
		if r.requested {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	var (
		views = make([]*RideView, len(ids))
		mu    sync.Mutex
		wg    sync.WaitGroup
		idx   atomic.Int64
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
				if err == nil {
					views[i] = rv
					continue
				}
				if ctx.Err() != nil {
					return
				}
				mu.Lock()
				s.fetchErrs++
				if len(s.errorExamples) < maxExamples {
					s.errorExamples = append(s.errorExamples, "ride "+ids[i]+": "+err.Error())
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	s.fetched = ctx.Err() == nil
	s.statusCounts = map[string]int{}
	for i, rv := range views {
		if rv == nil {
			continue
		}
		s.rides[ids[i]].final = rv
		s.statusCounts[rv.Status]++
		if rv.CreatedAt == nil {
			continue
		}
		if rv.FirstMatchAt != nil {
			s.matchLatMs = append(s.matchLatMs, float64(rv.FirstMatchAt.Sub(*rv.CreatedAt))/float64(time.Millisecond))
		}
		// Only rides offered at their first attempt: a ride that waited for a driver to come free
		// measures the fleet's supply, not the dispatch pipeline (that is time_to_match).
		if rv.FirstOfferedAt != nil && rv.FirstMatchAt != nil && rv.FirstOfferedAt.Equal(*rv.FirstMatchAt) {
			s.offerLatMs = append(s.offerLatMs, float64(rv.FirstOfferedAt.Sub(*rv.CreatedAt))/float64(time.Millisecond))
		}
	}
}

func nonNilMap(m map[string]int) map[string]int {
	if m == nil {
		return map[string]int{}
	}
	return m
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
