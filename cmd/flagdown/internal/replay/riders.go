package replay

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// ride is what the replay saw of one ride, from its order-create to its end-of-run GET. It is owned
// by the scheduler goroutine.
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
	// acceptSentWall is when the latest accept that expected a push was sent (wall);
	// riderSockAtAccept the rider's socket then and riderDownsAtAccept its drops so far.
	acceptSentWall     time.Time
	riderSockAtAccept  *socket
	riderDownsAtAccept int64
	final              *RideView // end-of-run GET /function/ride/{id}; nil when not fetched
	// quote is the fare-estimate answer the ride was ordered at (nil when none); arrivedAt when its
	// driver reached the pickup (simulated, of the latest accept; 0 when none did).
	quote     *FareQuote
	arrivedAt time.Duration
	// pickup is where the rider waits (the trip's pickup).
	pickup LatLng
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

// riderSocketWait is the longest a rider's app waits for its push socket before it orders (wall
// time): a socket that cannot connect (the platform or Redis away) delays the order by at most this
// long, never holds it, and the app learns what it missed with the sync after its socket connects.
const riderSocketWait = 2 * time.Second

// orderCreate sends the trip's order; retried (same Idempotency-Key) on transport errors and 5xx.
func (s *sim) orderCreate(tr Trip) {
	rider := fmt.Sprintf("replay-%d-%s-%d", s.opts.Seed, s.opts.RunID, tr.Row)
	s.submit(func(ctx context.Context) {
		var sock *socket
		if s.opts.Push {
			sock = s.riderSocket(rider, tr.Row)
			select {
			case <-sock.ready:
			case <-time.After(riderSocketWait):
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
					r.quote, r.pickup = quote, tr.Pickup
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
