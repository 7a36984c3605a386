// Package function is the notify function: it pushes what clients care about to their phones'
// live WebSocket connections, held by an API Gateway WebSocket API (flagdown dev's local one in
// development), and keeps the registry of those connections.
//
//	POST /function/notify             a CloudEvent from a trigger (see events.TypesFor("notify")):
//	                                   the message goes to the ride's parties only
//	POST /function/notify/connect     the gateway's $connect integration: registers the connection
//	POST /function/notify/disconnect  the gateway's $disconnect integration: forgets it
//	POST /function/notify/message     the gateway's $default integration: {"action":"sync"} pushes
//	                                   the caller's current state to that connection again
//
// All four are internal: the CloudEvent must carry the signature of flagdown's publishers
// (shared/internalauth), the gateway's calls Authorization: Bearer <internal token>
// (FLAGDOWN_INTERNAL_TOKEN), a static header of the gateway's HTTP integrations. The client proves
// who it is at connect with a one-use connect ticket in X-Flagdown-Client-Ticket (minted by POST
// /function/devices/ticket, from the upgrade request's ticket query parameter) or its token in
// X-Flagdown-Client-Token (from the upgrade request's Authorization header, never from the URL),
// verified exactly as the HTTP API verifies it (shared/auth); the connection then belongs to the
// token's role and subject until the token expires, and nothing addressed to anyone else is ever
// posted to it.
//
// Who gets what (push.MessageType): the offered driver his offer (and, with no live connection,
// a mobile push to his registered devices), its expiry, its withdrawal when the rider cancels; the
// rider every status change of his ride; the ride's driver a change someone else made (the rider
// cancelled; the ride was re-opened without him). Message ids are stable (push.Message), so a
// sync repeats an id the client already has, and it drops it.
//
// Each event has one effect per (source, id): Handle records it in processed_events (consumer
// Consumer) in a transaction that commits only once the pushes went out, so a replayed event pushes
// nothing and a failed push is retried whole. A ride's recipients and versions come from
// PostgreSQL, never from the data alone: the rider is the ride row's, and a version the ride row
// has not reached (or reached with another status) is ignored (OutcomeStale), so no event can make
// the app drop the real updates that follow.
package function

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/jackc/pgx/v5"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/shared/app"
	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/cloudevent"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/host"
	"github.com/flagdown/flagdown/shared/httpx"
	"github.com/flagdown/flagdown/shared/pgstore"
	"github.com/flagdown/flagdown/shared/push"
	"github.com/flagdown/flagdown/shared/ratelimit"
)

// Consumer is this function's name in processed_events.
const Consumer = "notify"

// Triggers are the event types this function pushes.
var Triggers = events.TypesFor("notify")

// HeaderConnectionID and HeaderClientToken are the gateway integration headers (shared/push).
const (
	HeaderConnectionID = push.HeaderConnectionID
	HeaderClientToken  = push.HeaderClientToken
)

// MaxMessageBytes is the largest client message the $default route reads.
const MaxMessageBytes = 4 << 10

// Outcomes of Handle.
const (
	// OutcomePushed: the message reached at least one live connection (or device).
	OutcomePushed = "pushed"
	// OutcomeNoConnection: the recipients hold no live connection; they will see it by polling.
	OutcomeNoConnection = "no_connection"
	// OutcomeStale: the event is past being useful (an offer whose window already closed).
	OutcomeStale = "stale"
	// OutcomeOff: push is not configured (neither FLAGDOWN_PUSH_ENDPOINT nor SNS).
	OutcomeOff = "push_off"
	// OutcomeDuplicate: the event (source, id) was handled before; nothing is pushed again.
	OutcomeDuplicate = "duplicate"
)

// Function pushes messages and keeps the connection registry.
type Function struct {
	d   *app.Deps
	p   *push.Pusher
	mux *http.ServeMux
}

// New returns the function over d.
func New(d *app.Deps) *Function {
	f := &Function{d: d, p: d.Push(), mux: http.NewServeMux()}
	f.mux.Handle("/{$}", host.EventHandler(d.Deps, Consumer, Triggers, f.Handle))
	f.mux.Handle("/connect", f.internal(f.connect))
	f.mux.Handle("/disconnect", f.internal(f.disconnect))
	f.mux.Handle("/message", f.internal(f.message))
	f.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		httpx.WriteError(w, r, d.Log, dispatch.NotFound("path", r.URL.Path))
	})
	return f
}

