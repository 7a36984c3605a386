package wsgateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/flagdown/flagdown/cmd/flagdown/internal/wsgateway"
	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/push"
)

func TestPostArrivesOnlyOnItsSocket(t *testing.T) {
	e := newEnv(t, nil)
	a, idA := e.dial()
	b, idB := e.dial()
	if idA == idB {
		t.Fatalf("two sockets share the id %s", idA)
	}
	msgA := []byte(`{"type":"offer","ride_id":"r-1","pickup":{"lat":40.75,"lng":-73.99},"note":"ünïcode ✓"}`)
	msgB := []byte(`{"type":"ride_status","status":"ACCEPTED"}`)
	ctx := context.Background()
	if err := e.mgmt.PostToConnection(ctx, idA, msgA); err != nil {
		t.Fatal(err)
	}
	if err := e.mgmt.PostToConnection(ctx, idB, msgB); err != nil {
		t.Fatal(err)
	}
	readCtx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	typ, got, err := a.Read(readCtx)
	if err != nil || typ != websocket.MessageText || !bytes.Equal(got, msgA) {
		t.Fatalf("socket A read %v %q %v, want text %q", typ, got, err, msgA)
	}
	// B's first message is its own: A's never reached it.
	if _, got, err := b.Read(readCtx); err != nil || !bytes.Equal(got, msgB) {
		t.Fatalf("socket B read %q %v, want %q", got, err, msgB)
	}
	if s := e.gw.Stats(); s.MessagesPosted != 2 || s.Open != 2 || s.Accepted != 2 {
		t.Errorf("stats %+v, want 2 posted, 2 open, 2 accepted", s)
	}
}

