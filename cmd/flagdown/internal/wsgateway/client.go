package wsgateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/flagdown/flagdown/shared/push"
)

// WebSocket close codes the gateway sends (RFC 6455 §7.4.1).
const (
	statusNormal     = websocket.StatusNormalClosure   // 1000: DELETE
	statusGoingAway  = websocket.StatusGoingAway       // 1001: shutdown, reaps
	statusMessageBig = websocket.StatusMessageTooBig   // 1009: a frame or message over the limit
	statusInternal   = websocket.StatusInternalError   // 1011: a posted message that could not be written
	statusPolicy     = websocket.StatusPolicyViolation // 1008: the token the connection was opened with expired
)

const (
	queryToken       = "access_token"     // a token in the URL: refused (URLs are logged)
	queryTicket      = "ticket"           // a connect ticket: how browsers, which cannot set headers on a WebSocket, connect
	bearerPrefix     = "Bearer "          // the client's Authorization scheme
	jsonContentType  = "application/json" // message integration body
	refusalBodyLimit = 4 << 10            // bytes of a connect refusal's body passed to the client
	maxFrameHeader   = 14                 // the longest frame header, bytes (RFC 6455 §5.2)
)

// ClientHandler is the client endpoint (flagdown dev mounts it at GET /ws): it runs the connect
// integration and upgrades the request to a WebSocket.
func (g *Gateway) ClientHandler() http.Handler { return http.HandlerFunc(g.serveClient) }

// conn is one accepted connection.
type conn struct {
	g           *Gateway
	id          string
	ws          *websocket.Conn
	guard       *frameGuard
	sourceIP    string
	userAgent   string
	connectedAt time.Time
	// expiresAt is when the connect integration said the connection ends (its token's expiry);
	// zero: only MaxConnectionDuration applies.
	expiresAt  time.Time
	lastActive atomic.Int64 // unix nanoseconds of the last data message either way

	ready  chan struct{}   // closed when ws, guard and connectedAt are set (ws nil: the upgrade failed)
	ctx    context.Context // ends when the connection starts to close
	cancel context.CancelFunc

	once   sync.Once
	reason CloseReason
	closed chan struct{} // closed when the socket is closed (handshake done or given up)
}

func (c *conn) touch() { c.lastActive.Store(time.Now().UnixNano()) }

// shutdown starts closing c (first caller's reason wins): it is gone for the management API at
// once; the close frame carries code and text; the TCP connection is dropped after CloseTimeout.
// It returns when the socket is closed.
func (c *conn) shutdown(reason CloseReason, code websocket.StatusCode, text string) {
	c.once.Do(func() {
		c.reason = reason
		c.g.unregister(c)
		c.cancel()
		<-c.ready
		if c.ws == nil { // the upgrade failed: no socket
			close(c.closed)
			return
		}
		go func() {
			done := make(chan struct{})
			go func() {
				if code == 0 {
					_ = c.ws.CloseNow()
				} else {
					_ = c.ws.Close(code, text)
				}
				close(done)
			}()
			t := time.NewTimer(c.g.opts.CloseTimeout)
			defer t.Stop()
			select {
			case <-done:
			case <-t.C:
				_ = c.guard.Conn.Close() // a peer that does not answer the close handshake
				<-done
			}
			close(c.closed)
		}()
	})
	<-c.closed
}

