package httpx_test

// Micro-benchmarks of the HTTP edge (strict JSON decoding, JSON answers), run by `make bench`
// with -benchmem:
//
//	go test -run '^$' -bench . -benchmem ./shared/httpx/

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/flagdown/flagdown/shared/httpx"
)

type benchRide struct {
	RiderID string `json:"rider_id,omitempty"`
	Pickup  *struct {
		Lat *float64 `json:"lat"`
		Lng *float64 `json:"lng"`
	} `json:"pickup"`
	Dropoff *struct {
		Lat *float64 `json:"lat"`
		Lng *float64 `json:"lng"`
	} `json:"dropoff"`
}

// BenchmarkDecodeJSON decodes an order-create body strictly.
func BenchmarkDecodeJSON(b *testing.B) {
	b.ReportAllocs()
	body := []byte(`{"pickup":{"lat":40.7569,"lng":-73.9903},"dropoff":{"lat":40.7128,"lng":-73.9961}}`)
	w := httptest.NewRecorder()
	for range b.N {
		r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
		var v benchRide
		if err := httpx.DecodeJSON(w, r, 1<<18, &v); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeJSON writes an order-create answer.
func BenchmarkEncodeJSON(b *testing.B) {
	b.ReportAllocs()
	v := map[string]any{"ride_id": "0b6a3f2e-5c1d-4e8f-9a7b-3c2d1e0f9a8b", "status": "REQUESTED", "fare_estimate_cents": 1784,
		"est_distance_m": 6100.5, "est_duration_s": 871.5}
	for range b.N {
		httpx.WriteJSON(httptest.NewRecorder(), http.StatusAccepted, v)
	}
}

// BenchmarkInstrument answers a request through Instrument (metrics, and the server span: a no-op
// unless the OTEL_* environment turned tracing on).
func BenchmarkInstrument(b *testing.B) {
	b.ReportAllocs()
	h := httpx.Instrument("bench", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	for range b.N {
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
}
