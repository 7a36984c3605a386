package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/lifecycle"
)

// send sends body (nil: none) as JSON with method to the platform as the caller role/sub, decodes
// the answer into out (when non-nil) and returns its status code, 0 when no answer came (the error
// is logged).
func send(t *testing.T, p *platform, method string, role auth.Role, sub, path string, body, out any) int {
	t.Helper()
	cfg := p.deps.Config
	tok, err := auth.Mint([]byte(cfg.JWTSecret), cfg.JWTIssuer, cfg.JWTAudience, auth.Identity{Subject: sub, Role: role}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, "http://"+p.Addr()+path, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Logf("%s %s: no answer: %v", method, path, err)
		return 0
	}
	defer resp.Body.Close()
	if out != nil {
		_ = json.NewDecoder(resp.Body).Decode(out)
	}
	return resp.StatusCode
}

// TestPostgresDecisionsAnswerWhileRedisIsStopped: with the platform's Redis stopped (SIGSTOP: it
// keeps its connections and answers nothing), what PostgreSQL decides still answers 2xx through
// the real handlers (accept, decline, start, complete, cancel, GET ride, order-create), and once
// Redis is back reconcile makes it match PostgreSQL again (a driver left on his ride, a driver freed
// by his complete) and the ride requested during the outage is offered.
func TestPostgresDecisionsAnswerWhileRedisIsStopped(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end Redis outage")
	}
	rs := testkit.StartPrivateRedis(t)
	p := startTestPlatform(t, func(c *config.Config) {
		c.RedisURL, c.RedisPrefix = rs.URL, "flagdown:"
		c.ReconcileInterval, c.ReconcileGrace = time.Second, time.Second
		// Long enough that the offers made before the stop are still open when they are answered.
		c.OfferWindow = time.Minute
	})
	ctx := context.Background()
	id := testkit.ID()
	type pos struct{ lat, lng float64 }
	// Three drivers far enough apart (> the largest search radius, 8 km) that each ride below can
	// only be offered to the driver it is meant for.
	midtown, parkSlope, flushing := pos{40.7580, -73.9855}, pos{40.6710, -73.9780}, pos{40.7590, -73.8300}
	dropA := pos{40.78, -73.96}
	d1, d2, d3 := "d1-"+id, "d2-"+id, "d3-"+id
	ping := func(driver string, at pos) pingAnswer {
		var a pingAnswer
		post(t, p, auth.RoleDriver, driver, "/function/location-update", map[string]any{"driver_id": driver, "lat": at.lat, "lng": at.lng, "status": "available"}, &a)
		return a
	}
	order := func(rider string, from, to pos) (int, string) {
		var ride struct {
			RideID string `json:"ride_id"`
		}
		code := send(t, p, http.MethodPost, auth.RoleRider, rider, "/function/order-create", map[string]any{
			"pickup": map[string]float64{"lat": from.lat, "lng": from.lng}, "dropoff": map[string]float64{"lat": to.lat, "lng": to.lng}}, &ride)
		return code, ride.RideID
	}
	offered := func(driver string, at pos, from, to pos) string {
		t.Helper()
		ping(driver, at)
		code, ride := order("r-"+driver, from, to)
		if code != http.StatusAccepted {
			t.Fatalf("order-create for %s answered %d", driver, code)
		}
		testkit.Eventually(t, 30*time.Second, func() (bool, string) {
			a := ping(driver, at)
			return a.Offer != nil && a.Offer.RideID == ride, fmt.Sprintf("%s offered ride %s", driver, ride)
		})
		return ride
	}
	rideA := offered(d1, midtown, pos{40.7585, -73.9855}, dropA)
	rideB := offered(d2, parkSlope, pos{40.6715, -73.9780}, pos{40.68, -73.97})
	rideF := offered(d3, flushing, pos{40.7595, -73.8300}, pos{40.77, -73.82})

	rs.Pause(t)
	paused := true
	defer func() {
		if paused {
			rs.Resume(t)
		}
	}()
	want := func(what string, code, want int) {
		t.Helper()
		if code != want {
			t.Errorf("%s answered %d with Redis stopped; want %d", what, code, want)
		}
	}
	want("accept A", send(t, p, http.MethodPost, auth.RoleDriver, d1, "/function/accept", map[string]any{"ride_id": rideA}, nil), http.StatusOK)
	want("accept B", send(t, p, http.MethodPost, auth.RoleDriver, d2, "/function/accept", map[string]any{"ride_id": rideB}, nil), http.StatusOK)
	want("decline F", send(t, p, http.MethodPost, auth.RoleDriver, d3, "/function/ride/"+rideF+"/decline", map[string]any{}, nil), http.StatusOK)
	want("start A", send(t, p, http.MethodPost, auth.RoleDriver, d1, "/function/ride/"+rideA+"/start", map[string]any{}, nil), http.StatusOK)
	want("complete A", send(t, p, http.MethodPost, auth.RoleDriver, d1, "/function/ride/"+rideA+"/complete", map[string]any{}, nil), http.StatusOK)
	want("GET B", send(t, p, http.MethodGet, auth.RoleRider, "r-"+d2, "/function/ride/"+rideB, nil, nil), http.StatusOK)
	codeC, rideC := order("rc-"+id, pos{40.7805, -73.9605}, pos{40.79, -73.95})
	want("order-create C", codeC, http.StatusAccepted)
	codeD, rideD := order("rd-"+id, pos{40.7805, -73.9605}, pos{40.80, -73.95})
	want("order-create D", codeD, http.StatusAccepted)
	if rideC != "" {
		want("GET C", send(t, p, http.MethodGet, auth.RoleRider, "rc-"+id, "/function/ride/"+rideC, nil, nil), http.StatusOK)
		want("cancel C", send(t, p, http.MethodPost, auth.RoleRider, "rc-"+id, "/function/ride/"+rideC+"/cancel", map[string]any{}, nil), http.StatusOK)
	}
	rs.Resume(t)
	paused = false
	if t.Failed() {
		return
	}

	// Redis back: reconcile applies what the transitions could not (d2 on ride B, d1 free), and
	// ride D, recorded during the outage, is offered once its driver pings. A liveness wait, not a
	// timing claim: on a loaded host under the race build the repair and the match's retry back-off
	// have taken longer than a minute.
	testkit.Eventually(t, 3*time.Minute, func() (bool, string) {
		ping(d1, dropA)
		ping(d2, parkSlope)
		ping(d3, flushing)
		states, err := p.deps.Redis.AssignmentStates(ctx, []string{d1, d2})
		if err != nil {
			return false, err.Error()
		}
		checks, err := lifecycle.CheckAssignments(ctx, p.deps.DB.Pool, p.deps.Redis)
		if err != nil {
			return false, err.Error()
		}
		diverged := 0
		for _, c := range checks {
			if c.Diverged() {
				diverged++
			}
		}
		offersD := count(t, p, fmt.Sprintf(`SELECT count(*) FROM offers WHERE ride_id = '%s'`, rideD))
		return states[0].RideID == "" && states[1].RideID == rideB && diverged == 0 && offersD > 0,
			fmt.Sprintf("redis: d1 on %q (want none), d2 on %q (want %s); %d drivers diverged; ride D %d offers",
				states[0].RideID, states[1].RideID, rideB, diverged, offersD)
	})
}