func (g *Gateway) serveClient(w http.ResponseWriter, r *http.Request) {
	if !g.enter() {
		writeJSONError(w, http.StatusServiceUnavailable, "", "gateway shutting down")
		return
	}
	defer g.leave()
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		// Not a WebSocket handshake: refused before any integration hears of it.
		w.Header().Set("Upgrade", "websocket")
		writeJSONError(w, http.StatusUpgradeRequired, "", "a WebSocket upgrade request is required")
		return
	}
	id, err := newConnectionID()
	if err != nil {
		g.opts.Log.Error("websocket handshake", "err", err)
		writeJSONError(w, http.StatusInternalServerError, "", "Internal server error")
		return
	}
	ip := r.RemoteAddr
	if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		ip = h
	}
	if r.URL.Query().Has(queryToken) {
		// A token in the URL ends up in access logs, proxies and browser history: refused before
		// any integration hears of it. Browsers connect with a ticket instead.
		g.refused.Add(1)
		w.Header().Set("WWW-Authenticate", "Bearer")
		writeJSONError(w, http.StatusUnauthorized, "", "a token may not travel in the URL: send Authorization: Bearer <token>, or connect with ?ticket= (POST /function/devices/ticket)")
		return
	}
	ok, expiresAt := g.connect(w, r, id, ip)
	if !ok {
		g.refused.Add(1)
		return
	}
	c := &conn{g: g, id: id, sourceIP: ip, userAgent: r.UserAgent(), expiresAt: expiresAt, ready: make(chan struct{}), closed: make(chan struct{})}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	registered := false
	// The connection becomes postable when the 101 is committed, before the client can see it; a
	// post that comes while the library finishes the upgrade waits for ready.
	gw := &guardedWriter{ResponseWriter: w, maxFrame: int64(g.opts.MaxFrameBytes), maxMessage: int64(g.opts.MaxMessageBytes),
		onHijack: func() { registered = g.register(c) },
		onTooBig: func(frameSize bool) {
			if frameSize {
				go c.shutdown(ReasonFrameTooBig, statusMessageBig, fmt.Sprintf("frame over %d bytes", g.opts.MaxFrameBytes))
			} else {
				go c.shutdown(ReasonMessageTooBig, statusMessageBig, fmt.Sprintf("message over %d bytes", g.opts.MaxMessageBytes))
			}
		}}
	ws, err := websocket.Accept(gw, r, &websocket.AcceptOptions{
		// API Gateway accepts any Origin; a connection is authorized by the connect integration.
		InsecureSkipVerify: true,
		CompressionMode:    websocket.CompressionDisabled,
	})
	if err != nil {
		g.unregister(c)
		c.cancel()
		close(c.ready)
		// Accept has answered the client; the connect integration accepted it, so it hears the end.
		g.opts.Log.Warn("websocket upgrade failed", "connection_id", id, "err", err)
		g.disconnect(id)
		return
	}
	ws.SetReadLimit(int64(g.opts.MaxMessageBytes))
	c.ws, c.guard, c.connectedAt = ws, gw.guard, time.Now()
	c.touch()
	// Counted before ready: a post waits for ready, so once a client reads anything its socket is
	// already in Stats.
	g.accepted.Add(1)
	g.open.Add(1)
	defer g.open.Add(^uint64(0))
	close(c.ready)
	if !registered {
		go c.shutdown(ReasonShutdown, statusGoingAway, "server shutting down")
	}
	c.run()
}

