package main

import (
	"context"
	"net/http"
	"testing"

	"github.com/coder/websocket"

	"github.com/flagdown/flagdown/shared/push"
)

// TestDevPlatformServesTheWebSocketGateway: flagdown dev points FLAGDOWN_PUSH_ENDPOINT at its own
// management API, the functions' client (signed with the key pair flagdown dev was given or
// generated) is accepted by it, unsigned calls are not, and a client
// socket reaches the connect integration, which decides.
func TestDevPlatformServesTheWebSocketGateway(t *testing.T) {
	p := startTestPlatform(t)
	cfg := p.deps.Config
	if want := "http://" + p.Addr() + "/local"; cfg.PushEndpoint != want {
		t.Fatalf("PushEndpoint = %q, want %q", cfg.PushEndpoint, want)
	}
	ctx := context.Background()
	m := p.deps.PushManagement
	if m == nil || m.Endpoint() != cfg.PushEndpoint {
		t.Fatalf("the functions' management client is %v, want one for %s", m, cfg.PushEndpoint)
	}
	if _, err := m.GetConnection(ctx, "NoSuchConnectio="); !push.IsGone(err) {
		t.Errorf("signed GET of an unknown connection: %v, want 410 GoneException", err)
	}
	resp, err := http.Get(cfg.PushEndpoint + "/@connections/NoSuchConnectio%3D")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get(push.HeaderErrorType) != push.ErrMissingAuthenticationToken {
		t.Errorf("unsigned GET: %d %s, want 403 %s", resp.StatusCode, resp.Header.Get(push.HeaderErrorType), push.ErrMissingAuthenticationToken)
	}
	// No client token: the connect integration refuses, so does the handshake.
	_, wsResp, err := websocket.Dial(ctx, "ws://"+p.Addr()+"/ws", nil)
	if err == nil || wsResp == nil || wsResp.StatusCode/100 != 4 {
		t.Errorf("handshake without a token: %v %v, want a 4xx refusal", wsResp, err)
	}
	if s := p.push.Stats(); s.Refused != 1 || s.Accepted != 0 || s.Open != 0 {
		t.Errorf("stats %+v, want one refused handshake and nothing open", s)
	}
}