var lazy = app.NewLazy(func(d *app.Deps) http.Handler { return New(d) })

// Handle is the OpenFaaS golang-middleware entry point.
func Handle(w http.ResponseWriter, r *http.Request) { lazy.ServeHTTP(w, r) }

// ServeHTTP routes the event and the gateway's integration calls.
func (f *Function) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "" {
		r.URL.Path = "/"
	}
	f.mux.ServeHTTP(w, r)
}

// internal wraps a gateway integration route: POST only, the internal credential, a valid
// connection id header.
func (f *Function) internal(fn func(w http.ResponseWriter, r *http.Request, connID string) (any, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		httpx.Serve(w, r, f.d.Log, http.MethodPost, func() (int, any, error) {
			if err := f.d.InternalTokens().VerifyRequest(r); err != nil {
				return 0, nil, err
			}
			id := r.Header.Get(HeaderConnectionID)
			if err := push.ValidateConnectionID(HeaderConnectionID, id); err != nil {
				return 0, nil, err
			}
			v, err := fn(w, r, id)
			return http.StatusOK, v, err
		})
	})
}

// ConnectAnswer is the answer of the $connect integration.
type ConnectAnswer struct {
	ConnectionID string `json:"connection_id"`
	Role         string `json:"role"`
	Subject      string `json:"subject"`
	// ExpiresAt is when the connection's registration ends: the expiry of the token it was opened
	// with, or push.ConnectionTTL from now if sooner. The gateway closes the socket then (flagdown
	// dev's does; see docs/push.md for API Gateway).
	ExpiresAt time.Time `json:"expires_at"`
}

// connect authenticates the phone and registers the connection under its role and subject until
// its token expires. The phone proves who it is with a connect ticket (HeaderClientTicket, one
// use, minted by POST /function/devices/ticket) or with its token (HeaderClientToken, from the
// upgrade request's Authorization header; a gateway never takes it from the URL). A connection
// evicted for being one too many of that user is closed. Each token connect spends one unit of the
// user's and of his client IP's FLAGDOWN_RATE_CONNECTS_PER_MIN / FLAGDOWN_RATE_PER_IP_PER_MIN
// budgets (429 with Retry-After past them: the gateway refuses the socket); a ticket spent its
// unit when it was minted.
func (f *Function) connect(_ http.ResponseWriter, r *http.Request, connID string) (any, error) {
	var u push.User
	var until time.Time
	if ticket := strings.TrimSpace(r.Header.Get(push.HeaderClientTicket)); ticket != "" {
		var err error
		if u, until, err = f.p.Registry.RedeemTicket(r.Context(), ticket); err != nil {
			return nil, err
		}
	} else {
		if f.d.Auth == nil {
			return nil, dispatch.Unavailable("auth", fmt.Errorf("no token verifier configured"))
		}
		tok := strings.TrimSpace(r.Header.Get(HeaderClientToken))
		if scheme, rest, ok := strings.Cut(tok, " "); ok && strings.EqualFold(scheme, "Bearer") {
			tok = strings.TrimSpace(rest)
		}
		if tok == "" {
			return nil, &dispatch.Error{Code: dispatch.CodeUnauthenticated, Field: HeaderClientToken,
				Message: HeaderClientToken + ": a connection needs the client's token (Authorization: Bearer <token>) or a connect ticket (?ticket=)"}
		}
		id, err := f.d.Auth.Verify(tok)
		if err != nil {
			return nil, err
		}
		if until, err = auth.TokenExpiry(tok); err != nil {
			return nil, err
		}
		u = push.User{Role: id.Role, ID: id.Subject}
		// Connects are budgeted per user and per client IP (the gateway passes it in X-Forwarded-For).
		if err := f.d.Limiter().AllowCaller(r.Context(), ratelimit.Connects, u.String(), "sub",
			httpx.ClientIP(r, f.d.Config.TrustedProxyHops)); err != nil {
			return nil, err
		}
	}
	if max := time.Now().Add(f.p.Registry.TTL); until.After(max) {
		until = max
	}
	evicted, err := f.p.Registry.RegisterUntil(r.Context(), u, connID, until)
	if err != nil {
		return nil, err
	}
	for _, old := range evicted {
		if err := f.p.Close(r.Context(), old); err != nil {
			f.d.Log.Warn("close evicted connection", "connection_id", old, "user", u.String(), "err", err)
		}
	}
	return ConnectAnswer{ConnectionID: connID, Role: string(u.Role), Subject: u.ID, ExpiresAt: until.UTC()}, nil
}

