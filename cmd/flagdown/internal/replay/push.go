package replay

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/flagdown/flagdown/shared/auth"
)

// Push message types the replay reacts to (shared/push.MessageType; the replay reads the wire
// format as a phone does, through the gateway only).
const (
	pushOffer          = "offer"
	pushOfferExpired   = "offer.expired"
	pushOfferWithdrawn = "offer.withdrawn"
	pushRideStatus     = "ride.status"
	pushPosition       = "driver.position"
)

// pushMsg is one message received on a socket, as a phone decodes it.
type pushMsg struct {
	ID   string          `json:"id"`
	Type string          `json:"type"`
	Data json.RawMessage `json:"data"`
}

// Reconnect back-off of a phone whose socket dropped (full jitter: a random wait in
// [0, min(ReconnectMaxWait, ReconnectBaseWait × 2^attempt)), so that a gateway restart closing
// every socket at once is followed by reconnects spread over seconds, not a storm).
const (
	// ReconnectBaseWait is the back-off of the first reconnect attempt.
	ReconnectBaseWait = 200 * time.Millisecond
	// ReconnectMaxWait caps the back-off.
	ReconnectMaxWait = 10 * time.Second
)

// ReconnectDelay is the wait before reconnect attempt n (0-based) with full jitter drawn from rng.
func ReconnectDelay(n int, rng *rand.Rand) time.Duration {
	ceil := ReconnectMaxWait
	if n < 20 {
		ceil = min(ReconnectMaxWait, ReconnectBaseWait<<n)
	}
	return time.Duration(rng.Int64N(int64(ceil) + 1))
}

// socket is one simulated phone's WebSocket connection to the platform's gateway (GET /ws), kept
// open (reconnecting with ReconnectDelay) until stop. Every message is handed to onMsg with the wall
// time it arrived, from the socket's goroutine.
type socket struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	conn   *websocket.Conn
	// up is true while connected; downs counts disconnections (reconnect attempts follow each).
	up    atomic.Bool
	downs atomic.Int64
	since atomic.Int64 // unix nanoseconds of the current connection's start
	ready chan struct{}
	// stopping is set by stop before it closes the socket: the close that follows is not a drop.
	stopping atomic.Bool
}

// maxParallelDials bounds the socket handshakes in flight at once (each runs the platform's
// connect integration).
const maxParallelDials = 32

// pushSettle bounds how long the replay waits after its last request for pushes still on their
// way before it counts what was lost: it stops waiting as soon as nothing is missing. A push whose
// first delivery failed arrives on a redelivery (broker.DefaultBackOff: 0.2 + 0.5 + 1 s, then
// more), and a loaded host adds its own delays.
const pushSettle = 30 * time.Second

// closeSockets waits (at most pushSettle) until every push the replay expects has arrived, counts
// what was lost, then closes every socket (drivers' and riders') and waits for them.
func (s *sim) closeSockets() {
	for deadline := time.Now().Add(pushSettle); ; time.Sleep(250 * time.Millisecond) {
		s.drainInbox()
		s.lostOffers, s.lostStatuses, s.lateOffers, s.lostExamples = s.pushOutcome()
		if s.lostOffers+s.lostStatuses == 0 || time.Now().After(deadline) {
			break
		}
	}
	var wg sync.WaitGroup
	for _, d := range s.drivers {
		if k := d.sock; k != nil && !d.offline {
			wg.Add(1)
			go func() { defer wg.Done(); k.stop() }()
		}
	}
	for _, r := range s.rides {
		s.closeRider(r)
	}
	wg.Wait()
	s.riderSockets.Wait()
	s.drainInbox()
}

// pushStats are the counters every socket of a replay shares.
type pushStats struct {
	reconnects, dialFailures, received atomic.Int64
}

// wsURL is the gateway's WebSocket endpoint of base (http://host:port → ws://host:port/ws).
func wsURL(base string) string {
	if strings.HasPrefix(base, "https://") {
		return "wss://" + strings.TrimPrefix(base, "https://") + "/ws"
	}
	return "ws://" + strings.TrimPrefix(base, "http://") + "/ws"
}

