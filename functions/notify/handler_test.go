package function_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/flagdown/flagdown/events"
	devices "github.com/flagdown/flagdown/functions/devices"
	notify "github.com/flagdown/flagdown/functions/notify"
	"github.com/flagdown/flagdown/internal/testkit/fntest"
	"github.com/flagdown/flagdown/internal/testkit/snstest"
	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/push"
)

var midtown = dispatch.Point{Lat: 40.75, Lng: -73.98}

// A driver with no live connection but a registered phone gets his offer as a mobile push through
// SNS: the exact Publish request, to his endpoint only, with the offer's window as time to live; a
// rider's status change is not sent to the driver's phone, and an offer whose window closed is not
// pushed at all.
func TestOfferFallsBackToMobilePush(t *testing.T) {
	srv := snstest.New(t)
	app := snstest.AppARN("GCM", "flagdown")
	e := fntest.NewEnv(t, func(c *config.Config) { c.SNSAppARNFCM, c.SNSEndpoint = app, srv.URL })
	s, err := push.NewSNS(context.Background(), e.D.Config, e.D.DB, snstest.ConfigOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	e.D.PushSNS = s
	dev := devices.New(e.D)
	fn := notify.New(e.D)

	if st, body := fntest.Do(t, dev, http.MethodPut, "/", map[string]string{"platform": "fcm", "token": "fcm-token-of-d1"}, e.As(auth.RoleDriver, "d1")); st != http.StatusOK {
		t.Fatalf("register d1's phone: %d %v", st, body)
	}
	if st, body := fntest.Do(t, dev, http.MethodPut, "/", map[string]string{"platform": "fcm", "token": "fcm-token-of-d2"}, e.As(auth.RoleDriver, "d2")); st != http.StatusOK {
		t.Fatalf("register d2's phone: %d %v", st, body)
	}
	if st, body := fntest.Do(t, dev, http.MethodPut, "/", map[string]string{"platform": "sms", "token": "x"}, e.As(auth.RoleDriver, "d1")); st != http.StatusBadRequest || fntest.ErrorOf(t, body).Field != "platform" {
		t.Errorf("unknown platform: %d %v, want 400 naming platform", st, body)
	}
	eps := srv.RequestsOf("CreatePlatformEndpoint")
	if len(eps) != 2 || eps[0].Params["Token"] != "fcm-token-of-d1" || eps[0].Params["PlatformApplicationArn"] != app {
		t.Fatalf("CreatePlatformEndpoint requests: %+v", eps)
	}

	rideID := e.CreateRide(t, "r1", fntest.Offset(midtown, 0, 0), fntest.Offset(midtown, 2000, 0))
	expires := time.Now().Add(15 * time.Second).UTC()
	st, body := fntest.SendEvent(t, fn, fntest.Event{Type: events.RideOffered, Subject: rideID, Data: events.RideOfferedData{
		RideID: rideID, OfferID: "offer-1", DriverID: "d1", DistanceM: 321, Pickup: events.Point{Lat: midtown.Lat, Lng: midtown.Lng}, ExpiresAt: expires,
	}})
	if st != http.StatusOK || body["outcome"] != notify.OutcomePushed {
		t.Fatalf("ride.offered: %d %v, want 200 pushed", st, body)
	}
	pubs := srv.RequestsOf("Publish")
	if len(pubs) != 1 {
		t.Fatalf("%d Publish requests, want 1", len(pubs))
	}
	pub := pubs[0]
	d1, _ := srv.Endpoint(pub.Params["TargetArn"])
	if d1.Attributes["Token"] != "fcm-token-of-d1" || pub.Params["MessageStructure"] != "json" {
		t.Fatalf("Publish went to %+v with %v", d1, pub.Params)
	}
	var payload map[string]string
	if err := json.Unmarshal([]byte(pub.Params["Message"]), &payload); err != nil {
		t.Fatalf("Message is not the per-platform JSON: %v", err)
	}
	var msg push.Message
	if err := json.Unmarshal([]byte(payload["default"]), &msg); err != nil || msg.ID != "offer-offer-1" || msg.Type != push.TypeOffer {
		t.Errorf("default payload %q: %+v %v", payload["default"], msg, err)
	}
	if !strings.Contains(payload["GCM"], `offer-offer-1`) {
		t.Errorf("GCM payload does not carry the offer: %s", payload["GCM"])
	}
	ttl := pub.MessageAttributes["AWS.SNS.MOBILE.FCM.TTL"].StringValue
	if ttl == "" || ttl == "0" || len(ttl) > 2 {
		t.Errorf("FCM TTL %q, want the seconds left of the 15 s window", ttl)
	}

	// A status change for the rider never goes to a driver's phone; the rider has no device: nobody.
	e.Exec(t, `UPDATE rides SET status = 'ACCEPTED', driver_id = 'd1', accepted_at = now(), version = 2 WHERE id = $1`, rideID)
	st, body = fntest.SendEvent(t, fn, fntest.Event{Type: events.RideAccepted, Subject: rideID, Data: events.RideAcceptedData{
		RideID: rideID, OfferID: "offer-1", DriverID: "d1", RiderID: "r1", AcceptedAt: time.Now().UTC(), Version: 2,
	}})
	if st != http.StatusOK || body["outcome"] != notify.OutcomeNoConnection {
		t.Errorf("ride.accepted: %d %v, want 200 no_connection", st, body)
	}
	// A late offer event (its window closed) is not pushed.
	st, body = fntest.SendEvent(t, fn, fntest.Event{Type: events.RideOffered, Subject: rideID, Data: events.RideOfferedData{
		RideID: rideID, OfferID: "offer-0", DriverID: "d2", Pickup: events.Point{Lat: midtown.Lat, Lng: midtown.Lng}, ExpiresAt: time.Now().Add(-time.Second).UTC(),
	}})
	if st != http.StatusOK || body["outcome"] != notify.OutcomeStale {
		t.Errorf("late ride.offered: %d %v, want 200 stale", st, body)
	}
	if n := len(srv.RequestsOf("Publish")); n != 1 {
		t.Errorf("%d Publish requests after the rider's event and the late offer, want still 1", n)
	}
}

// The gateway's integration routes are internal: without the internal credential they refuse, and
// a connect without a valid client token registers nothing.
func TestIntegrationRoutesAreInternal(t *testing.T) {
	e := fntest.NewEnv(t, nil)
	fn := notify.New(e.D)
	conn := map[string]string{notify.HeaderConnectionID: "L0SM9cOFvHcCIhw=", notify.HeaderClientToken: e.Token(auth.RoleRider, "r1")}
	for _, route := range []string{"/connect", "/disconnect", "/message"} {
		if st, _ := fntest.Do(t, fn, http.MethodPost, route, nil, conn); st != http.StatusUnauthorized {
			t.Errorf("%s without the internal credential: %d, want 401", route, st)
		}
	}
	in := fntest.InternalHeaders()
	in[notify.HeaderConnectionID] = "L0SM9cOFvHcCIhw="
	in[notify.HeaderClientToken] = "Bearer not-a-token"
	if st, _ := fntest.Do(t, fn, http.MethodPost, "/connect", nil, in); st != http.StatusUnauthorized {
		t.Errorf("connect with a bad client token: %d, want 401", st)
	}
	in[notify.HeaderClientToken] = "Bearer " + e.Token(auth.RoleRider, "r1")
	in[notify.HeaderConnectionID] = "has space"
	if st, body := fntest.Do(t, fn, http.MethodPost, "/connect", nil, in); st != http.StatusBadRequest || fntest.ErrorOf(t, body).Field != notify.HeaderConnectionID {
		t.Errorf("connect with a bad connection id: %d %v, want 400 naming it", st, body)
	}
	if ids, _ := e.D.Push().Registry.Connections(context.Background(), push.User{Role: auth.RoleRider, ID: "r1"}); len(ids) != 0 {
		t.Errorf("refused connects registered %v", ids)
	}
	in[notify.HeaderConnectionID] = "L0SM9cOFvHcCIhw="
	if st, body := fntest.Do(t, fn, http.MethodPost, "/connect", nil, in); st != http.StatusOK || body["subject"] != "r1" || body["role"] != "rider" {
		t.Fatalf("connect: %d %v", st, body)
	}
	if st, body := fntest.Do(t, fn, http.MethodPost, "/message", map[string]string{"action": "dance"}, in); st != http.StatusBadRequest || fntest.ErrorOf(t, body).Field != "action" {
		t.Errorf("unknown action: %d %v, want 400 naming action", st, body)
	}
	if st, _ := fntest.Do(t, fn, http.MethodPost, "/disconnect", nil, in); st != http.StatusOK {
		t.Errorf("disconnect: %d", st)
	}
	if ids, _ := e.D.Push().Registry.Connections(context.Background(), push.User{Role: auth.RoleRider, ID: "r1"}); len(ids) != 0 {
		t.Errorf("after disconnect: %v", ids)
	}
}

// A street hail's ride.accepted (hail: true) goes to the driver's connection as well as the
// rider's: either may be the side still waiting. A ride.accepted of an offer goes to the rider only.
func TestHailedAcceptTellsTheDriver(t *testing.T) {
	var mu sync.Mutex
	var posted []string // connection paths posted to, with the body
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		posted = append(posted, r.URL.EscapedPath()+" "+string(b))
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	e := fntest.NewEnv(t, nil)
	m, err := push.NewManagement(srv.URL+"/test", "us-east-1", credentials.NewStaticCredentialsProvider("AKIDTEST", "secret", ""), nil)
	if err != nil {
		t.Fatal(err)
	}
	e.D.PushManagement = m
	fn := notify.New(e.D)
	in := fntest.InternalHeaders()
	in[notify.HeaderConnectionID] = "drv-conn-1="
	in[notify.HeaderClientToken] = "Bearer " + e.Token(auth.RoleDriver, "d1")
	if st, body := fntest.Do(t, fn, http.MethodPost, "/connect", nil, in); st != http.StatusOK {
		t.Fatalf("connect d1: %d %v", st, body)
	}
	mu.Lock()
	posted = nil // whatever connect sent (a state sync) is not under test
	mu.Unlock()
	rideID := e.CreateRide(t, "r1", midtown, fntest.Offset(midtown, 2000, 0))
	e.Exec(t, `UPDATE rides SET status = 'ACCEPTED', driver_id = 'd1', accepted_at = now(), version = 2 WHERE id = $1`, rideID)
	driverPosts := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, p := range posted {
			if strings.HasPrefix(p, "/test/@connections/drv-conn-1%3D ") && strings.Contains(p, rideID) {
				n++
			}
		}
		return n
	}
	st, body := fntest.SendEvent(t, fn, fntest.Event{Type: events.RideAccepted, Subject: rideID, Data: events.RideAcceptedData{
		RideID: rideID, OfferID: "offer-1", DriverID: "d1", RiderID: "r1", AcceptedAt: time.Now().UTC(), Version: 2,
	}})
	if st != http.StatusOK || driverPosts() != 0 {
		t.Fatalf("offer's ride.accepted: %d %v, %d posts to the driver, want 200 and none", st, body, driverPosts())
	}
	st, body = fntest.SendEvent(t, fn, fntest.Event{Type: events.RideAccepted, Subject: rideID, Data: events.RideAcceptedData{
		RideID: rideID, DriverID: "d1", RiderID: "r1", AcceptedAt: time.Now().UTC(), Version: 1, Hail: true,
	}})
	if st != http.StatusOK || body["outcome"] != notify.OutcomePushed || driverPosts() != 1 {
		t.Errorf("hailed ride.accepted: %d %v, %d posts to the driver, want 200 pushed and 1", st, body, driverPosts())
	}
}

