package function_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flagdown/flagdown/events"
	notify "github.com/flagdown/flagdown/functions/notify"
	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/internal/testkit/fntest"
	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/broker"
	"github.com/flagdown/flagdown/shared/metrics"
	"github.com/flagdown/flagdown/shared/push"
)

// phones records what the push management API posted, per connection id.
type phones struct {
	mu    sync.Mutex
	posts map[string][]string
}

func (p *phones) of(conn string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.posts[conn]...)
}

func (p *phones) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.posts = map[string][]string{}
}

// TestCapturedEventsCannotBeForgedOrReplayed runs the attack of issue 19 through the real outbox
// relay, the NATS JetStream broker and its dispatcher: a real ride.accepted is read from the
// stream (anyone who can read the broker can), its data altered (rider_id the attacker's, version
// 2147483647) and sent back, to notify directly in binary and structured mode and through the
// broker; the unaltered event is replayed the same ways. The forgeries are refused (401, counted,
// dead-lettered by the trigger) and reach nobody; the replays push nothing a second time.
func TestCapturedEventsCannotBeForgedOrReplayed(t *testing.T) {
	ph := &phones{posts: map[string][]string{}}
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		conn, _ := strings.CutPrefix(r.URL.Path, "/test/@connections/")
		ph.mu.Lock()
		ph.posts[conn] = append(ph.posts[conn], string(b))
		ph.mu.Unlock()
	}))
	t.Cleanup(gw.Close)
	env := fntest.NewEnv(t, nil)
	m, err := push.NewManagement(gw.URL+"/test", "us-east-1", credentials.NewStaticCredentialsProvider("AKIDTEST", "secret", ""), nil)
	if err != nil {
		t.Fatal(err)
	}
	env.D.PushManagement = m
	fn := notify.New(env.D)
	srv := httptest.NewServer(fn)
	t.Cleanup(srv.Close)

	b := env.StartRelay(t) // signs with the publishers' key, as flagdown relay does
	disp, err := broker.NewDispatcher(b, []broker.Trigger{{Name: "notify", Types: notify.Triggers, URL: srv.URL}}, 2, nil, env.D.Log,
		broker.WithBackOff(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	testkit.Run(t, disp.Run)

	const riderConn, evilConn = "rider-conn-1=", "evil-conn-1="
	for conn, user := range map[string]string{riderConn: "r1", evilConn: "r-evil"} {
		in := fntest.InternalHeaders()
		in[notify.HeaderConnectionID] = conn
		in[notify.HeaderClientToken] = "Bearer " + env.Token(auth.RoleRider, user)
		if st, body := fntest.Do(t, fn, http.MethodPost, "/connect", nil, in); st != http.StatusOK {
			t.Fatalf("connect %s: %d %v", user, st, body)
		}
	}
	ph.reset()

	env.Ping(t, "d1", midtown)
	rideID := env.CreateRide(t, "r1", fntest.Offset(midtown, 100, 0), fntest.Offset(midtown, 2000, 0))
	if got := env.MatchRide(t, rideID); got != "offered" {
		t.Fatalf("match: %s", got)
	}
	if st, body := env.AcceptRide(t, rideID, "d1"); st != http.StatusOK {
		t.Fatalf("accept: %d %v", st, body)
	}
	accepted := func(p string) bool { return strings.Contains(p, `"status":"ACCEPTED"`) && strings.Contains(p, rideID) }
	fntest.Eventually(t, 20*time.Second, "the rider's ride.accepted through relay, broker and notify", func() bool {
		for _, p := range ph.of(riderConn) {
			if accepted(p) {
				return true
			}
		}
		return false
	})

	// The attacker reads the broker: the stored ride.accepted, byte for byte.
	var captured []byte
	var ev event.Event
	for _, msg := range testkit.StreamMessages(t, b.JetStream(), b.Stream()) {
		if strings.HasSuffix(msg.Subject, "."+events.RideAccepted) {
			captured = msg.Data
		}
	}
	if captured == nil {
		t.Fatal("no ride.accepted in the stream")
	}
	if err := json.Unmarshal(captured, &ev); err != nil {
		t.Fatal(err)
	}
	var data map[string]any
	if err := json.Unmarshal(ev.Data(), &data); err != nil {
		t.Fatal(err)
	}
	data["rider_id"], data["version"] = "r-evil", 2147483647
	forged := ev.Clone()
	if forged.DataEncoded, err = json.Marshal(data); err != nil {
		t.Fatal(err)
	}
	forgedJSON, err := forged.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	refusedBefore := testutil.ToFloat64(metrics.EventsRefused.WithLabelValues(notify.Consumer, "bad_signature"))

	// Straight to notify, binary and structured mode.
	if st, body := fntest.SendCloudEvent(t, fn, forged); st != http.StatusUnauthorized {
		t.Errorf("forged ride.accepted, binary mode: %d %v, want 401", st, body)
	}
	structured := map[string]string{"Content-Type": "application/cloudevents+json"}
	if st, body := fntest.DoRaw(t, fn, http.MethodPost, "/", forgedJSON, structured); st != http.StatusUnauthorized {
		t.Errorf("forged ride.accepted, structured mode: %d %s, want 401", st, body)
	}
	// Through the broker: NATS takes any publish; the trigger delivers it and notify refuses it.
	publish := func(body []byte, msgID string) {
		t.Helper()
		msg := nats.NewMsg(b.Subject(events.RideAccepted))
		msg.Header.Set("Content-Type", broker.ContentTypeStructured)
		msg.Header.Set(nats.MsgIdHdr, msgID)
		msg.Data = body
		if _, err := b.JetStream().PublishMsg(context.Background(), msg); err != nil {
			t.Fatal(err)
		}
	}
	publish(forgedJSON, "forged-"+testkit.ID())
	fntest.Eventually(t, 20*time.Second, "the forged event dead-lettered with 401", func() bool {
		for _, m := range testkit.StreamMessages(t, b.JetStream(), b.DLQStream()) {
			if m.Header.Get(broker.HeaderLastStatus) == "401" {
				return true
			}
		}
		return false
	})
	if got := testutil.ToFloat64(metrics.EventsRefused.WithLabelValues(notify.Consumer, "bad_signature")) - refusedBefore; got != 3 {
		t.Errorf("refusals counted: %v, want 3", got)
	}

	// The captured event replayed unchanged: no second effect.
	if st, body := fntest.SendCloudEvent(t, fn, ev); st != http.StatusOK || body["outcome"] != notify.OutcomeDuplicate {
		t.Errorf("replayed ride.accepted, binary mode: %d %v, want 200 duplicate", st, body)
	}
	if st, body := fntest.DoRaw(t, fn, http.MethodPost, "/", captured, structured); st != http.StatusOK || !strings.Contains(string(body), notify.OutcomeDuplicate) {
		t.Errorf("replayed ride.accepted, structured mode: %d %s, want 200 duplicate", st, body)
	}
	delivered := disp.Stats().Delivered
	publish(captured, "replayed-"+testkit.ID())
	fntest.Eventually(t, 20*time.Second, "the replay delivered through the broker", func() bool {
		return disp.Stats().Delivered > delivered
	})

	if posts := ph.of(evilConn); len(posts) != 0 {
		t.Errorf("the attacker's phone received %v", posts)
	}
	n := 0
	for _, p := range ph.of(riderConn) {
		if strings.Contains(p, "2147483647") {
			t.Errorf("the forged version reached the rider: %s", p)
		}
		if accepted(p) {
			n++
		}
	}
	if n != 1 {
		t.Errorf("the rider received ride.accepted %d times, want once", n)
	}
	if c := env.Count(t, `SELECT count(*) FROM processed_events WHERE consumer = $1 AND id = $2`, notify.Consumer, ev.ID()); c != 1 {
		t.Errorf("processed_events rows of the event: %d, want 1", c)
	}
}

// TestVersionsComeFromPostgreSQL: a correctly signed ride event whose version the ride row never
// reached, or whose rider is not the ride's, pushes nothing; one the ride has passed is pushed with
// its own (lower) version; the current one with the row's version.
func TestVersionsComeFromPostgreSQL(t *testing.T) {
	ph := &phones{posts: map[string][]string{}}
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		conn, _ := strings.CutPrefix(r.URL.Path, "/test/@connections/")
		ph.mu.Lock()
		ph.posts[conn] = append(ph.posts[conn], string(b))
		ph.mu.Unlock()
	}))
	t.Cleanup(gw.Close)
	env := fntest.NewEnv(t, nil)
	m, err := push.NewManagement(gw.URL+"/test", "us-east-1", credentials.NewStaticCredentialsProvider("AKIDTEST", "secret", ""), nil)
	if err != nil {
		t.Fatal(err)
	}
	env.D.PushManagement = m
	fn := notify.New(env.D)
	for conn, user := range map[string]string{"r1-conn=": "r1", "evil-conn=": "r-evil"} {
		in := fntest.InternalHeaders()
		in[notify.HeaderConnectionID] = conn
		in[notify.HeaderClientToken] = "Bearer " + env.Token(auth.RoleRider, user)
		if st, body := fntest.Do(t, fn, http.MethodPost, "/connect", nil, in); st != http.StatusOK {
			t.Fatalf("connect %s: %d %v", user, st, body)
		}
	}
	rideID := env.CreateRide(t, "r1", midtown, fntest.Offset(midtown, 2000, 0))
	env.Exec(t, `UPDATE rides SET status = 'ACCEPTED', driver_id = 'd1', accepted_at = now(), version = 3 WHERE id = $1`, rideID)
	ph.reset()
	send := func(rider string, version int64) (int, fntest.JSON) {
		return fntest.SendEvent(t, fn, fntest.Event{Type: events.RideAccepted, Subject: rideID, Data: events.RideAcceptedData{
			RideID: rideID, OfferID: "offer-1", DriverID: "d1", RiderID: rider, AcceptedAt: time.Now().UTC(), Version: version,
		}})
	}
	if st, body := send("r1", 2147483647); st != http.StatusOK || body["outcome"] != notify.OutcomeStale {
		t.Errorf("a version the ride never reached: %d %v, want 200 stale", st, body)
	}
	if st, body := send("r-evil", 3); st != http.StatusBadRequest || fntest.ErrorOf(t, body).Field != "data.rider_id" {
		t.Errorf("another rider: %d %v, want 400 on data.rider_id", st, body)
	}
	if got := len(ph.of("r1-conn=")) + len(ph.of("evil-conn=")); got != 0 {
		t.Fatalf("refused events pushed %d messages", got)
	}
	if st, body := send("r1", 3); st != http.StatusOK || body["outcome"] != notify.OutcomePushed {
		t.Errorf("the current version: %d %v, want 200 pushed", st, body)
	}
	if st, body := send("r1", 2); st != http.StatusOK || body["outcome"] != notify.OutcomePushed {
		t.Errorf("a passed version: %d %v, want 200 pushed", st, body)
	}
	posts := strings.Join(ph.of("r1-conn="), "\n")
	if !strings.Contains(posts, `"version":3`) || !strings.Contains(posts, `"version":2`) || strings.Contains(posts, "2147483647") {
		t.Errorf("pushed %s", posts)
	}
	if got := ph.of("evil-conn="); len(got) != 0 {
		t.Errorf("the attacker received %v", got)
	}
}