// openSocket starts the socket of role/sub. The first connection's outcome closes ready (connected,
// or given up when ctx ends).
func (s *sim) openSocket(role auth.Role, sub string, seed uint64, onMsg func(pushMsg, time.Time)) *socket {
	ctx, cancel := context.WithCancel(s.ctx)
	k := &socket{cancel: cancel, done: make(chan struct{}), ready: make(chan struct{})}
	hdr := http.Header{}
	for h, v := range s.c.tokens.header(role, sub) {
		hdr.Set(h, v)
	}
	url := wsURL(s.opts.URL)
	rng := rand.New(rand.NewPCG(s.opts.Seed, seed))
	go func() {
		defer close(k.done)
		readyOnce := sync.OnceFunc(func() { close(k.ready) })
		defer readyOnce()
		for attempt := 0; ctx.Err() == nil; {
			select {
			case s.dialSem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
			c, _, err := websocket.Dial(dctx, url, &websocket.DialOptions{HTTPHeader: hdr, HTTPClient: s.c.http})
			dcancel()
			<-s.dialSem
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				s.push.dialFailures.Add(1)
				attempt++
				select {
				case <-ctx.Done():
					return
				case <-time.After(ReconnectDelay(attempt, rng)):
				}
				continue
			}
			c.SetReadLimit(128 << 10)
			k.mu.Lock()
			k.conn = c
			k.mu.Unlock()
			k.since.Store(time.Now().UnixNano())
			k.up.Store(true)
			readyOnce()
			// After every connect: ask for the current state (what was pushed while the socket was down).
			_ = c.Write(ctx, websocket.MessageText, []byte(`{"action":"sync"}`))
			attempt = 0
			for {
				_, b, err := c.Read(ctx)
				if err != nil {
					break
				}
				at := time.Now()
				s.push.received.Add(1)
				var m pushMsg
				if json.Unmarshal(b, &m) == nil {
					onMsg(m, at)
				}
			}
			k.up.Store(false)
			_ = c.CloseNow()
			if ctx.Err() != nil || k.stopping.Load() {
				return
			}
			k.downs.Add(1)
			s.push.reconnects.Add(1)
			attempt++
			select {
			case <-ctx.Done():
				return
			case <-time.After(ReconnectDelay(attempt, rng)):
			}
		}
	}()
	return k
}

// connectedSince reports whether the socket has been up without a break since before t.
func (k *socket) connectedSince(t time.Time) bool {
	return k != nil && k.up.Load() && time.Unix(0, k.since.Load()).Before(t)
}

// stop closes the socket (a normal closure, so the gateway runs $disconnect) and waits for its
// goroutine.
func (k *socket) stop() {
	if k == nil {
		return
	}
	k.stopping.Store(true)
	k.mu.Lock()
	c := k.conn
	k.mu.Unlock()
	if c != nil {
		_ = c.Close(websocket.StatusNormalClosure, "replay done")
	}
	k.cancel()
	<-k.done
}

// driverSocket opens d's socket: offers pushed to him are handled like offers seen in a ping
// answer, whichever comes first.
func (s *sim) driverSocket(d *driver, i int) {
	d.sock = s.openSocket(auth.RoleDriver, d.id, uint64(i)+1<<32, func(m pushMsg, at time.Time) {
		var o Offer
		if json.Unmarshal(m.Data, &o) != nil || o.OfferID == "" {
			return
		}
		switch m.Type {
		case pushOffer:
			s.post(func() { s.offerArrived(d, o, at, true) })
		case pushOfferExpired, pushOfferWithdrawn:
			s.post(func() {
				if d.ended == nil {
					d.ended = map[string]bool{}
				}
				d.ended[o.OfferID] = true
			})
		}
	})
}