// TestConnectsAreBudgeted: a user's WebSocket connects past FLAGDOWN_RATE_CONNECTS_PER_MIN are
// refused 429 and register nothing; with the gateway trusted, connects of many users from one client
// IP share FLAGDOWN_RATE_PER_IP_PER_MIN.
func TestConnectsAreBudgeted(t *testing.T) {
	e := fntest.NewEnv(t, func(c *config.Config) {
		c.RateConnectsPerMin, c.RatePerIPPerMin, c.TrustedProxyHops = 2, 3, 1
	})
	fn := notify.New(e.D)
	connect := func(rider, connID, ip string) (int, fntest.JSON) {
		in := fntest.InternalHeaders()
		in[notify.HeaderConnectionID] = connID
		in[notify.HeaderClientToken] = "Bearer " + e.Token(auth.RoleRider, rider)
		in["X-Forwarded-For"] = ip
		return fntest.Do(t, fn, http.MethodPost, "/connect", nil, in)
	}
	for i, id := range []string{"AAAAAAAAAAAAAAA=", "BBBBBBBBBBBBBBB="} {
		if st, body := connect("r1", id, "198.51.100.1"); st != http.StatusOK {
			t.Fatalf("connect %d: %d %v", i+1, st, body)
		}
	}
	if st, body := connect("r1", "CCCCCCCCCCCCCCC=", "198.51.100.1"); st != http.StatusTooManyRequests || fntest.ErrorOf(t, body).Field != "sub" {
		t.Fatalf("third connect of r1: %d %v, want 429 naming sub", st, body)
	}
	if ids, _ := e.D.Push().Registry.Connections(context.Background(), push.User{Role: auth.RoleRider, ID: "r1"}); len(ids) != 2 {
		t.Errorf("r1 holds %d connections, want the 2 allowed", len(ids))
	}
	for i := range 4 {
		st, body := connect(fmt.Sprintf("r-ip-%d", i), fmt.Sprintf("DDDDDDDDDDDDDD%d=", i), "203.0.113.7")
		if i < 3 && st != http.StatusOK {
			t.Fatalf("connect %d from one IP: %d %v", i+1, st, body)
		}
		if i == 3 && (st != http.StatusTooManyRequests || fntest.ErrorOf(t, body).Field != "client_ip") {
			t.Fatalf("fourth connect from one IP: %d %v, want 429 naming client_ip", st, body)
		}
	}
}

