package cloudevent_test

// Micro-benchmarks of the CloudEvent codec (build, HTTP binary and structured decoding, data
// decoding), run by `make bench` with -benchmem:
//
//	go test -run '^$' -bench . -benchmem ./shared/cloudevent/

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/shared/cloudevent"
)

func benchData() events.RideRequestedData {
	return events.RideRequestedData{RideID: "0b6a3f2e-5c1d-4e8f-9a7b-3c2d1e0f9a8b", RiderID: "rider-42",
		Pickup: events.Point{Lat: 40.7569, Lng: -73.9903}, Dropoff: events.Point{Lat: 40.7128, Lng: -73.9961},
		FareEstimateCents: 1784, RequestedAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

// BenchmarkCodecNew builds a ride.requested event (what the relay does per outbox row).
func BenchmarkCodecNew(b *testing.B) {
	b.ReportAllocs()
	d := benchData()
	for range b.N {
		if _, err := cloudevent.New("evt-1", events.RideRequested, "/flagdown/order-create", d.RideID, d, time.Time{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCodecDecodeBinary decodes a binary-mode HTTP delivery (what match receives per event)
// and its data.
func BenchmarkCodecDecodeBinary(b *testing.B) {
	b.ReportAllocs()
	d := benchData()
	body, _ := json.Marshal(d)
	for range b.N {
		r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Ce-Specversion", "1.0")
		r.Header.Set("Ce-Id", "evt-1")
		r.Header.Set("Ce-Type", events.RideRequested)
		r.Header.Set("Ce-Source", "/flagdown/order-create")
		r.Header.Set("Ce-Subject", d.RideID)
		r.Header.Set("Ce-Time", "2026-01-01T00:00:00Z")
		e, err := cloudevent.FromRequest(r)
		if err != nil {
			b.Fatal(err)
		}
		var got events.RideRequestedData
		if err := cloudevent.DecodeData(e, &got); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCodecDecodeStructured decodes a structured-mode delivery (a JetStream message as the
// OpenFaaS connector posts it).
func BenchmarkCodecDecodeStructured(b *testing.B) {
	b.ReportAllocs()
	d := benchData()
	e, err := cloudevent.New("evt-1", events.RideRequested, "/flagdown/order-create", d.RideID, d, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	if err != nil {
		b.Fatal(err)
	}
	body, err := json.Marshal(e)
	if err != nil {
		b.Fatal(err)
	}
	for range b.N {
		r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
		r.Header.Set("Content-Type", cloudevent.ContentTypeStructured)
		if _, err := cloudevent.FromRequest(r); err != nil {
			b.Fatal(err)
		}
	}
}
