package replay

import (
	"context"
	"math/rand/v2"
	"time"
)

// driverState is where a simulated driver is in his ride cycle.
type driverState int

const (
	stIdle      driverState = iota
	stAccepting             // accept call in flight
	stToPickup              // driving to the pickup (or start call in flight)
	stToDropoff             // driving to the dropoff (or complete call in flight)
)

// driver is one simulated driver: his position, ride state, random streams and push socket. It is
// owned by the scheduler goroutine.
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
	// signsOff: his drop is the supply drop (Options.DriversDropTo): he ends his shift with an
	// offline ping instead of falling silent, and counts as dropped by supply, not as gone offline.
	signsOff bool
	// ignoring is the offer he is ignoring until it vanishes from his ping answers (nil when none).
	ignoring *ignoredOffer
	// sock is his phone's WebSocket (Options.Push); pushed the offer ids that came on it, ended
	// those whose end (offer.expired, offer.withdrawn) came on it.
	sock   *socket
	pushed map[string]bool
	ended  map[string]bool
	// answered holds the offer ids he accepted or declined.
	answered map[string]bool
	// stoppedWall is when he stopped pinging for good (wall; zero while he pings), lastPingOK
	// when his last answered ping came back (wall; prevPingOK the one before), seenOffline when a ping answer first said he
	// was offline although his ping did not ask for it (wall; zero: never): the ground truth
	// (truth.go).
	stoppedWall, lastPingOK, prevPingOK, seenOffline time.Time
}

// position is where d is at simulated time t: on his leg when driving, else where he stopped.
func (d *driver) position(t time.Duration) LatLng {
	if d.leg != nil {
		return d.leg.At(t)
	}
	return d.pos
}

