package push

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
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
	inflight atomic.Int64
}

// NewPusher returns a Pusher over reg that posts through gw (nil: push is off, every Send delivers
// nothing) and falls back to mob (nil or not Enabled: no fallback).
func NewPusher(reg *Registry, gw *Management, mob Mobile, log *slog.Logger) *Pusher {
	p := &Pusher{Registry: reg, log: log}
	if gw != nil {
		p.gw = gw
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
	err := p.gw.PostToConnection(ctx, connID, body)
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

// MaxPositionBatchesInFlight bounds the PositionsAsync calls running at once in a process; past it
// updates are dropped (a position is worth little once the next one is due).
const MaxPositionBatchesInFlight = 64

// PositionsAsync runs Positions in the background within timeout, unless
// MaxPositionBatchesInFlight are running already: then ups are dropped. It never blocks.
func (p *Pusher) PositionsAsync(ups []PositionUpdate, timeout time.Duration) {
	if !p.Enabled() || len(ups) == 0 {
		return
	}
	if p.inflight.Add(1) > MaxPositionBatchesInFlight {
		p.inflight.Add(-1)
		return
	}
	go func() {
		defer p.inflight.Add(-1)
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		p.Positions(ctx, ups)
	}()
}

// MaxParallelPositions bounds the position pushes one call of Positions runs at once.
const MaxParallelPositions = 8

// Positions pushes each update to its ride's rider (Registry.RideRider; nothing when none is
// recorded), at most MaxParallelPositions at a time, and returns when all are done or ctx ends.
// Failures are logged, not returned: the next position follows within the push interval.
func (p *Pusher) Positions(ctx context.Context, ups []PositionUpdate) {
	if !p.Enabled() || len(ups) == 0 {
		return
	}
	sem := make(chan struct{}, MaxParallelPositions)
	var wg sync.WaitGroup
	for _, up := range ups {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			rider, err := p.Registry.RideRider(ctx, up.Data.RideID)
			if err != nil || rider == "" {
				return
			}
			if _, err := p.Send(ctx, User{Role: auth.RoleRider, ID: rider}, DriverPositionMessage(up.Data, up.At)); err != nil {
				p.log.Debug("push: driver position", "ride_id", up.Data.RideID, "err", err)
			}
		}()
	}
	wg.Wait()
}
