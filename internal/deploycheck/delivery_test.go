package deploycheck_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/google/uuid"

	"github.com/flagdown/flagdown/events"
	expirynotification "github.com/flagdown/flagdown/functions/expiry-notification"
	match "github.com/flagdown/flagdown/functions/match"
	notify "github.com/flagdown/flagdown/functions/notify"
	ordercreate "github.com/flagdown/flagdown/functions/order-create"
	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/app"
	"github.com/flagdown/flagdown/shared/auth"
)

// eventFunctions builds each function events.Triggers routes to. A new trigger row needs its
// function added here (the test says so), so every routed function is tested for Broker delivery.
var eventFunctions = map[string]func(*app.Deps) http.Handler{
	"match":               func(d *app.Deps) http.Handler { return match.New(d) },
	"expiry-notification": func(d *app.Deps) http.Handler { return expirynotification.New(d.Deps) },
	"notify":              func(d *app.Deps) http.Handler { return notify.New(d) },
}

// TestKnativeBrokerDelivery sends every event type of every trigger row to its function the way a
// Knative Broker's dispatcher does: a CloudEvents HTTP POST in binary mode written by the sdk-go HTTP
// sender, with the extension attributes the broker adds. The function must decode it and ACK (2xx);
// a NACK would make the broker retry and dead-letter every event.
func TestKnativeBrokerDelivery(t *testing.T) {
	for _, tr := range events.Triggers {
		build, ok := eventFunctions[tr.Function]
		if !ok {
			t.Errorf("events.Triggers routes to %s: add it to eventFunctions in %s", tr.Function, "internal/deploycheck/delivery_test.go")
			continue
		}
		t.Run(tr.Function, func(t *testing.T) {
			d := testkit.Deps(t, nil)
			srv := httptest.NewServer(build(d))
			defer srv.Close()
			rideID := createRide(t, d)

			p, err := cloudevents.NewHTTP(cloudevents.WithTarget(srv.URL))
			if err != nil {
				t.Fatal(err)
			}
			c, err := cloudevents.NewClient(p, cloudevents.WithTimeNow())
			if err != nil {
				t.Fatal(err)
			}
			for _, typ := range tr.Types {
				e := cloudevents.NewEvent()
				e.SetID(uuid.NewString())
				e.SetType(typ)
				e.SetSource("/flagdown/test-broker")
				subject, data := samplePayload(typ, rideID, d.Config.RedisPrefix)
				e.SetSubject(subject)
				if err := e.SetData(cloudevents.ApplicationJSON, data); err != nil {
					t.Fatal(err)
				}
				// What the Knative broker ingress/dispatcher add on the way.
				e.SetExtension("knativearrivaltime", time.Now().UTC().Format(time.RFC3339Nano))
				e.SetExtension("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
				// What the relay and the expiry source add (shared/internalauth).
				if err := testkit.EventSigner().Sign(&e); err != nil {
					t.Fatal(err)
				}

				var status int
				ctx := cloudevents.ContextWithRetriesExponentialBackoff(context.Background(), 10*time.Millisecond, 0)
				ctx = binding.WithForceBinary(ctx)
				res := c.Send(ctx, e)
				var httpRes *cehttp.Result
				if cloudevents.ResultAs(res, &httpRes) {
					status = httpRes.StatusCode
				}
				if !cloudevents.IsACK(res) {
					t.Errorf("%s → %s: NACK %v (status %d)", typ, tr.Function, res, status)
				}
			}
		})
	}
}

// createRide creates a REQUESTED ride through order-create and returns its id.
func createRide(t *testing.T, d *app.Deps) string {
	t.Helper()
	srv := httptest.NewServer(ordercreate.New(d.Deps))
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodPost, srv.URL, jsonBody(`{"rider_id":"r-broker","pickup":{"lat":40.75,"lng":-73.98},"dropoff":{"lat":40.76,"lng":-73.97}}`))
	req.Header.Set("Content-Type", "application/json")
	tok, err := auth.Mint([]byte(d.Config.JWTSecret), d.Config.JWTIssuer, d.Config.JWTAudience, auth.Identity{Subject: "r-broker", Role: auth.RoleRider}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		RideID string `json:"ride_id"`
	}
	if err := decodeJSON(resp.Body, &out); err != nil || resp.StatusCode != http.StatusAccepted || out.RideID == "" {
		t.Fatalf("order-create: %d %v", resp.StatusCode, err)
	}
	return out.RideID
}

// samplePayload returns the subject and a valid payload of typ about rideID.
func samplePayload(typ, rideID, prefix string) (string, any) {
	now := time.Now().UTC()
	switch typ {
	case events.RideRequested:
		return rideID, events.RideRequestedData{RideID: rideID, RiderID: "r-broker", Pickup: events.Point{Lat: 40.75, Lng: -73.98}, Dropoff: events.Point{Lat: 40.76, Lng: -73.97}, RequestedAt: now}
	case events.RideOfferDeclined:
		return rideID, events.RideOfferDeclinedData{RideID: rideID, OfferID: uuid.NewString(), DriverID: "d-broker"}
	case events.RideReopened:
		return rideID, events.RideTransitionData{RideID: rideID, RiderID: "r-broker", DriverID: "d-broker", From: "ACCEPTED", To: "REQUESTED", By: "driver", At: now}
	case events.RideOfferExpired:
		return rideID, events.RideOfferExpiredData{RideID: rideID, OfferID: uuid.NewString(), DriverID: "d-broker", ExpiresAt: now}
	case events.RideOffered:
		return rideID, events.RideOfferedData{RideID: rideID, OfferID: uuid.NewString(), DriverID: "d-broker", DistanceM: 120, Pickup: events.Point{Lat: 40.75, Lng: -73.98}, ExpiresAt: now.Add(15 * time.Second)}
	case events.RideAccepted:
		return rideID, events.RideAcceptedData{RideID: rideID, OfferID: uuid.NewString(), DriverID: "d-broker", RiderID: "r-broker", AcceptedAt: now, Version: 2}
	case events.RideStarted, events.RideCompleted, events.RideCancelled:
		return rideID, events.RideTransitionData{RideID: rideID, RiderID: "r-broker", DriverID: "d-broker", From: "ACCEPTED", To: "IN_PROGRESS", By: "driver", At: now, Version: 3}
	case events.RideUnmatched:
		return rideID, events.RideUnmatchedData{RideID: rideID, RiderID: "r-broker", Attempts: 8, Reason: "no driver", At: now, Version: 2}
	case events.RideRetry:
		return rideID, events.RideRetryData{RideID: rideID, Attempt: 1, Reason: "retry_timer"}
	case events.MatchBatchDue:
		return "city", events.MatchBatchDueData{Batch: "city", DeadlineMs: now.UnixMilli()}
	case events.RedisKeyExpired:
		key := prefix + "hb:d-broker"
		return key, events.RedisKeyExpiredData{Key: key, Kind: "heartbeat", ID: "d-broker", ObservedAt: now}
	}
	return rideID, map[string]string{"ride_id": rideID}
}

func jsonBody(s string) *strings.Reader { return strings.NewReader(s) }

func decodeJSON(r io.Reader, v any) error { return json.NewDecoder(r).Decode(v) }
