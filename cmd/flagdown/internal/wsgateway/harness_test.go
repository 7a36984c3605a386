package wsgateway_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/coder/websocket"

	"github.com/flagdown/flagdown/cmd/flagdown/internal/wsgateway"
	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/internalauth"
	"github.com/flagdown/flagdown/shared/push"
)

const (
	region    = "eu-west-3"
	keyID     = "AKIDLOCALGATEWAY"
	secret    = "local-gateway-test-secret"
	clientJWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJkcml2ZXItNyJ9.c2lnbmF0dXJl"
	clientUA  = "flagdown-driver-app/3.1 (test)"
	wait      = 10 * time.Second // generous: a shared, noisy machine
)

// call is one integration request the gateway made.
type call struct {
	header http.Header
	body   []byte
}

// integrations is a real HTTP server standing for the notify function's three routes.
type integrations struct {
	srv                             *httptest.Server
	keys                            *internalauth.Tokens
	connects, messages, disconnects chan call

	mu            sync.Mutex
	connectStatus int
	connectBody   string
	connectGate   chan struct{} // when set, connect answers only after it is closed
}

func newIntegrations(t *testing.T) *integrations {
	t.Helper()
	keys, err := internalauth.ParseTokens("internal-token-for-tests-0123456789abcdef")
	if err != nil {
		t.Fatal(err)
	}
	in := &integrations{keys: keys, connects: make(chan call, 256), messages: make(chan call, 256), disconnects: make(chan call, 256), connectStatus: 200}
	mux := http.NewServeMux()
	record := func(ch chan call) func(http.ResponseWriter, *http.Request) call {
		return func(w http.ResponseWriter, r *http.Request) call {
			b, _ := io.ReadAll(r.Body)
			c := call{header: r.Header.Clone(), body: b}
			ch <- c
			return c
		}
	}
	connect, message, disconnect := record(in.connects), record(in.messages), record(in.disconnects)
	mux.HandleFunc("POST /function/notify/connect", func(w http.ResponseWriter, r *http.Request) {
		connect(w, r)
		in.mu.Lock()
		status, body, gate := in.connectStatus, in.connectBody, in.connectGate
		in.mu.Unlock()
		if gate != nil {
			<-gate
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	})
	mux.HandleFunc("POST /function/notify/message", func(w http.ResponseWriter, r *http.Request) { message(w, r) })
	mux.HandleFunc("POST /function/notify/disconnect", func(w http.ResponseWriter, r *http.Request) { disconnect(w, r) })
	in.srv = httptest.NewServer(mux)
	t.Cleanup(in.srv.Close)
	return in
}

func (in *integrations) refuse(status int, body string) {
	in.mu.Lock()
	in.connectStatus, in.connectBody = status, body
	in.mu.Unlock()
}

// next returns the next call of ch, failing the test after wait.
func next(t *testing.T, ch chan call, what string) call {
	t.Helper()
	select {
	case c := <-ch:
		return c
	case <-time.After(wait):
		t.Fatalf("no %s call within %s", what, wait)
		return call{}
	}
}

// none fails the test if ch holds a call.
func none(t *testing.T, ch chan call, what string) {
	t.Helper()
	select {
	case c := <-ch:
		t.Fatalf("unexpected %s call for %s", what, c.header.Get(wsgateway.HeaderConnectionID))
	default:
	}
}

// env is a gateway served on a real listener with its integrations and a management client.
type env struct {
	t    *testing.T
	in   *integrations
	gw   *wsgateway.Gateway
	srv  *httptest.Server
	mgmt *push.Management
}

func newEnv(t *testing.T, tune func(*wsgateway.Options)) *env {
	t.Helper()
	in := newIntegrations(t)
	o := wsgateway.Options{
		Region: region, AccessKeyID: keyID, SecretAccessKey: secret,
		ConnectURL:    in.srv.URL + "/function/notify/connect",
		DisconnectURL: in.srv.URL + "/function/notify/disconnect",
		MessageURL:    in.srv.URL + "/function/notify/message",
		Authorize:     in.keys.SetBearer,
		CloseTimeout:  time.Second,
		Log:           slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if testing.Verbose() {
		o.Log = slog.Default()
	}
	if tune != nil {
		tune(&o)
	}
	gw, err := wsgateway.New(o)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /ws", gw.ClientHandler())
	mux.Handle("/"+gw.Stage()+"/@connections/", gw.ManagementHandler())
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		_ = gw.Close()
		srv.Close()
	})
	mgmt, err := push.NewManagement(srv.URL+"/"+gw.Stage(), region, credentials.NewStaticCredentialsProvider(keyID, secret, ""), srv.Client(),
		push.WithRetry(1, 0, 0))
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, in: in, gw: gw, srv: srv, mgmt: mgmt}
}