// disconnect forgets the connection; a connection never registered (or already forgotten) is fine.
func (f *Function) disconnect(_ http.ResponseWriter, r *http.Request, connID string) (any, error) {
	_, _, err := f.p.Registry.Unregister(r.Context(), connID)
	return map[string]string{"connection_id": connID}, err
}

// ClientMessage is a message a client sends on its connection. The only action is "sync": push my
// current state to this connection again (send it after every connect: the gateway cannot post
// to a connection before its $connect integration has answered).
type ClientMessage struct {
	Action string `json:"action"`
}

// ActionSync is ClientMessage.Action asking for the current state.
const ActionSync = "sync"

// message handles a client's message: sync pushes the caller's live offer, current ride or open
// ride to this connection only.
func (f *Function) message(w http.ResponseWriter, r *http.Request, connID string) (any, error) {
	var m ClientMessage
	if err := httpx.DecodeJSON(w, r, MaxMessageBytes, &m); err != nil {
		return nil, err
	}
	if m.Action != ActionSync {
		return nil, dispatch.Invalid("action", `must be "sync"`)
	}
	u, ok, err := f.p.Registry.Lookup(r.Context(), connID)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, dispatch.NotFound("connection", connID)
	}
	msgs, err := f.state(r.Context(), u)
	if err != nil {
		return nil, err
	}
	for _, msg := range msgs {
		if err := f.p.SendTo(r.Context(), u, connID, msg); err != nil {
			return nil, err
		}
	}
	return map[string]int{"sent": len(msgs)}, nil
}

// state is what a user's phone shows now: a driver's live offer and current ride, a rider's open
// ride. The messages have the ids of the pushes that first said the same.
func (f *Function) state(ctx context.Context, u push.User) ([]push.Message, error) {
	var out []push.Message
	var ride *dispatch.Ride
	var err error
	switch u.Role {
	case auth.RoleDriver:
		o, err := f.d.Redis.OfferLock(ctx, u.ID)
		if err != nil {
			return nil, err
		}
		if o != nil && time.Until(o.ExpiresAt) > 0 {
			out = append(out, push.OfferMessage(*o, o.ExpiresAt.Add(-f.d.Config.OfferWindow)))
		}
		ride, err = pgstore.CurrentRideOfDriver(ctx, f.d.DB.Pool, u.ID)
	case auth.RoleRider:
		ride, err = pgstore.OpenRideOf(ctx, f.d.DB.Pool, u.ID)
	}
	if err != nil {
		return nil, err
	}
	if ride != nil {
		out = append(out, push.RideStatusMessage(push.RideStatus{
			RideID: ride.ID, Status: ride.Status, Version: ride.Version, DriverID: ride.DriverID,
		}, statusTime(ride)))
	}
	return out, nil
}

// statusTime is when ride entered its current status, as far as the ride row says.
func statusTime(r *dispatch.Ride) time.Time {
	for _, t := range []*time.Time{r.CancelledAt, r.CompletedAt, r.StartedAt, r.AcceptedAt} {
		if t != nil {
			return *t
		}
	}
	return r.CreatedAt
}

// delivery is one message for one recipient.
type delivery struct {
	to  push.User
	msg push.Message
	// ttl > 0 asks for the mobile fallback, kept that long.
	ttl time.Duration
}

func driver(id string) push.User { return push.User{Role: auth.RoleDriver, ID: id} }
func rider(id string) push.User  { return push.User{Role: auth.RoleRider, ID: id} }