// connect runs the connect integration; false when it refused (the client has been answered).
// When it accepted it also returns the expires_at of its answer (the connection's token expiry;
// zero when it names none).
func (g *Gateway) connect(w http.ResponseWriter, r *http.Request, id, ip string) (bool, time.Time) {
	if g.opts.ConnectURL == "" {
		return true, time.Time{}
	}
	h := http.Header{}
	h.Set(HeaderClientToken, clientToken(r))
	if t := r.URL.Query().Get(queryTicket); t != "" {
		h.Set(push.HeaderClientTicket, t)
	}
	h.Set("X-Forwarded-For", ip)
	h.Set("User-Agent", r.UserAgent())
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(g.ctx, cancel)()
	resp, body, err := g.integrate(ctx, g.opts.ConnectURL, id, g.opts.IntegrationTimeout, h, nil)
	if err != nil {
		g.opts.Log.Error("connect integration failed", "connection_id", id, "url", g.opts.ConnectURL, "err", err)
		writeJSONError(w, http.StatusBadGateway, "", "Internal server error")
		return false, time.Time{}
	}
	if resp.StatusCode/100 == 2 {
		var answer struct {
			ExpiresAt time.Time `json:"expires_at"`
		}
		_ = json.Unmarshal(body, &answer) // an answer without expires_at: no expiry of its own
		return true, answer.ExpiresAt
	}
	for _, k := range []string{"Content-Type", "Www-Authenticate", "Retry-After"} {
		if v := resp.Header.Values(k); len(v) > 0 {
			w.Header()[k] = v
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(body[:min(len(body), refusalBodyLimit)])
	return false, time.Time{}
}

// clientToken is the JWT of the upgrade request's Authorization Bearer, else "" (never from the
// URL).
func clientToken(r *http.Request) string {
	if a := r.Header.Get("Authorization"); len(a) > len(bearerPrefix) && strings.EqualFold(a[:len(bearerPrefix)], bearerPrefix) {
		return strings.TrimSpace(a[len(bearerPrefix):])
	}
	return ""
}

// run reads the client's messages until the socket ends, then runs the disconnect integration.
func (c *conn) run() {
	g := c.g
	queue := make(chan []byte, g.opts.MessageQueue)
	var workers sync.WaitGroup
	workers.Add(2)
	go func() { defer workers.Done(); c.deliver(queue) }()
	go func() { defer workers.Done(); c.supervise() }()

	reason := ReasonClient
	for {
		_, data, err := c.ws.Read(context.Background())
		if err != nil {
			if errors.Is(err, websocket.ErrMessageTooBig) { // the library's backstop has sent 1009
				reason = ReasonMessageTooBig
			}
			break
		}
		if c.ctx.Err() != nil {
			continue // closing: the integration hears nothing more from this connection
		}
		c.touch()
		g.received.Add(1)
		select {
		case queue <- data:
		default:
			g.dropped.Add(1)
			g.opts.Log.Warn("client message dropped: message integration backlog full", "connection_id", c.id, "queue", cap(queue))
		}
	}
	c.shutdown(reason, 0, "")
	close(queue)
	workers.Wait()
	g.countClosed(c.reason)
	g.disconnect(c.id)
}

// deliver sends queued client messages to the message integration, in order.
func (c *conn) deliver(queue <-chan []byte) {
	g := c.g
	for data := range queue {
		if g.opts.MessageURL == "" || g.ctx.Err() != nil {
			continue // no $default route, or the gateway is closing
		}
		h := http.Header{}
		h.Set("Content-Type", jsonContentType)
		resp, body, err := g.integrate(g.ctx, g.opts.MessageURL, c.id, g.opts.IntegrationTimeout, h, data)
		switch {
		case err != nil:
			g.integrationFailures.Add(1)
			g.opts.Log.Error("message integration failed", "connection_id", c.id, "url", g.opts.MessageURL, "err", err)
		case resp.StatusCode/100 != 2:
			g.integrationFailures.Add(1)
			g.opts.Log.Error("message integration refused", "connection_id", c.id, "status", resp.StatusCode, "body", string(body))
		}
	}
}

// supervise reaps c when idle, past its maximum duration, or deaf to pings.
func (c *conn) supervise() {
	o := c.g.opts
	maxT := time.NewTimer(o.MaxConnectionDuration)
	defer maxT.Stop()
	// The token's expiry, when the connect integration named one: the socket closes then.
	var expired <-chan time.Time
	if !c.expiresAt.IsZero() {
		expT := time.NewTimer(time.Until(c.expiresAt))
		defer expT.Stop()
		expired = expT.C
	}
	idleT := time.NewTimer(o.IdleTimeout)
	defer idleT.Stop()
	ping := time.NewTicker(o.PingInterval)
	defer ping.Stop()
	pongFailed := make(chan struct{}, 1)
	pinging := false
	pongDone := make(chan struct{}, 1)
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-maxT.C:
			go c.shutdown(ReasonMaxDuration, statusGoingAway, "maximum connection duration reached")
			return
		case <-expired:
			go c.shutdown(ReasonTokenExpired, statusPolicy, "token expired")
			return
		case <-idleT.C:
			idle := time.Since(time.Unix(0, c.lastActive.Load()))
			if idle >= o.IdleTimeout {
				go c.shutdown(ReasonIdle, statusGoingAway, "idle timeout")
				return
			}
			idleT.Reset(o.IdleTimeout - idle)
		case <-ping.C:
			if pinging { // the previous ping is still waiting for its pong
				continue
			}
			pinging = true
			go func() {
				ctx, cancel := context.WithTimeout(c.ctx, o.PongTimeout)
				defer cancel()
				if err := c.ws.Ping(ctx); err != nil && c.ctx.Err() == nil {
					pongFailed <- struct{}{}
					return
				}
				pongDone <- struct{}{}
			}()
		case <-pongDone:
			pinging = false
		case <-pongFailed:
			go c.shutdown(ReasonPongTimeout, statusGoingAway, "ping timeout")
			return
		}
	}
}

// disconnect runs the disconnect integration for id (best effort, logged).
func (g *Gateway) disconnect(id string) {
	if g.opts.DisconnectURL == "" {
		return
	}
	resp, body, err := g.integrate(context.Background(), g.opts.DisconnectURL, id, g.opts.DisconnectTimeout, nil, nil)
	switch {
	case err != nil:
		g.integrationFailures.Add(1)
		g.opts.Log.Error("disconnect integration failed", "connection_id", id, "url", g.opts.DisconnectURL, "err", err)
	case resp.StatusCode/100 != 2:
		g.integrationFailures.Add(1)
		g.opts.Log.Error("disconnect integration refused", "connection_id", id, "status", resp.StatusCode, "body", string(body))
	}
}

// post writes data to c as one text message in frames of at most MaxFrameBytes.
func (c *conn) post(data []byte) error {
	o := c.g.opts
	ctx, cancel := context.WithTimeout(c.ctx, o.WriteTimeout)
	defer cancel()
	var err error
	if len(data) <= o.MaxFrameBytes {
		err = c.ws.Write(ctx, websocket.MessageText, data)
	} else {
		err = writeFragmented(ctx, c.ws, data, o.MaxFrameBytes)
	}
	if err != nil {
		go c.shutdown(ReasonWriteFailed, statusInternal, "write failed")
		return err
	}
	c.touch()
	c.g.posted.Add(1)
	return nil
}

