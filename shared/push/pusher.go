package push

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/metrics"
)

// gateway is what the Pusher needs of the management API (*Management).
type gateway interface {
	PostToConnection(ctx context.Context, connectionID string, data []byte) error
	DeleteConnection(ctx context.Context, connectionID string) error
}

// Mobile is mobile push to a user's registered devices, the fallback for users with no live
// connection (implemented by *SNS).
type Mobile interface {
	// Enabled reports whether mobile push is configured.
	Enabled() bool
	// PublishToUser publishes msg to every enabled device of the user, kept for ttl at most, and
	// returns how many devices it was published to.
	PublishToUser(ctx context.Context, role auth.Role, userID string, msg []byte, ttl time.Duration) (int, error)
}

// Pusher sends messages to users' live connections through the gateway's management API, drops
// connections the gateway says are gone, and falls back to mobile push where asked. Build it once
// per process (shared/app: Deps.Push); it is safe for concurrent use.
type Pusher struct {
	// Registry is the connection registry the Pusher reads and prunes.
	Registry *Registry
	gw       gateway
	mobile   Mobile
	log      *slog.Logger
	// laneGW is the position lane's management client: gw's endpoint and credentials with keep-alive
	// connections of its own and one attempt per post (PositionsAsync).
	laneGW   gateway
	laneOnce sync.Once
	lane     chan queuedPosition
}

// NewPusher returns a Pusher over reg that posts through gw (nil: push is off, every Send delivers
// nothing) and falls back to mob (nil or not Enabled: no fallback).
func NewPusher(reg *Registry, gw *Management, mob Mobile, log *slog.Logger) *Pusher {
	p := &Pusher{Registry: reg, log: log}
	if gw != nil {
		p.gw = gw
		p.laneGW = gw.Derive(HTTPClient(), 1)
	}
	if mob != nil && mob.Enabled() {
		p.mobile = mob
	}
	if p.log == nil {
		p.log = slog.Default()
	}
	return p
}

// Enabled reports whether messages can reach live connections (FLAGDOWN_PUSH_ENDPOINT is set).
func (p *Pusher) Enabled() bool { return p != nil && p.gw != nil }

// MobileEnabled reports whether the mobile fallback is on (SNS configured).
func (p *Pusher) MobileEnabled() bool { return p != nil && p.mobile != nil }

// Delivery counts where one message went.
type Delivery struct {
	// Sockets is the number of live connections that took the message.
	Sockets int
	// Gone is the number of connections the gateway said were gone (removed from the registry).
	Gone int
	// Mobile is the number of device endpoints the mobile fallback published to.
	Mobile int
}

// Send pushes m to every live connection of u. A connection the gateway answers 410 GoneException
// for is removed at once; an oversized message (413) is not retried. It returns an error only when
// a connection could not be reached for a reason that may pass (429 or 5xx after the management
// client's retries, Redis down): the caller may try again, and clients drop repeats by message id.
func (p *Pusher) Send(ctx context.Context, u User, m Message) (Delivery, error) {
	var d Delivery
	if !p.Enabled() {
		return d, nil
	}
	conns, err := p.Registry.Connections(ctx, u)
	if err != nil || len(conns) == 0 {
		return d, err
	}
	body, err := m.Encode()
	if err != nil {
		return d, err
	}
	var firstErr error
	for _, c := range conns {
		switch err := p.post(ctx, u, c, body); {
		case err == nil:
			d.Sockets++
		case IsGone(err):
			d.Gone++
		case firstErr == nil && !IsPayloadTooLarge(err):
			firstErr = err
		}
	}
	return d, firstErr
}

// SendTo pushes m to connection connID of u only (the answer to that connection's sync).
func (p *Pusher) SendTo(ctx context.Context, u User, connID string, m Message) error {
	if !p.Enabled() {
		return nil
	}
	body, err := m.Encode()
	if err != nil {
		return err
	}
	return p.post(ctx, u, connID, body)
}

func (p *Pusher) post(ctx context.Context, u User, connID string, body []byte) error {
	return p.postVia(ctx, p.gw, u, connID, body)
}

// postVia posts body to connection connID of u through gw, counts the result and drops a
// connection the gateway says is gone.
func (p *Pusher) postVia(ctx context.Context, gw gateway, u User, connID string, body []byte) error {
	err := gw.PostToConnection(ctx, connID, body)
	switch {
	case err == nil:
		metrics.PushMessages.WithLabelValues("posted").Inc()
		return nil
	case IsGone(err):
		metrics.PushMessages.WithLabelValues("gone").Inc()
		if rerr := p.Registry.Remove(context.WithoutCancel(ctx), u, connID); rerr != nil {
			p.log.Warn("push: remove gone connection", "connection_id", connID, "user", u.String(), "err", rerr)
		}
	case IsPayloadTooLarge(err):
		metrics.PushMessages.WithLabelValues("failed").Inc()
		p.log.Error("push: message refused as too large", "connection_id", connID, "user", u.String(), "bytes", len(body))
	default:
		metrics.PushMessages.WithLabelValues("failed").Inc()
		p.log.Warn("push: post to connection", "connection_id", connID, "user", u.String(), "err", err)
	}
	return err
}

