package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/auth"
)

// TestWebSocketCredentials runs the real platform (the local WebSocket gateway, devices and
// notify) and checks how a phone may open a socket: a token in the URL's query string is refused
// (URLs end up in logs); a connect ticket minted by an authenticated POST
// /function/devices/ticket opens one socket and only one; and a socket is closed when the token
// it was opened with expires.
func TestWebSocketCredentials(t *testing.T) {
	p := startTestPlatform(t)
	cfg := p.deps.Config
	mint := func(sub string, ttl time.Duration) string {
		tok, err := auth.Mint([]byte(cfg.JWTSecret), cfg.JWTIssuer, cfg.JWTAudience, auth.Identity{Subject: sub, Role: auth.RoleRider}, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	dialURL := func(q url.Values) (*websocket.Conn, *http.Response, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return websocket.Dial(ctx, "ws://"+p.Addr()+"/ws?"+q.Encode(), nil)
	}
	ticketFor := func(tok string) (int, string) {
		var out struct {
			Ticket    string    `json:"ticket"`
			ExpiresAt time.Time `json:"expires_at"`
		}
		req, _ := http.NewRequest(http.MethodPost, "http://"+p.Addr()+"/function/devices/ticket", strings.NewReader("{}"))
		req.Header.Set("Content-Type", "application/json")
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		code := resp.StatusCode
		if code == http.StatusOK {
			if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
				t.Fatalf("ticket answer: %v", err)
			}
		}
		if code == http.StatusOK && (out.Ticket == "" || time.Until(out.ExpiresAt) > 31*time.Second) {
			t.Errorf("ticket answer %+v: want a ticket valid 30 s at most", out)
		}
		return code, out.Ticket
	}

	t.Run("TokenInQueryStringRefused", func(t *testing.T) {
		c, resp, err := dialURL(url.Values{"access_token": {mint("r-ws-query", time.Hour)}})
		if err == nil {
			c.Close(websocket.StatusNormalClosure, "")
			t.Fatal("a socket opened with the token in the query string")
		}
		if resp == nil || resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("refusal %v, want 401", resp)
		}
	})
	t.Run("TicketOpensOneSocket", func(t *testing.T) {
		tok := mint("r-ws-ticket", time.Hour)
		code, ticket := ticketFor(tok)
		if code != http.StatusOK {
			t.Fatalf("POST /function/devices/ticket answered %d, want 200", code)
		}
		c, _, err := dialURL(url.Values{"ticket": {ticket}})
		if err != nil {
			t.Fatalf("dial with a fresh ticket: %v", err)
		}
		defer c.Close(websocket.StatusNormalClosure, "")
		if c2, resp, err := dialURL(url.Values{"ticket": {ticket}}); err == nil {
			c2.Close(websocket.StatusNormalClosure, "")
			t.Error("the same ticket opened a second socket")
		} else if resp == nil || resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("second use refused with %v, want 401", resp)
		}
		if code, _ := ticketFor(""); code != http.StatusUnauthorized {
			t.Errorf("a ticket without a token: %d, want 401", code)
		}
	})
	t.Run("SocketClosedAtTokenExpiry", func(t *testing.T) {
		tok := mint("r-ws-expiry", 3*time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, _, err := websocket.Dial(ctx, "ws://"+p.Addr()+"/ws", &websocket.DialOptions{
			HTTPHeader: http.Header{"Authorization": {"Bearer " + tok}},
		})
		cancel()
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		defer c.Close(websocket.StatusNormalClosure, "")
		closed := make(chan error, 1)
		go func() {
			for {
				if _, _, err := c.Read(context.Background()); err != nil {
					closed <- err
					return
				}
			}
		}()
		var end error
		testkit.Eventually(t, 30*time.Second, func() (bool, string) {
			select {
			case end = <-closed:
				return true, ""
			default:
				return false, "the socket is still open after its token expired"
			}
		})
		if st := websocket.CloseStatus(end); st != websocket.StatusPolicyViolation {
			b, _ := json.Marshal(end.Error())
			t.Errorf("closed with %v (%s), want 1008 policy violation (token expired)", st, b)
		}
	})
}