func TestClientMessageGoesToTheMessageIntegration(t *testing.T) {
	e := newEnv(t, nil)
	ws, id := e.dial()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for _, m := range []string{`{"action":"sync"}`, `{"action":"sync","n":2}`} {
		if err := ws.Write(ctx, websocket.MessageText, []byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{`{"action":"sync"}`, `{"action":"sync","n":2}`} {
		c := next(t, e.in.messages, "message")
		e.checkInternal(c)
		if got := c.header.Get(wsgateway.HeaderConnectionID); got != id {
			t.Errorf("message call for %q, want %q", got, id)
		}
		if string(c.body) != want || c.header.Get("Content-Type") != "application/json" {
			t.Errorf("message call body %q content-type %q, want %q application/json", c.body, c.header.Get("Content-Type"), want)
		}
	}
	if s := e.gw.Stats(); s.MessagesReceived != 2 {
		t.Errorf("stats %+v, want 2 received", s)
	}
}

func TestManagementRefusesBadSignatures(t *testing.T) {
	e := newEnv(t, nil)
	_, id := e.dial()
	now := time.Now()
	body := []byte(`{"type":"ping"}`)
	tampered := e.signedRequest(http.MethodPost, id, body, keyID, secret, region, now)
	tampered.Body = io.NopCloser(strings.NewReader(`{"type":"pong"}`))
	otherPath := e.signedRequest(http.MethodPost, id, body, keyID, secret, region, now)
	otherPath.URL.RawPath, otherPath.URL.Path = "", "/"+e.gw.Stage()+"/@connections/other="
	noAuth := e.signedRequest(http.MethodPost, id, body, keyID, secret, region, now)
	noAuth.Header.Del("Authorization")
	incomplete := e.signedRequest(http.MethodPost, id, body, keyID, secret, region, now)
	incomplete.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential="+keyID+"/"+now.UTC().Format("20060102")+"/"+region+"/execute-api/aws4_request")
	for _, tc := range []struct {
		name     string
		req      *http.Request
		wantType string
		wantMsg  string
	}{
		{"unsigned", e.signedRequest(http.MethodPost, id, body, "", "", "", now), push.ErrMissingAuthenticationToken, "Missing Authentication Token"},
		{"authorization removed", noAuth, push.ErrMissingAuthenticationToken, "Missing Authentication Token"},
		{"incomplete authorization", incomplete, push.ErrIncompleteSignature, "requires"},
		{"wrong secret", e.signedRequest(http.MethodPost, id, body, keyID, "not-the-secret", region, now), push.ErrInvalidSignature, "does not match"},
		{"unknown access key", e.signedRequest(http.MethodPost, id, body, "AKIDSOMEONEELSE", secret, region, now), push.ErrAccessDenied, "security token included in the request is invalid"},
		{"other region", e.signedRequest(http.MethodPost, id, body, keyID, secret, "us-east-1", now), push.ErrInvalidSignature, "region"},
		{"stale date", e.signedRequest(http.MethodPost, id, body, keyID, secret, region, now.Add(-6*time.Minute)), push.ErrInvalidSignature, "Signature expired"},
		{"future date", e.signedRequest(http.MethodPost, id, body, keyID, secret, region, now.Add(6*time.Minute)), push.ErrInvalidSignature, "Signature not yet current"},
		{"body changed after signing", tampered, push.ErrInvalidSignature, "does not match"},
		{"path changed after signing", otherPath, push.ErrInvalidSignature, "does not match"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, typ, b := e.send(tc.req)
			var msg struct{ Message string }
			_ = json.Unmarshal(b, &msg)
			if status != http.StatusForbidden || typ != tc.wantType || !strings.Contains(msg.Message, tc.wantMsg) {
				t.Errorf("got %d %s %s, want 403 %s with %q", status, typ, b, tc.wantType, tc.wantMsg)
			}
		})
	}
	// The same request, correctly signed and within the window, goes through.
	if status, typ, b := e.send(e.signedRequest(http.MethodPost, id, body, keyID, secret, region, now.Add(-4*time.Minute))); status != 200 {
		t.Errorf("signed 4 minutes ago: got %d %s %s, want 200", status, typ, b)
	}
	if s := e.gw.Stats(); s.MessagesPosted != 1 {
		t.Errorf("stats %+v, want exactly the one signed post", s)
	}
}

func TestConnectionIDsWithPlusSlashAndEquals(t *testing.T) {
	e := newEnv(t, nil)
	var ids []string
	var socks []*websocket.Conn
	seenPlus, seenSlash := false, false
	// About one id in five holds a '+', one in five a '/'; every id ends with '='.
	for i := 0; i < 96 && !(seenPlus && seenSlash); i++ {
		ws, id := e.dial()
		if !strings.HasSuffix(id, "=") {
			t.Errorf("id %q does not end with '=' like API Gateway's", id)
		}
		hasPlus, hasSlash := strings.Contains(id, "+"), strings.Contains(id, "/")
		if hasPlus || hasSlash {
			ids, socks = append(ids, id), append(socks, ws)
			seenPlus, seenSlash = seenPlus || hasPlus, seenSlash || hasSlash
		} else {
			_ = ws.Close(websocket.StatusNormalClosure, "")
		}
	}
	if !seenPlus || !seenSlash {
		t.Fatalf("no id with both characters after 96 sockets: %v", ids)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for i, id := range ids {
		msg := []byte(`{"to":"` + id + `"}`)
		if err := e.mgmt.PostToConnection(ctx, id, msg); err != nil {
			t.Fatalf("post to %q: %v", id, err)
		}
		if _, got, err := socks[i].Read(ctx); err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("socket %q read %q %v, want %q", id, got, err, msg)
		}
		c, err := e.mgmt.GetConnection(ctx, id)
		if err != nil || c.Identity.UserAgent != clientUA {
			t.Fatalf("get %q: %+v %v", id, c, err)
		}
	}
}

func TestGoneAfterTheClientClosed(t *testing.T) {
	e := newEnv(t, nil)
	ws, id := e.dial()
	if err := ws.Close(websocket.StatusNormalClosure, "bye"); err != nil {
		t.Fatal(err)
	}
	d := next(t, e.in.disconnects, "disconnect")
	e.checkInternal(d)
	if got := d.header.Get(wsgateway.HeaderConnectionID); got != id {
		t.Fatalf("disconnect for %q, want %q", got, id)
	}
	ctx := context.Background()
	if err := e.mgmt.PostToConnection(ctx, id, []byte("late")); !push.IsGone(err) {
		t.Errorf("post after close: %v, want 410 GoneException", err)
	}
	if _, err := e.mgmt.GetConnection(ctx, id); !push.IsGone(err) {
		t.Errorf("get after close: %v, want 410", err)
	}
	if err := e.mgmt.DeleteConnection(ctx, id); !push.IsGone(err) {
		t.Errorf("delete after close: %v, want 410", err)
	}
	if err := e.mgmt.PostToConnection(ctx, "NeverWasAnId0A==", []byte("x")); !push.IsGone(err) {
		t.Errorf("post to an unknown id: %v, want 410", err)
	}
	e.waitFor("connection ended", func() bool { return e.gw.Stats().Open == 0 })
	if s := e.gw.Stats(); s.Closed[wsgateway.ReasonClient] != 1 {
		t.Errorf("stats %+v, want one closed by the client", s)
	}
}

func TestDeleteClosesTheSocketAndFiresDisconnect(t *testing.T) {
	e := newEnv(t, nil)
	ws, id := e.dial()
	keep, keepID := e.dial()
	reads := readAll(ws)
	if err := e.mgmt.DeleteConnection(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	r := closed(t, reads)
	if websocket.CloseStatus(r.err) != websocket.StatusNormalClosure {
		t.Errorf("socket ended with %v, want close 1000", r.err)
	}
	if got := next(t, e.in.disconnects, "disconnect").header.Get(wsgateway.HeaderConnectionID); got != id {
		t.Errorf("disconnect for %q, want %q", got, id)
	}
	if err := e.mgmt.PostToConnection(context.Background(), id, []byte("x")); !push.IsGone(err) {
		t.Errorf("post after delete: %v, want 410", err)
	}
	// The other socket is untouched.
	if err := e.mgmt.PostToConnection(context.Background(), keepID, []byte("still here")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, got, err := keep.Read(ctx); err != nil || string(got) != "still here" {
		t.Errorf("other socket read %q %v", got, err)
	}
	e.waitFor("deleted connection ended", func() bool { return e.gw.Stats().Closed[wsgateway.ReasonDeleted] == 1 })
}

func TestGetConnectionJSON(t *testing.T) {
	e := newEnv(t, nil)
	before := time.Now().Add(-time.Second)
	ws, id := e.dial()
	status, _, b := e.send(e.signedRequest(http.MethodGet, id, nil, keyID, secret, region, time.Now()))
	if status != 200 {
		t.Fatalf("GET: %d %s", status, b)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	if len(raw) != 3 || raw["connectedAt"] == nil || raw["identity"] == nil || raw["lastActiveAt"] == nil {
		t.Errorf("GET body %s: want exactly connectedAt, identity, lastActiveAt", b)
	}
	var ident map[string]string
	if err := json.Unmarshal(raw["identity"], &ident); err != nil || len(ident) != 2 || ident["sourceIp"] != "127.0.0.1" || ident["userAgent"] != clientUA {
		t.Errorf("identity %s: want sourceIp 127.0.0.1 and userAgent %q", raw["identity"], clientUA)
	}
	c, err := e.mgmt.GetConnection(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if c.ConnectedAt.Before(before) || c.ConnectedAt.After(time.Now()) || c.LastActiveAt.Before(c.ConnectedAt.Truncate(time.Millisecond)) {
		t.Errorf("connection %+v: times out of order", c)
	}
	// A message either way moves lastActiveAt: send it once the clock (ms) has passed the last one.
	testkit.Eventually(t, wait, func() (bool, string) {
		return time.Now().Truncate(time.Millisecond).After(c.LastActiveAt), "the clock passes lastActiveAt"
	})
	if err := ws.Write(context.Background(), websocket.MessageText, []byte(`{"action":"sync"}`)); err != nil {
		t.Fatal(err)
	}
	next(t, e.in.messages, "message")
	c2, err := e.mgmt.GetConnection(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if !c2.LastActiveAt.After(c.LastActiveAt) || !c2.ConnectedAt.Equal(c.ConnectedAt) {
		t.Errorf("after a message: %+v, before %+v", c2, c)
	}
}

func TestMessageSizeLimits(t *testing.T) {
	e := newEnv(t, nil)
	rc, id := e.dialRaw()

	// The client refuses 128 KiB + 1 before sending; the server refuses it sent raw.
	over := bytes.Repeat([]byte("x"), push.MaxMessageBytes+1)
	if err := e.mgmt.PostToConnection(context.Background(), id, over); !push.IsPayloadTooLarge(err) {
		t.Errorf("client: %v, want 413 PayloadTooLargeException", err)
	}
	status, typ, _ := e.send(e.signedRequest(http.MethodPost, id, over, keyID, secret, region, time.Now()))
	if status != http.StatusRequestEntityTooLarge || typ != push.ErrPayloadTooLarge {
		t.Errorf("server: %d %s, want 413 %s", status, typ, push.ErrPayloadTooLarge)
	}

	// 100 KiB arrives whole, as one text message in frames of at most 32 KiB.
	msg := make([]byte, 100<<10)
	for i := range msg {
		msg[i] = 'a' + byte(i%26)
	}
	posted := make(chan error, 1)
	go func() { posted <- e.mgmt.PostToConnection(context.Background(), id, msg) }()
	var got []byte
	frames := 0
	for {
		f, err := rc.readFrame()
		if err != nil {
			t.Fatalf("after %d frames: %v", frames, err)
		}
		if f.opcode == 0x9 { // a ping
			continue
		}
		if frames == 0 && f.opcode != 0x1 || frames > 0 && f.opcode != 0x0 {
			t.Fatalf("frame %d has opcode %d", frames, f.opcode)
		}
		if len(f.payload) > 32<<10 {
			t.Fatalf("frame %d carries %d bytes, over 32 KiB", frames, len(f.payload))
		}
		frames++
		got = append(got, f.payload...)
		if f.fin {
			break
		}
	}
	if err := <-posted; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, msg) || frames < 4 {
		t.Errorf("got %d bytes in %d frames, want the %d bytes in at least 4 frames", len(got), frames, len(msg))
	}
}

func TestClientFrameAndMessageLimits(t *testing.T) {
	e := newEnv(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()

	// 100 KiB in frames of 32 KiB is one message for the integration.
	ws, _ := e.dial()
	big := bytes.Repeat([]byte("y"), 100<<10)
	w, err := ws.Writer(ctx, websocket.MessageText)
	if err != nil {
		t.Fatal(err)
	}
	for rest := big; len(rest) > 0; rest = rest[min(len(rest), 32<<10):] {
		if _, err := w.Write(rest[:min(len(rest), 32<<10)]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if c := next(t, e.in.messages, "message"); !bytes.Equal(c.body, big) {
		t.Errorf("message integration got %d bytes, want %d", len(c.body), len(big))
	}

	// One frame over 32 KiB closes the socket with 1009.
	reads := readAll(ws)
	if err := ws.Write(ctx, websocket.MessageText, bytes.Repeat([]byte("z"), 32<<10+1)); err != nil {
		t.Fatal(err)
	}
	if r := closed(t, reads); websocket.CloseStatus(r.err) != websocket.StatusMessageTooBig {
		t.Errorf("oversized frame: socket ended with %v, want 1009", r.err)
	}
	next(t, e.in.disconnects, "disconnect")

	// A message over 128 KiB in small frames closes it with 1009 too.
	ws2, _ := e.dial()
	reads2 := readAll(ws2)
	w2, err := ws2.Writer(ctx, websocket.MessageText)
	if err != nil {
		t.Fatal(err)
	}
	for sent := 0; sent <= push.MaxMessageBytes; sent += 16 << 10 {
		if _, err := w2.Write(bytes.Repeat([]byte("w"), 16<<10)); err != nil {
			break // the server may close while we write
		}
	}
	_ = w2.Close()
	if r := closed(t, reads2); websocket.CloseStatus(r.err) != websocket.StatusMessageTooBig {
		t.Errorf("oversized message: socket ended with %v, want 1009", r.err)
	}
	next(t, e.in.disconnects, "disconnect")
	none(t, e.in.messages, "message")
	e.waitFor("both ended", func() bool { return e.gw.Stats().Open == 0 })
	s := e.gw.Stats()
	if s.Closed[wsgateway.ReasonFrameTooBig] != 1 || s.Closed[wsgateway.ReasonMessageTooBig] != 1 {
		t.Errorf("stats %+v, want one frame_too_big and one message_too_big", s)
	}
}

func TestIdleSocketIsReaped(t *testing.T) {
	const idle = time.Second
	e := newEnv(t, func(o *wsgateway.Options) { o.IdleTimeout = idle })
	ws, id := e.dial()
	reads := readAll(ws)
	// A message restarts the idle clock: the reap comes at least IdleTimeout after it. It is sent
	// 50 ms after the dial (part of the test: a reap timed from the dial would come that much early).
	time.Sleep(50 * time.Millisecond)
	sent := time.Now()
	if err := ws.Write(context.Background(), websocket.MessageText, []byte(`{"action":"sync"}`)); err != nil {
		t.Fatal(err)
	}
	r := closed(t, reads)
	if reapedAfter := time.Since(sent); reapedAfter < idle {
		t.Errorf("reaped %s after the last message, before the idle timeout of %s", reapedAfter, idle)
	}
	next(t, e.in.messages, "message")
	var ce websocket.CloseError
	if !errors.As(r.err, &ce) || ce.Code != websocket.StatusGoingAway || ce.Reason != "idle timeout" {
		t.Errorf("idle socket ended with %v, want 1001 idle timeout", r.err)
	}
	if got := next(t, e.in.disconnects, "disconnect").header.Get(wsgateway.HeaderConnectionID); got != id {
		t.Errorf("disconnect for %q, want %q", got, id)
	}
	e.waitFor("reaped", func() bool { return e.gw.Stats().Open == 0 })
	if s := e.gw.Stats(); s.Closed[wsgateway.ReasonIdle] != 1 {
		t.Errorf("stats %+v, want one idle reap", s)
	}
}

func TestDeadPeerIsReapedByPingDeadline(t *testing.T) {
	e := newEnv(t, func(o *wsgateway.Options) {
		o.PingInterval, o.PongTimeout, o.CloseTimeout = 100*time.Millisecond, 300*time.Millisecond, 300*time.Millisecond
	})
	start := time.Now()
	rc, id := e.dialRaw() // completes the handshake, then never reads nor answers a ping
	if got := next(t, e.in.disconnects, "disconnect").header.Get(wsgateway.HeaderConnectionID); got != id {
		t.Errorf("disconnect for %q, want %q", got, id)
	}
	if d := time.Since(start); d < 400*time.Millisecond {
		t.Errorf("reaped after %s, before a ping interval plus the pong timeout (400ms)", d)
	}
	e.waitFor("reaped", func() bool { return e.gw.Stats().Open == 0 })
	if s := e.gw.Stats(); s.Closed[wsgateway.ReasonPongTimeout] != 1 {
		t.Errorf("stats %+v, want one pong_timeout reap", s)
	}
	// The server dropped the TCP connection: after the frames it had sent, the peer reads EOF.
	_ = rc.c.SetReadDeadline(time.Now().Add(wait))
	sawPing := false
	for {
		f, err := rc.readFrame()
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !strings.Contains(err.Error(), "reset") {
				t.Errorf("after the reap: %v, want the connection closed", err)
			}
			break
		}
		sawPing = sawPing || f.opcode == 0x9
	}
	if !sawPing {
		t.Error("the server never pinged the silent peer")
	}
	if err := e.mgmt.PostToConnection(context.Background(), id, []byte("x")); !push.IsGone(err) {
		t.Errorf("post after the reap: %v, want 410", err)
	}
}

func TestLivePeerAnswersPingsAndStays(t *testing.T) {
	e := newEnv(t, func(o *wsgateway.Options) {
		o.PingInterval, o.PongTimeout = 20*time.Millisecond, 5*time.Second
		o.MaxConnectionDuration = 600 * time.Millisecond
	})
	start := time.Now()
	ws, _ := e.dial()
	r := closed(t, readAll(ws)) // the reader answers pings
	if d := time.Since(start); d < 600*time.Millisecond {
		t.Errorf("closed after %s, before the maximum duration of 600ms", d)
	}
	var ce websocket.CloseError
	if !errors.As(r.err, &ce) || ce.Code != websocket.StatusGoingAway || ce.Reason != "maximum connection duration reached" {
		t.Errorf("socket ended with %v, want 1001 maximum connection duration reached", r.err)
	}
	next(t, e.in.disconnects, "disconnect")
	e.waitFor("expired", func() bool { return e.gw.Stats().Open == 0 })
	if s := e.gw.Stats(); s.Closed[wsgateway.ReasonMaxDuration] != 1 || s.Closed[wsgateway.ReasonPongTimeout] != 0 {
		t.Errorf("stats %+v, want one max_duration and no pong_timeout", s)
	}
}

// TestTokenInQueryRefused: a token in the upgrade URL (access_token) is refused with 401 before the
// connect integration hears of it; URLs end up in logs.
func TestTokenInQueryRefused(t *testing.T) {
	e := newEnv(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	_, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(e.srv.URL, "http")+"/ws?access_token=browser-token", nil)
	if err == nil {
		t.Fatal("handshake accepted")
	}
	if resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("got %v %v, want 401", resp, err)
	}
	none(t, e.in.connects, "connect")
}

func TestConnectRefusalRefusesTheHandshake(t *testing.T) {
	e := newEnv(t, nil)
	e.in.refuse(http.StatusUnauthorized, `{"error":{"code":"unauthenticated"}}`)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	_, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(e.srv.URL, "http")+"/ws?ticket=browser-ticket", nil)
	if err == nil {
		t.Fatal("handshake accepted")
	}
	if resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("got %v %v, want 401", resp, err)
	}
	b, _ := io.ReadAll(resp.Body)
	if string(b) != `{"error":{"code":"unauthenticated"}}` || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("refusal body %q (%s), want the integration's", b, resp.Header.Get("Content-Type"))
	}
	c := next(t, e.in.connects, "connect")
	if got := c.header.Get(push.HeaderClientTicket); got != "browser-ticket" {
		t.Errorf("ticket from the query: %q", got)
	}
	id := c.header.Get(wsgateway.HeaderConnectionID)
	if err := e.mgmt.PostToConnection(ctx, id, []byte("x")); !push.IsGone(err) {
		t.Errorf("post to a refused connection: %v, want 410", err)
	}
	if err := e.gw.Close(); err != nil { // waits for every handler
		t.Fatal(err)
	}
	none(t, e.in.disconnects, "disconnect")
	if s := e.gw.Stats(); s.Refused != 1 || s.Accepted != 0 || s.Open != 0 {
		t.Errorf("stats %+v, want 1 refused, none accepted or open", s)
	}
}

func TestNotPostableBeforeTheConnectIntegrationAnswered(t *testing.T) {
	e := newEnv(t, nil)
	gate := make(chan struct{})
	e.in.mu.Lock()
	e.in.connectGate = gate
	e.in.mu.Unlock()
	dialed := make(chan *websocket.Conn, 1)
	go func() {
		ws, _, err := websocket.Dial(context.Background(), "ws"+strings.TrimPrefix(e.srv.URL, "http")+"/ws", nil)
		if err != nil {
			t.Error(err)
		}
		dialed <- ws
	}()
	id := next(t, e.in.connects, "connect").header.Get(wsgateway.HeaderConnectionID)
	if err := e.mgmt.PostToConnection(context.Background(), id, []byte("too early")); !push.IsGone(err) {
		t.Errorf("post while connecting: %v, want 410", err)
	}
	close(gate)
	ws := <-dialed
	if ws == nil {
		t.FailNow()
	}
	defer ws.CloseNow()
	if err := e.mgmt.PostToConnection(context.Background(), id, []byte("now")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, got, err := ws.Read(ctx); err != nil || string(got) != "now" {
		t.Errorf("read %q %v, want only the post after the connect", got, err)
	}
}

func TestCloseEndsEverySocket(t *testing.T) {
	e := newEnv(t, nil)
	var reads []<-chan readResult
	for range 3 {
		ws, _ := e.dial()
		reads = append(reads, readAll(ws))
	}
	if err := e.gw.Close(); err != nil {
		t.Fatal(err)
	}
	// Close returned: every disconnect call has been made.
	for range 3 {
		next(t, e.in.disconnects, "disconnect")
	}
	for _, ch := range reads {
		if r := closed(t, ch); websocket.CloseStatus(r.err) != websocket.StatusGoingAway {
			t.Errorf("socket ended with %v, want 1001", r.err)
		}
	}
	s := e.gw.Stats()
	if s.Open != 0 || s.Closed[wsgateway.ReasonShutdown] != 3 {
		t.Errorf("stats %+v, want 0 open and 3 shut down", s)
	}
	_, resp, err := websocket.Dial(context.Background(), "ws"+strings.TrimPrefix(e.srv.URL, "http")+"/ws", nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("dial after Close: %v %v, want 503", resp, err)
	}
}

func TestManySocketsLeaveNothingBehind(t *testing.T) {
	e := newEnv(t, nil)
	const n = 40
	socks := make([]*websocket.Conn, n)
	ids := make([]string, n)
	for i := range socks {
		socks[i], ids[i] = e.dial()
	}
	reads := make([]<-chan readResult, n)
	for i, ws := range socks {
		reads[i] = readAll(ws)
	}
	// Concurrent posts to every socket, three each.
	errs := make(chan error, 3*n)
	for i := range socks {
		for k := range 3 {
			go func() {
				errs <- e.mgmt.PostToConnection(context.Background(), ids[i], []byte(`{"n":`+strconv.Itoa(k)+`}`))
			}()
		}
	}
	for range 3 * n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	e.waitFor("every message read", func() bool { return e.gw.Stats().MessagesPosted == 3*n })
	// Half close themselves, the gateway closes the rest.
	for _, ws := range socks[:n/2] {
		_ = ws.Close(websocket.StatusNormalClosure, "")
	}
	e.waitFor("clients' closes seen", func() bool { return e.gw.Stats().Closed[wsgateway.ReasonClient] == n/2 })
	if err := e.gw.Close(); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for range n {
		got[next(t, e.in.disconnects, "disconnect").header.Get(wsgateway.HeaderConnectionID)] = true
	}
	none(t, e.in.disconnects, "disconnect")
	for i, id := range ids {
		if !got[id] {
			t.Errorf("no disconnect for socket %d (%s)", i, id)
		}
	}
	for i, ch := range reads {
		if r := closed(t, ch); len(r.msgs) != 3 {
			t.Errorf("socket %d read %d messages, want 3", i, len(r.msgs))
		}
	}
	s := e.gw.Stats()
	if s.Open != 0 || s.Accepted != n || s.Closed[wsgateway.ReasonClient]+s.Closed[wsgateway.ReasonShutdown] != n {
		t.Errorf("stats %+v, want 0 open and all %d accounted for", s, n)
	}
}