// SendOrMobile is Send, and when no live connection took m, mobile push to u's registered devices
// with time-to-live ttl (an offer is worth nothing after its window).
func (p *Pusher) SendOrMobile(ctx context.Context, u User, m Message, ttl time.Duration) (Delivery, error) {
	d, err := p.Send(ctx, u, m)
	if d.Sockets > 0 || p.mobile == nil {
		return d, err
	}
	body, eerr := m.Encode()
	if eerr != nil {
		return d, eerr
	}
	n, merr := p.mobile.PublishToUser(ctx, u.Role, u.ID, body, ttl)
	d.Mobile = n
	return d, errors.Join(err, merr)
}

// Close asks the gateway to close connection connID (a connection evicted by Register).
func (p *Pusher) Close(ctx context.Context, connID string) error {
	if !p.Enabled() {
		return nil
	}
	err := p.gw.DeleteConnection(ctx, connID)
	if IsGone(err) {
		return nil
	}
	return err
}

// PositionUpdate is a driver position to push to his ride's rider.
type PositionUpdate struct {
	// Data says which ride, which driver and where (WGS84 degrees).
	Data DriverPosition
	// At is when the fix was taken.
	At time.Time
}

// The position lane: driver positions are decoration (the next one follows within the push
// interval), so they go through a lane of their own that can never grow into the traffic that
// matters (offers, ride statuses): a fixed number of pushers, a bounded queue, and shedding, the
// oldest waiting position first, when the queue is full. Every shed position is counted in
// flagdown_push_positions_shed_total; an offer or a status is never shed (they do not use the lane).
const (
	// PositionPushers is how many goroutines of a process push driver positions: the lane's width,
	// whatever the ping rate.
	PositionPushers = 4
	// MaxQueuedPositions is how many positions may wait for a pusher; past it the oldest waiting one
	// is shed to make room.
	MaxQueuedPositions = 256
)

// Reasons a position is shed (the reason label of metrics.PushPositionsShed).
const (
	// ShedQueueFull: the lane's queue was full; the oldest waiting position made room for a newer one.
	ShedQueueFull = "queue_full"
	// ShedLate: the position waited in the queue past its timeout.
	ShedLate = "late"
)

// queuedPosition is a position waiting in the lane, with the time after which it is not worth pushing.
type queuedPosition struct {
	up       PositionUpdate
	deadline time.Time
}

// PositionsAsync queues ups for the position lane (PositionPushers pushers, at most
// MaxQueuedPositions waiting) and returns at once: it never blocks and never starts a goroutine
// per call. A position still waiting after timeout is shed; when the queue is full the oldest
// waiting position is shed to make room. Shed positions are counted (metrics.PushPositionsShed).
// The lane posts through a management client of its own (its own keep-alive connections, one
// attempt per post), so offers and ride statuses never wait behind positions for a connection.
func (p *Pusher) PositionsAsync(ups []PositionUpdate, timeout time.Duration) {
	if !p.Enabled() || len(ups) == 0 {
		return
	}
	p.laneOnce.Do(p.startLane)
	deadline := time.Now().Add(timeout)
	for _, up := range ups {
		q := queuedPosition{up: up, deadline: deadline}
		for {
			select {
			case p.lane <- q:
			default:
				// Full: shed the oldest waiting position (a pusher may have taken it meanwhile:
				// then there is room and nothing is shed), and try again.
				select {
				case <-p.lane:
					metrics.PushPositionsShed.WithLabelValues(ShedQueueFull).Inc()
				default:
				}
				continue
			}
			break
		}
	}
}

// startLane starts the position lane's pushers. They live as long as the process, as the Pusher.
func (p *Pusher) startLane() {
	p.lane = make(chan queuedPosition, MaxQueuedPositions)
	for range PositionPushers {
		go func() {
			for q := range p.lane {
				if time.Now().After(q.deadline) {
					metrics.PushPositionsShed.WithLabelValues(ShedLate).Inc()
					continue
				}
				ctx, cancel := context.WithDeadline(context.Background(), q.deadline)
				p.position(ctx, q.up)
				cancel()
			}
		}()
	}
}

// Positions pushes each update to its ride's rider (Registry.RideRider; nothing when none is
// recorded), one after the other through the position lane's management client, and returns when
// all are done or ctx ends. Failures are logged, not returned: the next position follows within
// the push interval.
func (p *Pusher) Positions(ctx context.Context, ups []PositionUpdate) {
	if !p.Enabled() {
		return
	}
	for _, up := range ups {
		if ctx.Err() != nil {
			return
		}
		p.position(ctx, up)
	}
}

// position pushes one driver position to his ride's rider through the lane's management client.
func (p *Pusher) position(ctx context.Context, up PositionUpdate) {
	rider, err := p.Registry.RideRider(ctx, up.Data.RideID)
	if err != nil || rider == "" {
		return
	}
	u := User{Role: auth.RoleRider, ID: rider}
	conns, err := p.Registry.Connections(ctx, u)
	if err != nil || len(conns) == 0 {
		return
	}
	body, err := DriverPositionMessage(up.Data, up.At).Encode()
	if err != nil {
		return
	}
	for _, c := range conns {
		if err := p.postVia(ctx, p.laneGW, u, c, body); err != nil && !IsGone(err) {
			p.log.Debug("push: driver position", "ride_id", up.Data.RideID, "err", err)
		}
	}
}
