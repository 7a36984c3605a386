package function_test

// Benchmark of order-create through its HTTP handler against the real PostgreSQL (testkit: own
// schema). Run with:
//
//	go test -run '^$' -bench OrderCreate -benchtime=2s ./functions/order-create/

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	ordercreate "github.com/flagdown/flagdown/functions/order-create"
	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/auth"
)

// benchOrderBodies returns one JSON coordinate pair per real trip
// (`"pickup": {...}, "dropoff": {...}`).
func benchOrderBodies(b *testing.B) []string {
	var out []string
	for _, t := range testkit.Trips(b) {
		out = append(out, fmt.Sprintf(`"pickup": {"lat": %v, "lng": %v}, "dropoff": {"lat": %v, "lng": %v}`,
			t.Pickup.Lat, t.Pickup.Lng, t.Dropoff.Lat, t.Dropoff.Lng))
	}
	return out
}

// BenchmarkOrderCreate measures POST /function/order-create (validation, fare estimate, ride and
// outbox row in one transaction) with a unique rider per request and real NYC trips; every answer
// must be 202. The parallel variant runs 16 concurrent requests on 2 cores.
func BenchmarkOrderCreate(b *testing.B) {
	d := testkit.Deps(b, nil)
	h := ordercreate.New(d.Deps)
	trips := benchOrderBodies(b)
	var seq atomic.Int64
	run := testkit.ID()
	post := func(b *testing.B) bool {
		n := seq.Add(1)
		body := fmt.Sprintf(`{"rider_id": "rider-%s-%d", %s}`, run, n, trips[int(n)%len(trips)])
		req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader([]byte(body)))
		req.Header.Set("Content-Type", "application/json")
		// Minting is the client's cost (a few µs), measured with the request; verifying is ours.
		tok, err := auth.Mint([]byte(d.Config.JWTSecret), d.Config.JWTIssuer, d.Config.JWTAudience,
			auth.Identity{Subject: fmt.Sprintf("rider-%s-%d", run, n), Role: auth.RoleRider}, time.Hour)
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusAccepted {
			b.Errorf("status %d: %s", rec.Code, rec.Body.String())
			return false
		}
		return true
	}
	b.Run("sequential", func(b *testing.B) {
		for range b.N {
			if !post(b) {
				return
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rides/s")
	})
	b.Run("parallel", func(b *testing.B) {
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if !post(b) {
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rides/s")
	})
}