// dial opens a client socket with the client's JWT and returns it with its connection id (from
// the connect call, whose headers it checks).
func (e *env) dial() (*websocket.Conn, string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	h := http.Header{}
	h.Set("Authorization", "Bearer "+clientJWT)
	h.Set("User-Agent", clientUA)
	ws, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(e.srv.URL, "http")+"/ws", &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		e.t.Fatalf("dial: %v (response %v)", err, resp)
	}
	ws.SetReadLimit(1 << 20)
	e.t.Cleanup(func() { _ = ws.CloseNow() })
	c := next(e.t, e.in.connects, "connect")
	e.checkInternal(c)
	if got := c.header.Get(wsgateway.HeaderClientToken); got != clientJWT {
		e.t.Errorf("connect %s = %q, want the client's JWT", wsgateway.HeaderClientToken, got)
	}
	if got := c.header.Get("X-Forwarded-For"); got != "127.0.0.1" {
		e.t.Errorf("connect X-Forwarded-For = %q, want 127.0.0.1", got)
	}
	if got := c.header.Get("User-Agent"); got != clientUA {
		e.t.Errorf("connect User-Agent = %q, want %q", got, clientUA)
	}
	return ws, c.header.Get(wsgateway.HeaderConnectionID)
}

// checkInternal checks an integration call carries the internal credential and a connection id.
func (e *env) checkInternal(c call) {
	e.t.Helper()
	r := &http.Request{Header: c.header}
	if err := e.in.keys.VerifyRequest(r); err != nil {
		e.t.Errorf("integration call without the internal credential: %v", err)
	}
	if id := c.header.Get(wsgateway.HeaderConnectionID); len(id) != 16 {
		e.t.Errorf("connection id %q: want 16 characters", id)
	}
}

// waitFor polls cond until it holds, failing after wait.
func (e *env) waitFor(what string, cond func() bool) {
	e.t.Helper()
	testkit.Eventually(e.t, wait, func() (bool, string) {
		return cond(), fmt.Sprintf("%s (stats %+v)", what, e.gw.Stats())
	})
}

// signedRequest is a management request signed with key id and secret at signingTime.
func (e *env) signedRequest(method, id string, body []byte, akid, sk, reg string, signingTime time.Time) *http.Request {
	e.t.Helper()
	u := e.srv.URL + "/" + e.gw.Stage() + "/@connections/" + escapeID(id)
	req, err := http.NewRequest(method, u, bytes.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	if akid == "" {
		return req
	}
	sum := sha256.Sum256(body)
	err = v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: akid, SecretAccessKey: sk}, req,
		hex.EncodeToString(sum[:]), "execute-api", reg, signingTime)
	if err != nil {
		e.t.Fatal(err)
	}
	return req
}

// escapeID escapes every byte of id that is not unreserved (RFC 3986), as the AWS SDKs do.
func escapeID(id string) string {
	var b strings.Builder
	for i := 0; i < len(id); i++ {
		c := id[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-_.~", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// send does req and returns the status, the error type header and the body.
func (e *env) send(req *http.Request) (int, string, []byte) {
	e.t.Helper()
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("x-amzn-ErrorType"), b
}

// readResult is the end of a client's read loop.
type readResult struct {
	msgs [][]byte
	err  error
}

// readAll reads ws until it fails and sends what it read.
func readAll(ws *websocket.Conn) <-chan readResult {
	out := make(chan readResult, 1)
	go func() {
		var r readResult
		for {
			_, b, err := ws.Read(context.Background())
			if err != nil {
				r.err = err
				out <- r
				return
			}
			r.msgs = append(r.msgs, b)
		}
	}()
	return out
}

func closed(t *testing.T, ch <-chan readResult) readResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(wait):
		t.Fatalf("socket still open after %s", wait)
		return readResult{}
	}
}

// rawClient is a WebSocket client written by hand on a TCP connection, to see frames and to play
// a peer that stops answering.
type rawClient struct {
	c  net.Conn
	br *bufio.Reader
}

func (e *env) dialRaw() (*rawClient, string) {
	e.t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(e.srv.URL, "http://"))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = c.Close() })
	fmt.Fprintf(c, "GET /ws HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"+
		"Authorization: Bearer %s\r\nUser-Agent: %s\r\n\r\n", c.RemoteAddr(), clientJWT, clientUA)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		e.t.Fatalf("raw handshake: %s", resp.Status)
	}
	id := next(e.t, e.in.connects, "connect").header.Get(wsgateway.HeaderConnectionID)
	return &rawClient{c: c, br: br}, id
}

// frame is one server frame.
type frame struct {
	fin     bool
	opcode  byte
	payload []byte
}

func (r *rawClient) readFrame() (frame, error) {
	var h [2]byte
	if _, err := io.ReadFull(r.br, h[:]); err != nil {
		return frame{}, err
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var b [2]byte
		if _, err := io.ReadFull(r.br, b[:]); err != nil {
			return frame{}, err
		}
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		if _, err := io.ReadFull(r.br, b[:]); err != nil {
			return frame{}, err
		}
		n = binary.BigEndian.Uint64(b[:])
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r.br, p); err != nil {
		return frame{}, err
	}
	return frame{fin: h[0]&0x80 != 0, opcode: h[0] & 0x0f, payload: p}, nil
}
