// Package wsgateway is flagdown dev's local stand-in for an AWS API Gateway WebSocket API: it
// holds phones' WebSocket connections, calls the connect, disconnect and $default (message)
// integrations over HTTP as API Gateway calls its routes' integrations, and serves the management
// API (POST/GET/DELETE /{stage}/@connections/{connectionId}, SigV4-signed) with the real API's wire
// format, so shared/push's client runs against it unchanged. Its limits are API Gateway's: 128 KiB
// messages, 32 KiB frames, 10 minutes idle, 2 hours per connection.
//
// Integration contract (every call is a POST with the internal credential set by
// Options.Authorize and the header HeaderConnectionID):
//
//   - connect (Options.ConnectURL), before the upgrade, with HeaderClientToken (the client's JWT
//     from its "Authorization: Bearer" header or its access_token query parameter),
//     X-Forwarded-For (the client's IP) and User-Agent (the client's). A 2xx accepts the
//     connection; any other status refuses the handshake with that status and body. The
//     connection can be posted to only once this returned 2xx and the upgrade completed.
//   - message (Options.MessageURL, the $default route), for each data message from the client,
//     in order, body = the message, Content-Type application/json; the answer's body is ignored
//     (a non-2xx is logged).
//   - disconnect (Options.DisconnectURL), once after the socket of an accepted connection ended
//     for any reason, after its last message call; best effort within Options.DisconnectTimeout.
package wsgateway

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flagdown/flagdown/shared/push"
)

// Integration request headers (besides the internal Authorization): the wire contract of the
// notify function's gateway routes, owned by shared/push.
const (
	// HeaderConnectionID carries the connection id on every integration call.
	HeaderConnectionID = push.HeaderConnectionID
	// HeaderClientToken carries the client's JWT on the connect call (empty when it sent none).
	HeaderClientToken = push.HeaderClientToken
)

// Defaults of Options, API Gateway's WebSocket quotas where it has one.
const (
	DefaultStage                 = "local"
	DefaultMaxMessageBytes       = push.MaxMessageBytes // 128 KiB
	DefaultMaxFrameBytes         = 32 << 10             // 32 KiB
	DefaultIdleTimeout           = 10 * time.Minute
	DefaultMaxConnectionDuration = 2 * time.Hour
	DefaultPingInterval          = 30 * time.Second
	DefaultPongTimeout           = 10 * time.Second
	DefaultWriteTimeout          = 10 * time.Second
	DefaultCloseTimeout          = 5 * time.Second
	DefaultIntegrationTimeout    = 29 * time.Second // API Gateway's integration timeout
	DefaultDisconnectTimeout     = 5 * time.Second
	DefaultSignatureWindow       = 5 * time.Minute // SigV4's allowed clock skew
	DefaultMessageQueue          = 16
)

// Options configure a Gateway. Zero durations and sizes take the defaults above.
type Options struct {
	// Stage is the first path segment of the management API (/{stage}/@connections/{id}).
	Stage string
	// Region is the AWS region management requests must be signed for (required).
	Region string
	// AccessKeyID and SecretAccessKey are the one credential management requests must be signed
	// with (required).
	AccessKeyID, SecretAccessKey string

	// ConnectURL, DisconnectURL and MessageURL are the integrations; an empty one is not called
	// (no connect check; no disconnect notice; client messages dropped).
	ConnectURL, DisconnectURL, MessageURL string
	// Authorize sets the internal credential on each integration request (e.g.
	// internalauth.Keys.SetBearer); nil sends none.
	Authorize func(*http.Request) error
	// HTTPClient sends the integration requests; nil is a client without a global timeout (each
	// call has its own: IntegrationTimeout, DisconnectTimeout).
	HTTPClient *http.Client

	// MaxMessageBytes is the largest message either way, bytes; a client message over it closes
	// the socket with 1009, a post over it is answered 413 PayloadTooLargeException.
	MaxMessageBytes int
	// MaxFrameBytes is the largest frame either way, bytes: a client frame over it closes the
	// socket with 1009; posted messages are sent in frames of at most this size.
	MaxFrameBytes int
	// IdleTimeout closes a connection no data message went through, either way, for this long.
	IdleTimeout time.Duration
	// MaxConnectionDuration closes a connection this long after it was accepted.
	MaxConnectionDuration time.Duration
	// PingInterval is the period of the server's ping frames; a pong not back within PongTimeout
	// reaps the connection (a dead peer, whose TCP connection would otherwise linger).
	PingInterval, PongTimeout time.Duration
	// WriteTimeout bounds the write of one posted message to the socket; a write that does not
	// finish in time closes the connection (the post answers 410).
	WriteTimeout time.Duration
	// CloseTimeout bounds a close handshake; the TCP connection is dropped after it.
	CloseTimeout time.Duration
	// IntegrationTimeout bounds one connect or message integration call.
	IntegrationTimeout time.Duration
	// DisconnectTimeout bounds one disconnect integration call.
	DisconnectTimeout time.Duration
	// SignatureWindow is how far a management request's X-Amz-Date may be from this host's clock.
	SignatureWindow time.Duration
	// MessageQueue is how many client messages of one connection may wait for the message
	// integration; more are dropped (logged, counted in Stats.MessagesDropped).
	MessageQueue int
	// Log receives the gateway's logs; nil is slog.Default().
	Log *slog.Logger
}