// TestDevicesPerUserAreCapped: a user may register FLAGDOWN_MAX_DEVICES_PER_USER devices; one more
// is 409 too_many_devices and creates no endpoint, re-registering one of his is fine, and
// registrations past FLAGDOWN_RATE_DEVICES_PER_MIN are 429.
func TestDevicesPerUserAreCapped(t *testing.T) {
	srv := snstest.New(t)
	e := fntest.NewEnv(t, func(c *config.Config) {
		c.SNSAppARNFCM, c.SNSEndpoint = snstest.AppARN("GCM", "flagdown"), srv.URL
		c.MaxDevicesPerUser, c.RateDevicesPerMin = 2, 5
	})
	s, err := push.NewSNS(context.Background(), e.D.Config, e.D.DB, snstest.ConfigOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	e.D.PushSNS = s
	dev := devices.New(e.D)
	put := func(token string) (int, fntest.JSON) {
		return fntest.Do(t, dev, http.MethodPut, "/", map[string]string{"platform": "fcm", "token": token}, e.As(auth.RoleRider, "r1"))
	}
	for _, tok := range []string{"fcm-token-1", "fcm-token-2"} {
		if st, body := put(tok); st != http.StatusOK {
			t.Fatalf("register %s: %d %v", tok, st, body)
		}
	}
	if st, body := put("fcm-token-3"); st != http.StatusConflict || fntest.ErrorOf(t, body).Reason != dispatch.ReasonTooManyDevices {
		t.Fatalf("a third device: %d %v, want 409 too_many_devices", st, body)
	}
	if n := len(srv.RequestsOf("CreatePlatformEndpoint")); n != 2 {
		t.Errorf("%d endpoints created, want 2 (none for the refused device)", n)
	}
	if st, body := put("fcm-token-1"); st != http.StatusOK {
		t.Fatalf("re-register a device of his: %d %v", st, body)
	}
	if st, body := put("fcm-token-2"); st != http.StatusOK {
		t.Fatalf("re-register a device of his: %d %v", st, body)
	}
	if st, body := put("fcm-token-2"); st != http.StatusTooManyRequests {
		t.Fatalf("sixth registration in a minute: %d %v, want 429", st, body)
	}
}
