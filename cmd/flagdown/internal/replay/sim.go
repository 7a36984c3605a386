package replay

import (
	"container/heap"
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// event is a closure scheduled at simulated time at; seq breaks ties in insertion order.
type event struct {
	at  time.Duration
	seq int
	fn  func()
}

// eventHeap is the scheduler's queue of events, earliest first.
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
	// pingsEnded is when the replay stopped sending pings (wall; zero while it sends them).
	pingsEnded time.Time
	// simEnded is the simulated time the replay stopped driving (0 while it drives): a ride whose
	// driver had not reached the pickup by then has waited at least simEnded − its request.
	simEnded time.Duration
	trips    []Trip
	t0       time.Time // first pickup (real)
	starts   StartPool // where the drivers' start positions were drawn from

	drivers []*driver
	rides   map[string]*ride
	events  eventHeap
	seq     int
	jobs    chan func(context.Context)
	closed  bool // jobs is closed: nothing more is sent

	inboxMu sync.Mutex
	inbox   []func()

	pingsTotal, pingsSent, pingRequests, pingsSkipped, gpsRejected, staleRejected atomic.Int64
	rule                                                                          sendRuleState

	push            pushStats
	dialSem         chan struct{}
	pingOffers      []pingOffer
	offersByPush    int
	offersByPing    int
	positionsPushed int
	riderSockets    sync.WaitGroup
	lostOffers      int
	lostStatuses    int
	lostExamples    []string
	lateOffers      int

	offersIgnored  int
	offerTimeouts  int
	driversOffline int
	// supplyDropped is how many drivers the supply drop took offline (Options.DriversDropTo).
	supplyDropped int
	fetched       bool // the end-of-run GET of every ride ran
	fetchErrs     int
	offerLatMs    []float64
	matchLatMs    []float64
	statusCounts  map[string]int

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

	// acks are the 2xx answers to accept/start/complete (ground truth); actionsPending the actions
	// sent and not finally answered yet; actionRetries the attempts untilAnswered repeated.
	acks           []ack
	actionsPending int
	// pendingRides counts, per ride, the actions on it without a final answer yet.
	pendingRides  map[string]int
	actionRetries int
	// silentSpans are the spans in which the replay itself left most of its pinging drivers
	// without an answered ping for half a heartbeat TTL (watchSilence); silentChecked when it
	// last looked.
	silentSpans   []Outage
	silentChecked time.Time
}

// maxExamples caps each list of example errors the summary keeps.
const maxExamples = 5

// now is the simulated time since the first pickup: wall time since origin × Speedup.
func (s *sim) now() time.Duration {
	return time.Duration(float64(time.Since(s.origin)) * s.opts.Speedup)
}

// post hands fn to the scheduler goroutine, which runs it at its next drainInbox (workers call it).
func (s *sim) post(fn func()) {
	s.inboxMu.Lock()
	s.inbox = append(s.inbox, fn)
	s.inboxMu.Unlock()
}

// drainInbox runs every posted closure, including those posted while it runs.
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

// schedule queues fn to run on the scheduler goroutine at simulated time at.
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

// ride is the record of ride id, created on first use.
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

// isConflict returns the API error of err when the platform answered 409.
func isConflict(err error) (*APIError, bool) {
	var ae *APIError
	if errors.As(err, &ae) && ae.Status == http.StatusConflict {
		return ae, true
	}
	return nil, false
}

// finalRetryable reports whether err is not a final answer to a driver action: a transport error,
// a 429 (rate limited) or a 5xx answer.
func finalRetryable(err error) bool {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Status >= 500 || ae.Status == http.StatusTooManyRequests
	}
	return true
}

// retryable reports whether err is worth retrying: a transport error or a 5xx answer.
func retryable(err error) bool {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Status >= 500
	}
	return true // transport error
}