func (o *Options) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	defInt := func(n *int, v int) {
		if *n <= 0 {
			*n = v
		}
	}
	if o.Stage == "" {
		o.Stage = DefaultStage
	}
	defInt(&o.MaxMessageBytes, DefaultMaxMessageBytes)
	defInt(&o.MaxFrameBytes, DefaultMaxFrameBytes)
	defInt(&o.MessageQueue, DefaultMessageQueue)
	def(&o.IdleTimeout, DefaultIdleTimeout)
	def(&o.MaxConnectionDuration, DefaultMaxConnectionDuration)
	def(&o.PingInterval, DefaultPingInterval)
	def(&o.PongTimeout, DefaultPongTimeout)
	def(&o.WriteTimeout, DefaultWriteTimeout)
	def(&o.CloseTimeout, DefaultCloseTimeout)
	def(&o.IntegrationTimeout, DefaultIntegrationTimeout)
	def(&o.DisconnectTimeout, DefaultDisconnectTimeout)
	def(&o.SignatureWindow, DefaultSignatureWindow)
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{}
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
}

// CloseReason says why a connection ended (the keys of Stats.Closed).
type CloseReason string

// Why connections end.
const (
	ReasonClient        CloseReason = "client"          // the client closed it or its TCP connection broke
	ReasonIdle          CloseReason = "idle"            // reaped: IdleTimeout without a data message
	ReasonMaxDuration   CloseReason = "max_duration"    // reaped: MaxConnectionDuration reached
	ReasonTokenExpired  CloseReason = "token_expired"   // the token it was opened with expired (the connect answer's expires_at)
	ReasonPongTimeout   CloseReason = "pong_timeout"    // reaped: a ping went unanswered for PongTimeout
	ReasonFrameTooBig   CloseReason = "frame_too_big"   // the client sent a frame over MaxFrameBytes
	ReasonMessageTooBig CloseReason = "message_too_big" // the client sent a message over MaxMessageBytes
	ReasonWriteFailed   CloseReason = "write_failed"    // a posted message could not be written in WriteTimeout
	ReasonDeleted       CloseReason = "deleted"         // DELETE on the management API
	ReasonShutdown      CloseReason = "shutdown"        // Gateway.Close
)

// Stats are a gateway's counters since New.
type Stats struct {
	// Open is the number of connections accepted and not yet fully ended (disconnect included).
	Open int
	// Accepted counts connections the connect integration accepted and the upgrade completed.
	Accepted uint64
	// Refused counts handshakes refused: the connect integration said no or failed.
	Refused uint64
	// Closed counts ended connections by reason (reaps are idle, max_duration, pong_timeout).
	Closed map[CloseReason]uint64
	// MessagesPosted counts messages written to a socket through the management API.
	MessagesPosted uint64
	// MessagesReceived counts data messages received from clients.
	MessagesReceived uint64
	// MessagesDropped counts client messages dropped because the connection's queue was full.
	MessagesDropped uint64
	// IntegrationFailures counts message and disconnect calls that failed or answered non-2xx.
	IntegrationFailures uint64
}

// Gateway is the local WebSocket API. Build it with New; serve ClientHandler and
// ManagementHandler; Close it before the HTTP server that serves the integrations.
type Gateway struct {
	opts   Options
	sig    *verifier
	ctx    context.Context // ends at Close: pending connect and message integration calls are abandoned
	cancel context.CancelFunc

	mu     sync.Mutex
	conns  map[string]*conn
	closed bool
	wg     sync.WaitGroup // one per handler that may hold a connection

	open, accepted, refused, posted, received, dropped, integrationFailures atomic.Uint64
	closedMu                                                                sync.Mutex
	closedBy                                                                map[CloseReason]uint64
}

