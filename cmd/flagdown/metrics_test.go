package main

import (
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/auth"
)

// scrape answers GET /metrics of p's gateway, in the Prometheus text format.
func scrape(t *testing.T, p *platform) string {
	t.Helper()
	resp, err := http.Get("http://" + p.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", resp.StatusCode, b)
	}
	return string(b)
}

// sample returns the value of the sample named series (name{labels} exactly as exposed) in text,
// and whether it is there.
func sample(text, series string) (float64, bool) {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(text)
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(m[1], 64)
	return v, err == nil
}

// TestMetricsThroughThePlatform: after real requests through the gateway (a driver online, a ride
// requested, matched by the broker's trigger and accepted, a client without a token), the gateway's
// /metrics counts them per function and status code and shows the ping, the relay, the trigger
// delivery, the match outcome, the accepted offer and the fleet gauges of this platform's own
// schema and Redis prefix.
func TestMetricsThroughThePlatform(t *testing.T) {
	p := startTestPlatform(t)
	id := testkit.ID()
	driver, rider := "d-m"+id, "r-m"+id
	if s := post(t, p, auth.RoleDriver, driver, "/function/location-update",
		map[string]any{"lat": 40.7580, "lng": -73.9855, "status": "available"}, nil); s != http.StatusOK {
		t.Fatalf("ping: %d", s)
	}
	text := scrape(t, p)
	if v, ok := sample(text, `flagdown_available_drivers{city="default"}`); !ok || v != 1 {
		t.Errorf("available drivers = %v (%v), want 1 (the one driver online)", v, ok)
	}
	if v, ok := sample(text, `flagdown_open_rides{city="default"}`); !ok || v != 0 {
		t.Errorf("open rides = %v (%v), want 0 before the request", v, ok)
	}
	before, _ := sample(text, `flagdown_match_outcomes_total{outcome="offered"}`)

	var ride struct {
		RideID string `json:"ride_id"`
	}
	if s := post(t, p, auth.RoleRider, rider, "/function/order-create", map[string]any{
		"pickup": map[string]float64{"lat": 40.7549, "lng": -73.9840}, "dropoff": map[string]float64{"lat": 40.7306, "lng": -73.9866},
	}, &ride); s != http.StatusAccepted {
		t.Fatalf("order-create: %d", s)
	}
	resp, err := http.Get("http://" + p.Addr() + "/function/ride/00000000-0000-0000-0000-000000000000")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	deadline := time.Now().Add(15 * time.Second)
	for {
		text = scrape(t, p)
		if v, _ := sample(text, `flagdown_match_outcomes_total{outcome="offered"}`); v > before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no offered match counted within 15 s:\n%s", grepFlagdown(text))
		}
		time.Sleep(100 * time.Millisecond)
	}
	accepted, _ := sample(text, `flagdown_offer_responses_total{result="accepted"}`)
	if s := post(t, p, auth.RoleDriver, driver, "/function/accept", map[string]any{"ride_id": ride.RideID}, nil); s != http.StatusOK {
		t.Fatalf("accept: %d", s)
	}
	text = scrape(t, p)
	if v, _ := sample(text, `flagdown_offer_responses_total{result="accepted"}`); v != accepted+1 {
		t.Errorf("offers accepted = %v after an accept, want %v", v, accepted+1)
	}
	for _, series := range []string{
		`flagdown_http_requests_total{code="200",function="location-update"}`,
		`flagdown_http_requests_total{code="401",function="ride"}`,
		`flagdown_http_requests_total{code="200",function="match"}`,
		`flagdown_http_request_duration_seconds_count{code="200",function="location-update"}`,
		`flagdown_pings_total{result="applied"}`,
		`flagdown_outbox_published_total`,
		`flagdown_trigger_deliveries_total{trigger="match"}`,
		`flagdown_match_duration_seconds_count{outcome="offered"}`,
	} {
		if v, ok := sample(text, series); !ok || v < 1 {
			t.Errorf("%s = %v (present %v), want at least 1", series, v, ok)
		}
	}
	if v, ok := sample(text, `flagdown_open_rides{city="default"}`); !ok || v != 1 {
		t.Errorf("open rides = %v (%v), want 1", v, ok)
	}
	if strings.Contains(text, driver) || strings.Contains(text, rider) {
		t.Errorf("a driver or rider id is a label value:\n%s", grepFlagdown(text))
	}
}

// grepFlagdown keeps the flagdown_ samples of a scrape, for failure messages.
func grepFlagdown(text string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "flagdown_") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
