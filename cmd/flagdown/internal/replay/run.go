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
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"
)

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
		return nil, fmt.Errorf("no token secret: give the replay the platform's FLAGDOWN_JWT_SECRET (make dev writes it to .local/dev.env; flagdown dev alone writes the one it generated to the 0600 file its log names) to mint its drivers' and riders' tokens")
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
	if step, allowed, wallS := gpsJumpCheck(opts); step > allowed {
		fmt.Fprintf(out, "warning: a moving driver covers %.0f m between pings (%.2f s wall apart) but the platform's default gps_jump rule "+
			"allows only %.0f m (FLAGDOWN_MAX_SPEED_MPS %d × dt + %d m noise): lower --speedup or --driver-speed-mps\n",
			step, wallS, allowed, PlatformDefaultMaxSpeedMPS, PlatformGPSNoiseM)
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

	s.scheduleSupplyDrop(window)
	if opts.DriversDropTo > 0 {
		fmt.Fprintf(out, "supply drop: %d of %d drivers end their shift %g min into the window\n",
			opts.Drivers-opts.DriversDropTo, opts.Drivers, opts.DriversDropAt*opts.Minutes)
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
			s.simEnded = t
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
		s.watchSilence(time.Now())
		if prog != nil {
			prog.update(time.Now(), t+warmup, s.progressCounts)
		}
	}
	tick.Stop()
	pingWall := time.Since(wallStart)
	s.pingsEnded = time.Now()
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
	sum.ActionRetries, sum.ActionsUnanswered = s.actionRetries, s.actionsPending
	for _, d := range s.drivers {
		if d.rideID != "" {
			sum.RidesInHand = append(sum.RidesInHand, d.rideID)
		}
	}
	for id := range s.pendingRides {
		sum.RidesInHand = append(sum.RidesInHand, id)
	}
	sum.ridesAbandoned = s.ridesAbandoned()
	var truthErr error
	if !interrupted && opts.GroundTruth {
		if truthErr = s.groundTruthInto(ctx, sum); ctx.Err() != nil {
			interrupted, truthErr = true, nil
		} else if truthErr == nil {
			if f := sum.GroundTruth.Failures(); len(f) > 0 {
				truthErr = fmt.Errorf("ground truth: %s", strings.Join(f, ", "))
			}
		}
	}
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
	if err := invariantsError(sum); err != nil {
		return sum, err
	}
	return sum, truthErr
}