// New returns a gateway with opts (defaults filled in).
func New(opts Options) (*Gateway, error) {
	opts.setDefaults()
	if opts.Region == "" || opts.AccessKeyID == "" || opts.SecretAccessKey == "" {
		return nil, errors.New("wsgateway: the management API needs Region, AccessKeyID and SecretAccessKey")
	}
	if opts.MaxFrameBytes > opts.MaxMessageBytes {
		return nil, fmt.Errorf("wsgateway: MaxFrameBytes %d is over MaxMessageBytes %d", opts.MaxFrameBytes, opts.MaxMessageBytes)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Gateway{
		ctx: ctx, cancel: cancel,
		opts:     opts,
		sig:      newVerifier(opts.AccessKeyID, opts.SecretAccessKey, opts.Region, opts.SignatureWindow),
		conns:    make(map[string]*conn),
		closedBy: make(map[CloseReason]uint64),
	}, nil
}

// Stage is the management API's stage (the first path segment).
func (g *Gateway) Stage() string { return g.opts.Stage }

// Stats returns the counters.
func (g *Gateway) Stats() Stats {
	s := Stats{
		Open: int(g.open.Load()), Accepted: g.accepted.Load(), Refused: g.refused.Load(),
		MessagesPosted: g.posted.Load(), MessagesReceived: g.received.Load(),
		MessagesDropped: g.dropped.Load(), IntegrationFailures: g.integrationFailures.Load(),
		Closed: make(map[CloseReason]uint64),
	}
	g.closedMu.Lock()
	for k, v := range g.closedBy {
		s.Closed[k] = v
	}
	g.closedMu.Unlock()
	return s
}

// Close closes every connection with 1001 (going away), waits until each has ended and its
// disconnect integration was called, and refuses new handshakes (503) from then on. Connect calls
// in flight and client messages not yet delivered to the message integration are abandoned.
func (g *Gateway) Close() error {
	g.mu.Lock()
	g.closed = true
	g.cancel()
	conns := make([]*conn, 0, len(g.conns))
	for _, c := range g.conns {
		conns = append(conns, c)
	}
	g.mu.Unlock()
	for _, c := range conns {
		go c.shutdown(ReasonShutdown, statusGoingAway, "server shutting down")
	}
	g.wg.Wait()
	return nil
}

// enter admits a handshake unless the gateway is closed; leave must follow.
func (g *Gateway) enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.wg.Add(1)
	return true
}

func (g *Gateway) leave() { g.wg.Done() }

// register makes c postable; false when the gateway closed meanwhile.
func (g *Gateway) register(c *conn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.conns[c.id] = c
	return true
}

// unregister makes c's id gone for the management API.
func (g *Gateway) unregister(c *conn) {
	g.mu.Lock()
	if g.conns[c.id] == c {
		delete(g.conns, c.id)
	}
	g.mu.Unlock()
}

func (g *Gateway) lookup(id string) *conn {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.conns[id]
}

func (g *Gateway) countClosed(r CloseReason) {
	g.closedMu.Lock()
	g.closedBy[r]++
	g.closedMu.Unlock()
}

// connectionIDBytes is the random part of a connection id: 11 bytes, whose standard base64 is 16
// characters ending in '=' like API Gateway's ids (e.g. "L0SM9cOFvHcCIhw="); ids contain '+' and
// '/', so clients must escape them in URLs.
const connectionIDBytes = 11

func newConnectionID() (string, error) {
	var b [connectionIDBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("wsgateway: connection id: %w", err)
	}
	return base64.StdEncoding.EncodeToString(b[:]), nil
}

// integrate POSTs body to url with the internal credential and the connection id (plus extra
// headers) within timeout, and returns the answer (its body read up to 4 KiB).
func (g *Gateway) integrate(ctx context.Context, url, id string, timeout time.Duration, extra http.Header, body []byte) (*http.Response, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytesReader(body))
	if err != nil {
		return nil, nil, err
	}
	for k, v := range extra {
		req.Header[k] = v
	}
	req.Header.Set(HeaderConnectionID, id)
	if g.opts.Authorize != nil {
		if err := g.opts.Authorize(req); err != nil {
			return nil, nil, fmt.Errorf("internal credential: %w", err)
		}
	}
	resp, err := g.opts.HTTPClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := readUpTo(resp.Body, 4<<10)
	if err != nil {
		return nil, nil, fmt.Errorf("read answer: %w", err)
	}
	return resp, b, nil
}