// riderSocket opens the socket of the rider of a trip, before his order-create; statuses pushed
// to him are recorded on his ride.
func (s *sim) riderSocket(rider string, row int) *socket {
	return s.openSocket(auth.RoleRider, rider, uint64(row)+2<<32, func(m pushMsg, at time.Time) {
		var d struct {
			RideID string `json:"ride_id"`
			Status string `json:"status"`
		}
		if json.Unmarshal(m.Data, &d) != nil || d.RideID == "" {
			return
		}
		s.post(func() {
			r := s.ride(d.RideID)
			switch m.Type {
			case pushRideStatus:
				r.pushedStatus = append(r.pushedStatus, d.Status)
				if d.Status == "COMPLETED" || d.Status == "UNMATCHED" || d.Status == "CANCELLED" {
					s.closeRider(r)
				}
			case pushPosition:
				s.positionsPushed++
			}
		})
	})
}

// closeRider closes the socket of r's rider once his ride is over (in the background: the scheduler
// never waits on a socket).
func (s *sim) closeRider(r *ride) {
	if k := r.riderSock; k != nil {
		r.riderSock = nil
		s.riderSockets.Add(1)
		go func() { defer s.riderSockets.Done(); k.stop() }()
	}
}

// pushOutcome checks, at the end of a run, what should have come by push and did not: an offer
// seen in a ping answer by a driver whose socket was up since well before the offer was made and
// stayed up, he left it unanswered, and neither it nor its end arrived on it; an accept whose rider's socket was up since
// before it and who never got the ACCEPTED status (or, when the socket dropped after the accept, no
// status at all: the sync after reconnect says the current one, which may be later). examples names the first few
// lost messages (kind, ids and the socket's history), for the error. An offer whose end came but
// not the offer itself was reached by the platform after its window closed (notify pushes no dead
// offer): late, not lost. So is one he answered from his ping answer and never got by push: its
// window may have closed before the platform reached it, and no end follows an answered offer, so
// nothing tells lost from late; a push path that loses offers loses unanswered ones too.
func (s *sim) pushOutcome() (lostOffers, lostStatuses, late int, examples []string) {
	note := func(format string, a ...any) {
		if len(examples) < maxLostExamples {
			examples = append(examples, fmt.Sprintf(format, a...))
		}
	}
	for _, po := range s.pingOffers {
		// A driver who dropped offline closed his socket: what came after is not lost, it had
		// nowhere to go.
		if po.expected && !po.d.offline && po.sock.downs.Load() == po.downs && !po.d.pushed[po.offerID] {
			if po.d.ended[po.offerID] || po.d.answered[po.offerID] {
				late++
				continue
			}
			lostOffers++
			note("offer %s to driver %s (seen in a ping answer at %s, socket up since %s, %d drops)",
				po.offerID, po.d.id, po.seenAt.Format(time.RFC3339Nano),
				time.Unix(0, po.sock.since.Load()).Format(time.RFC3339Nano), po.sock.downs.Load())
		}
	}
	for id, r := range s.rides {
		if !r.acceptExpectPush {
			continue
		}
		dropped := r.riderSockAtAccept != nil && r.riderSockAtAccept.downs.Load() != r.riderDownsAtAccept
		got := false
		for _, st := range r.pushedStatus {
			if st == "ACCEPTED" || dropped {
				got = true
			}
		}
		if !got {
			lostStatuses++
			note("ACCEPTED of ride %s (accept sent at %s; statuses pushed %v)",
				id, r.acceptSentWall.Format(time.RFC3339Nano), r.pushedStatus)
		}
	}
	return lostOffers, lostStatuses, late, examples
}

// maxLostExamples bounds the lost pushes a summary names.
const maxLostExamples = 5

// pingOffer is an offer a driver saw first in a ping answer.
type pingOffer struct {
	d        *driver
	offerID  string
	sock     *socket
	downs    int64
	expected bool      // his socket was up since well before the offer was made
	seenAt   time.Time // wall time of the ping answer that carried it
}