// Handle pushes the messages event e means to the ride's parties, once per (source, id). It returns
// OutcomePushed, OutcomeNoConnection, OutcomeStale, OutcomeOff or OutcomeDuplicate; an error when a
// recipient's connection could not be reached for a reason that may pass (nothing is recorded, the
// trigger delivers the event again and repeats carry the same message ids).
func (f *Function) Handle(ctx context.Context, e event.Event) (string, error) {
	if err := dispatch.ValidateRideID("subject", e.Subject()); err != nil {
		return "", err
	}
	if !f.p.Enabled() && !f.p.MobileEnabled() {
		return OutcomeOff, nil
	}
	var outcome string
	// The processed_events row is held (uncommitted) while pushing: a concurrent delivery of the
	// same event waits for it and then finds it recorded.
	err := f.d.DB.Tx(ctx, func(tx pgx.Tx) error {
		first, err := pgstore.MarkProcessed(ctx, tx, Consumer, e.Source(), e.ID())
		if err != nil {
			return dispatch.Unavailable("postgres", err)
		}
		if !first {
			outcome = OutcomeDuplicate
			return nil
		}
		outcome, err = f.deliver(ctx, e)
		return err
	})
	if err != nil {
		return "", err
	}
	return outcome, nil
}

// deliver pushes e's messages (route) and returns the outcome.
func (f *Function) deliver(ctx context.Context, e event.Event) (string, error) {
	ds, err := f.route(ctx, e)
	if err != nil || len(ds) == 0 {
		if err == nil {
			return OutcomeStale, nil
		}
		return "", err
	}
	reached := false
	var firstErr error
	for _, d := range ds {
		var got push.Delivery
		var err error
		if d.ttl > 0 {
			got, err = f.p.SendOrMobile(ctx, d.to, d.msg, d.ttl)
		} else {
			got, err = f.p.Send(ctx, d.to, d.msg)
		}
		if got.Sockets+got.Mobile > 0 {
			reached = true
		}
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	if firstErr != nil {
		return "", dispatch.Unavailable("push", firstErr)
	}
	if !reached {
		return OutcomeNoConnection, nil
	}
	return OutcomePushed, nil
}

// route turns e into its deliveries: who gets which message. Offer events name their driver in the
// data; ride status events are checked against the ride row (rideStatus). It records the ride's
// rider for position pushes when a ride gets its driver.
func (f *Function) route(ctx context.Context, e event.Event) ([]delivery, error) {
	switch e.Type() {
	case events.RideOffered:
		var d events.RideOfferedData
		if err := cloudevent.DecodeData(e, &d); err != nil {
			return nil, err
		}
		ttl := time.Until(d.ExpiresAt)
		if ttl <= 0 {
			return nil, nil // the window closed before we could say it opened
		}
		o := dispatch.LiveOffer{OfferID: d.OfferID, RideID: d.RideID, DistanceM: d.DistanceM, ExpiresAt: d.ExpiresAt,
			Pickup: dispatch.Point{Lat: d.Pickup.Lat, Lng: d.Pickup.Lng}}
		if d.Dropoff != nil {
			o.Dropoff = dispatch.Point{Lat: d.Dropoff.Lat, Lng: d.Dropoff.Lng}
		}
		return []delivery{{to: driver(d.DriverID), msg: push.OfferMessage(o, e.Time()), ttl: ttl}}, nil
	case events.RideOfferExpired:
		var d events.RideOfferExpiredData
		if err := cloudevent.DecodeData(e, &d); err != nil {
			return nil, err
		}
		return []delivery{{to: driver(d.DriverID), msg: push.OfferEndMessage(push.TypeOfferExpired, d.RideID, d.OfferID, d.ExpiresAt)}}, nil
	case events.RideAccepted:
		var d events.RideAcceptedData
		if err := cloudevent.DecodeData(e, &d); err != nil {
			return nil, err
		}
		ride, version, err := f.rideStatus(ctx, e, d.RideID, d.RiderID, dispatch.RideAccepted, d.Version)
		if err != nil || ride == nil {
			return nil, err
		}
		// The rider position pushes go to is the ride row's, whatever the data says.
		if err := f.p.Registry.SetRideRider(ctx, ride.ID, ride.RiderID); err != nil {
			return nil, err
		}
		if ride.Version == version {
			d.DriverID = ride.DriverID
		}
		s := push.RideStatus{RideID: ride.ID, Status: dispatch.RideAccepted, Version: version, DriverID: d.DriverID, By: string(dispatch.ActorDriver)}
		out := []delivery{{to: rider(ride.RiderID), msg: push.RideStatusMessage(s, d.AcceptedAt)}}
		if d.Hail && d.DriverID != "" {
			// A street hail: the driver may be the side still waiting; he learns of his ride too.
			out = append(out, delivery{to: driver(d.DriverID), msg: push.RideStatusMessage(s, d.AcceptedAt)})
		}
		return out, nil
	case events.RideStarted, events.RideCompleted, events.RideCancelled, events.RideReopened:
		var d events.RideTransitionData
		if err := cloudevent.DecodeData(e, &d); err != nil {
			return nil, err
		}
		ride, version, err := f.rideStatus(ctx, e, d.RideID, d.RiderID, dispatch.RideStatus(d.To), d.Version)
		if err != nil || ride == nil {
			return nil, err
		}
		s := push.RideStatus{RideID: ride.ID, Status: dispatch.RideStatus(d.To), Version: version, DriverID: d.DriverID, By: d.By, Reason: d.Reason}
		if s.Status == dispatch.RideRequested {
			s.DriverID = "" // re-opened: matched again without him
		}
		msg := push.RideStatusMessage(s, d.At)
		out := []delivery{{to: rider(ride.RiderID), msg: msg}}
		if d.DriverID != "" && (e.Type() == events.RideCancelled || e.Type() == events.RideReopened) {
			out = append(out, delivery{to: driver(d.DriverID), msg: msg})
		}
		if d.WithdrawnOfferID != "" && d.WithdrawnOfferDriverID != "" {
			out = append(out, delivery{to: driver(d.WithdrawnOfferDriverID),
				msg: push.OfferEndMessage(push.TypeOfferWithdrawn, d.RideID, d.WithdrawnOfferID, d.At)})
		}
		return out, nil
	case events.RideUnmatched:
		var d events.RideUnmatchedData
		if err := cloudevent.DecodeData(e, &d); err != nil {
			return nil, err
		}
		ride, version, err := f.rideStatus(ctx, e, d.RideID, d.RiderID, dispatch.RideUnmatched, d.Version)
		if err != nil || ride == nil {
			return nil, err
		}
		s := push.RideStatus{RideID: ride.ID, Status: dispatch.RideUnmatched, Version: version, By: string(dispatch.ActorSystem), Reason: d.Reason}
		return []delivery{{to: rider(ride.RiderID), msg: push.RideStatusMessage(s, d.At)}}, nil
	}
	return nil, dispatch.Invalid("type", "is not pushed by notify")
}

// rideStatus checks a ride status event against the ride row in PostgreSQL and returns the row and
// the version to push. The data must name the event's subject and the row's rider. The version is
// the row's when the data claims the row's version (or none) and the row has the event's status;
// an older version the row has passed (the ride moved on since) is pushed as the event says, and
// clients keep the highest version they saw. A version the row never reached, or reached with
// another status, is ignored: nil and no error (OutcomeStale), logged.
func (f *Function) rideStatus(ctx context.Context, e event.Event, rideID, riderID string, status dispatch.RideStatus, claimed int64) (*dispatch.Ride, int64, error) {
	if rideID != e.Subject() {
		return nil, 0, dispatch.Invalid("data.ride_id", "must equal the event subject")
	}
	ride, err := pgstore.GetRide(ctx, f.d.DB.Pool, rideID, false)
	if dispatch.ErrorCode(err) == dispatch.CodeNotFound {
		f.d.Log.Warn("notify: event for a ride PostgreSQL does not know; ignored", "id", e.ID(), "type", e.Type(), "ride_id", rideID)
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	if riderID != ride.RiderID {
		return nil, 0, dispatch.Invalid("data.rider_id", "is not the ride's rider")
	}
	switch {
	case claimed == ride.Version || (claimed == 0 && ride.Status == status):
		if ride.Status != status {
			break
		}
		return ride, ride.Version, nil
	case claimed > 0 && claimed < ride.Version:
		return ride, claimed, nil
	}
	f.d.Log.Warn("notify: event version not found in PostgreSQL; ignored", "id", e.ID(), "type", e.Type(), "ride_id", rideID,
		"version", claimed, "status", status, "ride_version", ride.Version, "ride_status", ride.Status)
	return nil, 0, nil
}