// pingDue sends the pings due at simulated time t, BatchSize per call. With the send rule
// (sendrule.go) a stationary or carrying driver's due ping may be held back (counted as saved), and
// a driver whose ride phase changed since his last sent ping sends at once, off his interval.
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
		s.pingsSent.Add(int64(len(pings)))
		s.submit(func(ctx context.Context) {
			res, err := s.c.locationUpdate(ctx, pings, s.opts.BatchSize > 1)
			s.pingRequests.Add(1)
			at := time.Now()
			s.post(func() { s.pingResults(ds, pings, res, err, at) })
		})
	}
	for _, d := range s.drivers {
		if d.offline {
			continue
		}
		due := d.nextPing <= t
		if !due && !s.phaseChanged(d) {
			continue
		}
		if due {
			d.nextPing += s.opts.PingInterval
			if d.nextPing <= t { // fell behind: do not burst, keep the phase
				d.nextPing += (t - d.nextPing) / s.opts.PingInterval * s.opts.PingInterval
				d.nextPing += s.opts.PingInterval
			}
		}
		p := d.position(t)
		asksStatus := !d.online && d.state == stIdle
		if due && !asksStatus && s.ruleHolds(d, t, p) {
			s.rule.saved.Add(1)
			continue
		}
		if d.inFlight {
			if due {
				s.pingsSkipped.Add(1)
			}
			continue // a phase change waits for the answer and goes at the next tick
		}
		d.inFlight = true
		s.sent(d, t, p)
		ping := Ping{DriverID: d.id, Lat: p.Lat, Lng: p.Lng, TS: wall}
		if d.leg != nil && d.leg.End() > t {
			h := d.leg.Heading()
			ping.Heading, ping.SpeedMPS = &h, min(s.opts.DriverSpeedMPS, maxSentSpeedMPS)
		}
		if asksStatus {
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

// pingResults applies the answers of one location-update call (arrived at wall time at) to the
// drivers whose pings it carried.
func (s *sim) pingResults(ds []*driver, pings []Ping, res []PingResult, err error, at time.Time) {
	for i, d := range ds {
		d.inFlight = false
		if i >= len(res) { // no answer for his ping: the send rule sends his next one
			s.undelivered(d)
		}
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
		d.prevPingOK, d.lastPingOK = d.lastPingOK, at
		if r.Status == "offline" && i < len(pings) && pings[i].Status == "" && d.seenOffline.IsZero() && !d.offline {
			d.seenOffline = at // he believed he was online: the platform took him offline
		}
		switch r.Rejected {
		case "gps_jump":
			s.gpsRejected.Add(1)
		case "stale":
			s.staleRejected.Add(1)
		case "rate_limited": // not applied, heartbeat not refreshed: the send rule sends the next one
			s.undelivered(d)
		}
		if r.Status != "" {
			// "unknown": the platform lost his state; his next ping says he is available again.
			d.online = r.Status != "offline" && r.Status != "unknown"
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
			// It should have come by push too, unless his socket was down when it was made: at most
			// one ping interval before this answer, or, after a longer quiet stretch (the send
			// rule), since his previous answered ping.
			made := at.Add(-time.Duration(float64(s.opts.PingInterval) / s.opts.Speedup))
			if !d.prevPingOK.IsZero() && d.prevPingOK.Before(made) {
				made = d.prevPingOK
			}
			made = made.Add(-time.Second)
			s.pingOffers = append(s.pingOffers, pingOffer{d: d, offerID: offer.OfferID, sock: d.sock,
				downs: d.sock.downs.Load(), expected: d.sock.connectedSince(made), seenAt: at})
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
	d.stoppedWall = time.Now()
	if d.signsOff {
		s.signOff(d)
	} else {
		s.driversOffline++
	}
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

// ridesAbandoned maps each ride whose latest accept was abandoned, and not accepted since, to the
// driver who abandoned it (Summary.ridesAbandoned).
func (s *sim) ridesAbandoned() map[string]string {
	out := map[string]string{}
	for id, r := range s.rides {
		if r.abandoned && r.abandonedBy != "" {
			out[id] = r.abandonedBy
		}
	}
	return out
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
	if d.answered == nil {
		d.answered = map[string]bool{}
	}
	d.answered[o.OfferID] = true
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
	sentWall := time.Now()
	riderSock := s.ride(o.RideID).riderSock
	riderUp := riderSock.connectedSince(sentWall)
	var riderDowns int64
	if riderUp {
		riderDowns = riderSock.downs.Load()
	}
	s.untilAnswered("accept", o.RideID, func(ctx context.Context) error { return s.c.accept(ctx, o.RideID, d.id) }, func(err error) {
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
		s.acks = append(s.acks, ack{action: "accept", rideID: o.RideID, driverID: d.id, at: time.Now()})
		t := s.now()
		r := s.ride(o.RideID)
		if r.abandonments > 0 && d.id != r.abandonedBy {
			r.rematchedAfterAbandon = true
		}
		r.accepted, r.accepts, r.acceptedAt, r.acceptedBy = true, r.accepts+1, t, d.id
		if riderUp {
			r.acceptExpectPush, r.acceptSentWall = true, sentWall
			r.riderSockAtAccept, r.riderDownsAtAccept = riderSock, riderDowns
		}
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
			s.transition(d, "start")
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

// transition posts start or complete for d's ride until it gets a final answer (untilAnswered).
func (s *sim) transition(d *driver, action string) {
	rideID := d.rideID
	s.untilAnswered(action, rideID, func(ctx context.Context) error { return s.c.rideAction(ctx, rideID, action, d.id) }, func(err error) {
		if err != nil {
			if _, ok := isConflict(err); ok {
				s.transitionConf++
			} else {
				s.noteErr(action, err)
			}
			s.rideEnded(d) // give up on the ride
			return
		}
		s.acks = append(s.acks, ack{action: action, rideID: rideID, driverID: d.id, at: time.Now()})
		if action == "start" {
			d.state = stToDropoff
			s.drive(d, s.now(), d.dropoff, func() { s.transition(d, "complete") })
			return
		}
		s.ride(rideID).completed = true
		s.rideEnded(d)
	})
}

// Back-off of untilAnswered between two attempts, wall time: retryFirst, doubling up to retryMax.
const (
	retryFirst = 250 * time.Millisecond
	retryMax   = 4 * time.Second
)

// untilAnswered sends call (a driver action on rideID: accept, start, complete) until it gets a
// final answer (2xx, or a 4xx other than 429) and then runs done with its error on the scheduler
// goroutine. A transport error, a 429 or a 5xx is counted (noteErr) and retried after a back-off
// (retryFirst doubling to retryMax, wall time): an accept whose answer was lost is answered by the
// retry (the platform's accept, start and complete are idempotent for the same driver). Calls
// still without a final answer when the replay ends count as Summary.ActionsUnanswered, done is
// not run for them, and their rides are among Summary.RidesInHand: the platform may have acted on
// one, and the driver's app would have kept asking.
func (s *sim) untilAnswered(name, rideID string, call func(context.Context) error, done func(error)) {
	s.actionsPending++
	if s.pendingRides == nil {
		s.pendingRides = map[string]int{}
	}
	s.pendingRides[rideID]++
	var attempt func(n int)
	attempt = func(n int) {
		s.submit(func(ctx context.Context) {
			err := call(ctx)
			s.post(func() {
				if err != nil && finalRetryable(err) {
					if s.ctx.Err() != nil || s.closed {
						return // no final answer before the end: still pending
					}
					s.noteErr(name, err)
					s.actionRetries++
					wait := min(retryFirst<<min(n, 8), retryMax)
					s.schedule(s.now()+time.Duration(float64(wait)*s.opts.Speedup), func() { attempt(n + 1) })
					return
				}
				s.actionsPending--
				if s.pendingRides[rideID]--; s.pendingRides[rideID] == 0 {
					delete(s.pendingRides, rideID)
				}
				done(err)
			})
		})
	}
	attempt(0)
}