// writeFragmented writes data as one text message, one frame per chunk of at most frame bytes
// (and the library's empty final frame).
func writeFragmented(ctx context.Context, ws *websocket.Conn, data []byte, frame int) error {
	w, err := ws.Writer(ctx, websocket.MessageText)
	if err != nil {
		return err
	}
	for len(data) > 0 {
		n := min(frame, len(data))
		if _, err := w.Write(data[:n]); err != nil {
			_ = w.Close()
			return err
		}
		data = data[n:]
	}
	return w.Close()
}

// guardedWriter hands the WebSocket library a connection whose reads go through a frameGuard.
type guardedWriter struct {
	http.ResponseWriter
	maxFrame, maxMessage int64
	onHijack             func()               // called once the 101 is committed, before the connection is taken over
	onTooBig             func(frameSize bool) // called once, when the client goes over a limit
	guard                *frameGuard
}

// Hijack takes over the connection, keeping bytes the HTTP server had already buffered.
func (w *guardedWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	w.onHijack()
	nc, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	buffered, _ := brw.Reader.Peek(brw.Reader.Buffered())
	w.guard = &frameGuard{Conn: nc, r: io.MultiReader(bytes.NewReader(bytes.Clone(buffered)), nc),
		maxFrame: w.maxFrame, maxMessage: w.maxMessage, onTooBig: w.onTooBig}
	brw.Reader.Reset(w.guard)
	return w.guard, brw, nil
}

// frameGuard is the server's side of a client connection: it follows the client's frame headers
// (RFC 6455 §5.2) in the byte stream and enforces API Gateway's limits the library cannot (it
// limits only whole messages): from the first data frame over maxFrame bytes, or that takes its
// message over maxMessage bytes, it calls onTooBig (which closes with 1009) and drops that frame
// and every later data frame, while control frames (the client's answer to the close) pass. So the
// close handshake completes and the client reads its 1009 before the TCP connection ends.
type frameGuard struct {
	net.Conn
	r                    io.Reader
	maxFrame, maxMessage int64
	onTooBig             func(frameSize bool)

	in        [32 << 10]byte // what was read from the connection
	buf       []byte         // the bytes of in that are handed on
	out       []byte         // what is left of buf to hand to the library
	hdr       [maxFrameHeader]byte
	hn        int   // header bytes collected
	remaining int64 // payload bytes of the current frame still to come
	passing   bool  // the current frame's payload is handed on
	message   int64 // payload bytes of the current message so far
	over      bool  // a limit was passed: data frames are dropped from here on
	err       error
}

// Read hands on the bytes of the frames within the limits.
func (f *frameGuard) Read(p []byte) (int, error) {
	for len(f.out) == 0 {
		if f.err != nil {
			return 0, f.err
		}
		n, err := f.r.Read(f.in[:])
		f.buf = f.filter(f.in[:n], f.buf[:0]) // f.out was empty: buf is free again
		f.out, f.err = f.buf, err
	}
	n := copy(p, f.out)
	f.out = f.out[n:]
	return n, nil
}

// filter appends to dst the bytes of b to hand on.
func (f *frameGuard) filter(b, dst []byte) []byte {
	for i := 0; i < len(b); {
		if f.remaining > 0 {
			k := int(min(f.remaining, int64(len(b)-i)))
			if f.passing {
				dst = append(dst, b[i:i+k]...)
			}
			i += k
			f.remaining -= int64(k)
			continue
		}
		f.hdr[f.hn] = b[i]
		f.hn++
		i++
		need := headerLen(f.hdr[:f.hn])
		if need == 0 || f.hn < need {
			continue // a header that goes on in the next read is handed on once complete
		}
		h := f.hdr[:f.hn]
		f.hn = 0
		length := payloadLen(h)
		control := h[0]&0x0f >= 0x8
		if !control {
			if h[0]&0x0f != 0 { // text or binary: a new message
				f.message = 0
			}
			f.message += length
			if !f.over && (length > f.maxFrame || f.message > f.maxMessage) {
				f.over = true
				f.onTooBig(length > f.maxFrame)
			}
		}
		f.passing = !f.over || control
		f.remaining = length
		if f.passing {
			dst = append(dst, h...)
		}
	}
	return dst
}

// headerLen is the length of the frame header h begins, or 0 while h is too short to tell.
func headerLen(h []byte) int {
	if len(h) < 2 {
		return 0
	}
	n := 2
	switch h[1] & 0x7f {
	case 126:
		n += 2
	case 127:
		n += 8
	}
	if h[1]&0x80 != 0 {
		n += 4 // masking key
	}
	return n
}

// payloadLen is the payload length of a complete frame header.
func payloadLen(h []byte) int64 {
	switch l := h[1] & 0x7f; l {
	case 126:
		return int64(h[2])<<8 | int64(h[3])
	case 127:
		var v int64
		for _, b := range h[2:10] {
			v = v<<8 | int64(b)
		}
		return v & (1<<63 - 1)
	default:
		return int64(l)
	}
}
