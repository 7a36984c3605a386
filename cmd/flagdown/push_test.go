package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/push"
)

// phone is a test client's WebSocket connection to flagdown dev's local gateway: it records every
// message it receives.
type phone struct {
	t    *testing.T
	name string
	c    *websocket.Conn
	mu   sync.Mutex
	got  []received
	news chan struct{}
	done chan struct{}
}

type received struct {
	at  time.Time
	raw []byte
	msg struct {
		ID   string          `json:"id"`
		Type string          `json:"type"`
		At   time.Time       `json:"at"`
		Data json.RawMessage `json:"data"`
	}
}

// dial connects as the token's user (Authorization header, as a phone sends it) and asks for sync.
func dial(t *testing.T, p *platform, name, token string) *phone {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws://"+p.Addr()+"/ws", &websocket.DialOptions{
		HTTPHeader: http.Header{"Authorization": {"Bearer " + token}},
	})
	if err != nil {
		t.Fatalf("%s: dial: %v", name, err)
	}
	ph := &phone{t: t, name: name, c: c, news: make(chan struct{}, 1), done: make(chan struct{})}
	go func() {
		defer close(ph.done)
		for {
			_, b, err := c.Read(context.Background())
			if err != nil {
				return
			}
			var r received
			r.at, r.raw = time.Now(), b
			if err := json.Unmarshal(b, &r.msg); err != nil {
				t.Errorf("%s: message is not JSON: %q", name, b)
			}
			ph.mu.Lock()
			ph.got = append(ph.got, r)
			ph.mu.Unlock()
			select {
			case ph.news <- struct{}{}:
			default:
			}
		}
	}()
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"action":"sync"}`)); err != nil {
		t.Fatalf("%s: sync: %v", name, err)
	}
	t.Cleanup(func() { ph.close() })
	return ph
}

func (ph *phone) close() {
	_ = ph.c.Close(websocket.StatusNormalClosure, "bye")
	<-ph.done
}

// wait returns the first message received for which ok is true, failing after 10 s.
func (ph *phone) wait(what string, ok func(received) bool) received {
	ph.t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		ph.mu.Lock()
		for _, r := range ph.got {
			if ok(r) {
				ph.mu.Unlock()
				return r
			}
		}
		ph.mu.Unlock()
		select {
		case <-ph.news:
		case <-deadline:
			ph.t.Fatalf("%s: no %s within 10 s; got %d messages", ph.name, what, len(ph.messages()))
		}
	}
}

func (ph *phone) messages() []received {
	ph.mu.Lock()
	defer ph.mu.Unlock()
	return append([]received(nil), ph.got...)
}

func typed(typ string, rideID string) func(received) bool {
	return func(r received) bool {
		return r.msg.Type == typ && bytes.Contains(r.msg.Data, []byte(`"`+rideID+`"`))
	}
}

func status(rideID, st string) func(received) bool {
	return func(r received) bool {
		return r.msg.Type == string(push.TypeRideStatus) && bytes.Contains(r.msg.Data, []byte(`"`+rideID+`"`)) &&
			bytes.Contains(r.msg.Data, []byte(`"status":"`+st+`"`))
	}
}

// call sends a JSON request through the platform's gateway as token and decodes the answer.
func call(t *testing.T, p *platform, method, path, token string, body, out any) int {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(method, "http://"+p.Addr()+path, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, raw)
		}
	}
	if resp.StatusCode/100 != 2 {
		t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, raw)
	}
	return resp.StatusCode
}

// TestPushEndToEnd runs push through the real platform: the local WebSocket gateway, the notify
// function behind the trigger table, and the aws-sdk-go-v2-signed management client. The offered
// driver gets his offer on his socket; his rider gets the status changes and the driver's
// position; another rider gets nothing of it; a connection the gateway says is gone is dropped;
// a driver who reconnects gets his current ride again by sync; and no socket is left open.
func TestPushEndToEnd(t *testing.T) {
	p := startTestPlatform(t, func(c *config.Config) { c.PushPositionInterval = 200 * time.Millisecond })
	cfg := p.deps.Config
	mint := func(role auth.Role, sub string) string {
		tok, err := auth.Mint([]byte(cfg.JWTSecret), cfg.JWTIssuer, cfg.JWTAudience, auth.Identity{Subject: sub, Role: role}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	driverTok, riderTok, otherTok := mint(auth.RoleDriver, "d-push"), mint(auth.RoleRider, "r-push"), mint(auth.RoleRider, "r-other")
	drv := dial(t, p, "driver", driverTok)
	rdr := dial(t, p, "rider", riderTok)
	other := dial(t, p, "other rider", otherTok)
	reg := p.deps.Push().Registry
	waitConnected := func(u push.User, n int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if ids, _ := reg.Connections(context.Background(), u); len(ids) == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%v: not %d registered connections", u, n)
			}
		}
	}
	waitConnected(push.User{Role: auth.RoleDriver, ID: "d-push"}, 1)
	waitConnected(push.User{Role: auth.RoleRider, ID: "r-push"}, 1)

	pos := func(lat float64) map[string]any {
		return map[string]any{"lat": lat, "lng": -73.98, "status": "available", "ts": time.Now().UTC().Format(time.RFC3339Nano)}
	}
	call(t, p, http.MethodPost, "/function/location-update", driverTok, pos(40.7500), nil)
	var created struct {
		RideID string `json:"ride_id"`
	}
	call(t, p, http.MethodPost, "/function/order-create", riderTok, map[string]any{
		"pickup": map[string]float64{"lat": 40.7505, "lng": -73.98}, "dropoff": map[string]float64{"lat": 40.76, "lng": -73.97},
	}, &created)
	ride := created.RideID
	answered := time.Now()

	offer := drv.wait("offer", typed(string(push.TypeOffer), ride))
	t.Logf("order-create answered → offer on the driver's socket: %v", offer.at.Sub(answered))
	var o struct {
		OfferID string `json:"offer_id"`
		RideID  string `json:"ride_id"`
	}
	if err := json.Unmarshal(offer.msg.Data, &o); err != nil || o.RideID != ride || o.OfferID == "" || offer.msg.ID != "offer-"+o.OfferID {
		t.Fatalf("offer message %s", offer.raw)
	}
	// A phone that loses its socket while it holds an offer gets it again on sync, with the same id.
	drv.close()
	waitConnected(push.User{Role: auth.RoleDriver, ID: "d-push"}, 0)
	drv = dial(t, p, "driver after a tunnel", driverTok)
	if again := drv.wait("offer after sync", typed(string(push.TypeOffer), ride)); again.msg.ID != offer.msg.ID {
		t.Errorf("offer after reconnect has id %q, the pushed one %q", again.msg.ID, offer.msg.ID)
	}
	call(t, p, http.MethodPost, "/function/accept", driverTok, map[string]string{"ride_id": ride}, nil)
	rdr.wait("ride.status ACCEPTED", status(ride, "ACCEPTED"))

	// A connection the gateway no longer has is dropped at the first push that meets it.
	rider := push.User{Role: auth.RoleRider, ID: "r-push"}
	if _, err := reg.Register(context.Background(), rider, "GhostConnecti="); err != nil {
		t.Fatal(err)
	}
	// The driver moves: his rider sees it (at most once per interval).
	for i := 1; i <= 3; i++ {
		call(t, p, http.MethodPost, "/function/location-update", driverTok, pos(40.7500+float64(i)*0.0002), nil)
		time.Sleep(250 * time.Millisecond)
	}
	rdr.wait("driver.position", typed(string(push.TypeDriverPosition), ride))
	call(t, p, http.MethodPost, "/function/ride/"+ride+"/start", driverTok, map[string]string{}, nil)
	rdr.wait("ride.status IN_PROGRESS", status(ride, "IN_PROGRESS"))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ids, _ := reg.Connections(context.Background(), rider)
		if len(ids) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gone connection is still registered: %v", ids)
		}
	}

	// The driver loses his socket (a tunnel) and comes back: sync gives him his ride again, with the
	// id of the push he got before, so his app drops it if it has it.
	drv.close()
	waitConnected(push.User{Role: auth.RoleDriver, ID: "d-push"}, 0)
	drv2 := dial(t, p, "driver again", driverTok)
	again := drv2.wait("ride.status after sync", status(ride, "IN_PROGRESS"))
	first := rdr.wait("", status(ride, "IN_PROGRESS"))
	if again.msg.ID != first.msg.ID {
		t.Errorf("sync id %q, pushed id %q: the same status must carry the same id", again.msg.ID, first.msg.ID)
	}

	call(t, p, http.MethodPost, "/function/ride/"+ride+"/complete", driverTok, map[string]string{}, nil)
	rdr.wait("ride.status COMPLETED", status(ride, "COMPLETED"))

	// Nothing of this ride ever reached the other rider (he got only what his own sync said: nothing).
	time.Sleep(300 * time.Millisecond)
	for _, m := range other.messages() {
		t.Errorf("another rider received %s", m.raw)
	}
	for _, m := range rdr.messages() {
		if m.msg.Type == string(push.TypeOffer) {
			t.Errorf("the rider received the driver's offer: %s", m.raw)
		}
	}
	drv2.close()
	rdr.close()
	other.close()
	for deadline := time.Now().Add(10 * time.Second); p.push.Stats().Open != 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("sockets left open: %+v", p.push.Stats())
		}
	}
	for _, u := range []push.User{{Role: auth.RoleDriver, ID: "d-push"}, rider, {Role: auth.RoleRider, ID: "r-other"}} {
		waitConnected(u, 0)
	}
}
