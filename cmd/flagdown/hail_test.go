package main

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/push"
)

// TestHailPushEndToEnd runs a street hail through the real platform: the driver presses first and
// waits, the rider's press pairs them, and both phones hear of the ACCEPTED ride on their sockets
// (ride.accepted through the outbox, the relay, the trigger table and notify), the waiting driver
// included.
func TestHailPushEndToEnd(t *testing.T) {
	p := startTestPlatform(t)
	cfg := p.deps.Config
	mint := func(role auth.Role, sub string) string {
		tok, err := auth.Mint([]byte(cfg.JWTSecret), cfg.JWTIssuer, cfg.JWTAudience, auth.Identity{Subject: sub, Role: role}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	driverTok, riderTok := mint(auth.RoleDriver, "d-hail"), mint(auth.RoleRider, "r-hail")
	drv := dial(t, p, "driver", driverTok)
	rdr := dial(t, p, "rider", riderTok)
	reg := p.deps.Push().Registry
	for _, u := range []push.User{{Role: auth.RoleDriver, ID: "d-hail"}, {Role: auth.RoleRider, ID: "r-hail"}} {
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if ids, _ := reg.Connections(context.Background(), u); len(ids) == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%v: no registered connection", u)
			}
		}
	}
	call(t, p, http.MethodPost, "/function/location-update", driverTok,
		map[string]any{"lat": 40.7580, "lng": -73.9855, "status": "available"}, nil)
	var waiting struct {
		Hail       string  `json:"hail"`
		ExpiresInS float64 `json:"expires_in_s"`
	}
	if st := call(t, p, http.MethodPost, "/function/hail", driverTok, map[string]any{"lat": 40.7580, "lng": -73.9855}, &waiting); st != http.StatusAccepted || waiting.Hail != "waiting" {
		t.Fatalf("driver's press: %d %+v, want 202 waiting", st, waiting)
	}
	var paired struct {
		Hail     string `json:"hail"`
		RideID   string `json:"ride_id"`
		DriverID string `json:"driver_id"`
	}
	if st := call(t, p, http.MethodPost, "/function/hail", riderTok, map[string]any{
		"lat": 40.7583, "lng": -73.9853, "dropoff": map[string]float64{"lat": 40.7306, "lng": -73.9866},
	}, &paired); st != http.StatusCreated || paired.Hail != "paired" || paired.DriverID != "d-hail" {
		t.Fatalf("rider's press: %d %+v, want 201 paired with d-hail", st, paired)
	}
	rdr.wait("ACCEPTED status", status(paired.RideID, string(dispatch.RideAccepted)))
	drv.wait("ACCEPTED status", status(paired.RideID, string(dispatch.RideAccepted)))
}
