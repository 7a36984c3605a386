package main

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/shared/cloudevent"
	"github.com/flagdown/flagdown/shared/internalauth"
)

// TestDeadLetterSinkLogsNoEventData posts a signed ride.accepted with a rider's id and a driver's
// position to the dead-letter sink, in binary and in structured mode, as Knative delivers a dead
// letter (with its error extensions): the sink answers 202 and logs the event's id and type, and
// never its data, its signature or the subscriber's answer.
func TestDeadLetterSinkLogsNoEventData(t *testing.T) {
	signer, err := internalauth.GenerateSigner("dl-test")
	if err != nil {
		t.Fatal(err)
	}
	secretRider, secretLat := "rider-secret-4711", "40.7580123"
	for _, mode := range []string{"binary", "structured"} {
		t.Run(mode, func(t *testing.T) {
			e, err := cloudevent.New("ev-dl-"+mode, events.RideAccepted, "/flagdown/test", "r-dl-1",
				map[string]any{"ride_id": "r-dl-1", "rider_id": secretRider, "driver_id": "d-1", "position": map[string]any{"lat": secretLat}}, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			if err := signer.Sign(&e); err != nil {
				t.Fatal(err)
			}
			sig := e.Extensions()[internalauth.Extension]
			e.SetExtension("knativeerrorcode", 500)
			e.SetExtension("knativeerrordest", "http://notify.flagdown.svc.cluster.local")
			e.SetExtension("knativeerrordata", "c3Vic2NyaWJlciBzYWlkIHJpZGVyLXNlY3JldC00NzEx") // "subscriber said rider-secret-4711"
			var logs bytes.Buffer
			srv := httptest.NewServer(deadLetterHandler(slog.New(slog.NewTextHandler(&logs, nil))))
			defer srv.Close()
			ctx := cloudevents.WithEncodingBinary(context.Background())
			if mode == "structured" {
				ctx = cloudevents.WithEncodingStructured(context.Background())
			}
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := cehttp.WriteRequest(ctx, binding.ToMessage(&e), req); err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusAccepted {
				t.Errorf("answered %d, want 202", resp.StatusCode)
			}
			got := logs.String()
			for _, want := range []string{"dead letter", e.ID(), events.RideAccepted, "knativeerrorcode=500"} {
				if !strings.Contains(got, want) {
					t.Errorf("the log lacks %q:\n%s", want, got)
				}
			}
			for name, bad := range map[string]string{"rider id": secretRider, "position": secretLat, "signature": sig.(string),
				"subscriber's answer": "c3Vic2NyaWJlciBzYWlkIHJpZGVyLXNlY3JldC00NzEx"} {
				if strings.Contains(got, bad) {
					t.Errorf("the log carries the event's %s:\n%s", name, got)
				}
			}
		})
	}
}
