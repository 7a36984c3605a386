package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/flagdown/flagdown/cmd/flagdown/internal/replay"
	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/config"
)

// startTestPlatform runs the whole local platform (gateway, broker, triggers, relay, expiry source,
// reconcile cron) over a fresh schema, Redis prefix and JetStream stream, on a random loopback port,
// with the default configuration changed by tune (may be nil).
func startTestPlatform(t *testing.T, tune ...func(*config.Config)) *platform {
	t.Helper()
	db := testkit.DB(t)
	_, prefix := testkit.Redis(t)
	cfg, err := config.FromEnv(map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	id := testkit.ID()
	cfg.DatabaseURL, cfg.DatabaseSchema = testkit.DatabaseURL(), db.Schema
	cfg.RedisURL, cfg.RedisPrefix = testkit.RedisURL(), prefix
	cfg.NATSURL = testkit.NATS(t)
	cfg.NATSStream, cfg.SubjectPrefix = "T_"+id, "t"+id+".events"
	cfg.Addr = "127.0.0.1:0"
	for _, f := range tune {
		f(cfg)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	p, err := startPlatform(context.Background(), cfg, "", log)
	if err != nil {
		t.Fatalf("start platform: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// replayOptions are the replay's defaults aimed at the gateway addr, reading the repository's
// trips, with no progress bar and no summary file.
func replayOptions(t *testing.T, addr string) replay.Options {
	t.Helper()
	opts := replay.DefaultOptions()
	opts.URL = "http://" + addr
	opts.TripsPath = filepath.Join(testkit.RepoRoot(t), "testdata", "trips.csv")
	opts.SummaryPath, opts.Progress = "", false
	// The file's first minutes: the tests' fleets and speedups are sized for that demand (the
	// demo's default window, 20 minutes later, asks for five times as many rides a minute).
	opts.SkipMinutes = 0
	return opts
}

// platformReplayOptions are replayOptions aimed at p, whose invariants the replay checks at the end
// in p's own schema and Redis prefix.
func platformReplayOptions(t *testing.T, p *platform) replay.Options {
	t.Helper()
	opts := replayOptions(t, p.Addr())
	opts.VerifyConfig = p.deps.Config
	opts.JWTSecret, opts.JWTIssuer, opts.JWTAudience = p.deps.Config.JWTSecret, p.deps.Config.JWTIssuer, p.deps.Config.JWTAudience
	return opts
}

// TestReplayEndToEnd replays a few minutes of the real trips through the real platform and checks
// the dispatch invariants in PostgreSQL afterwards.
func TestReplayEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end replay")
	}
	p := startTestPlatform(t)
	opts := platformReplayOptions(t, p)
	opts.Drivers, opts.Minutes, opts.Speedup = 300, 2, 20
	opts.Drain = 2 * time.Minute
	opts.SummaryPath = filepath.Join(t.TempDir(), "summary.json")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Its output is not a terminal: progress comes as plain lines, no carriage-return frames.
	opts.Progress, opts.ProgressEvery = true, 2*time.Second
	var buf bytes.Buffer
	var out io.Writer = &buf
	if testing.Verbose() {
		out = io.MultiWriter(&buf, os.Stderr)
	}
	sum, err := replay.Run(ctx, opts, out)
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if strings.ContainsRune(buf.String(), '\r') {
		t.Errorf("replay output to a buffer has carriage returns")
	}
	progressLine := regexp.MustCompile(`(?m)^replay: \d+s elapsed, simulated \d+:\d\d/\d+:\d\d, \d+ rides, \d+ matched$`)
	if n := len(progressLine.FindAllString(buf.String(), -1)); n < 3 {
		t.Errorf("%d progress lines in the replay output; want one every 2 s of a run of more than 6 s, and a last one", n)
	}
	if sum.RidesRequested == 0 || sum.RidesMatched == 0 {
		t.Fatalf("replay requested %d rides and matched %d; want both > 0", sum.RidesRequested, sum.RidesMatched)
	}
	if !sum.VerifyRan || sum.VerifyViolations != 0 {
		t.Errorf("invariants checked %v, violations %d %v; want checked, 0", sum.VerifyRan, sum.VerifyViolations, sum.VerifyExamples)
	}
	if sum.MatchLatencyCount != sum.RidesRequested || sum.OfferLatencyCount == 0 {
		t.Errorf("match latency over %d rides, offer latency over %d; want every one of %d requested, and some",
			sum.MatchLatencyCount, sum.OfferLatencyCount, sum.RidesRequested)
	}
	// The send rule is on by default: stationary and carrying drivers' due pings are held back,
	// and every ping sent was answered unless its call failed.
	if answered := sum.PingsTotal == sum.PingsSent || (sum.PingsTotal < sum.PingsSent && sum.HTTPErrors["location-update"] > 0); !answered ||
		!sum.SendRule || sum.PingsSavedBySendRule == 0 ||
		sum.SendRuleSavedPct != 100*float64(sum.PingsSavedBySendRule)/float64(sum.PingsSent+sum.PingsSavedBySendRule) {
		t.Errorf("send rule %v: %d pings sent, %d answered, %d saved (%.1f %%); want on, every sent one answered, some saved",
			sum.SendRule, sum.PingsSent, sum.PingsTotal, sum.PingsSavedBySendRule, sum.SendRuleSavedPct)
	}
	if _, err := os.Stat(opts.SummaryPath); err != nil {
		t.Fatalf("summary not written: %v", err)
	}
	// Every ride was ordered at its fare-estimate quote; surge runs in shadow mode (the default):
	// computed for every ride, charged 1.0.
	if sum.SurgeQuotes != sum.RidesRequested || sum.SurgeMode != "shadow" || sum.SurgeChargedMax != 1 || sum.SurgeComputedP50 < 1 ||
		len(sum.SurgeByMinute) == 0 || sum.WaitEstimateCount == 0 {
		t.Errorf("surge: %d quotes for %d rides, mode %q, charged max %v, computed p50 %v, %d minutes, %d wait samples",
			sum.SurgeQuotes, sum.RidesRequested, sum.SurgeMode, sum.SurgeChargedMax, sum.SurgeComputedP50, len(sum.SurgeByMinute), sum.WaitEstimateCount)
	}

	pool := p.deps.DB.Pool
	bg := context.Background()
	var n int
	if err := pool.QueryRow(bg, `SELECT count(*) FROM rides WHERE surge_multiplier <> 1 OR surge_computed IS NULL`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d rides charged surge or without the computed multiplier in shadow mode", n)
	}
	// Every accepted-or-later ride has exactly one accepted offer, to its driver.
	if err := pool.QueryRow(bg, `SELECT count(*) FROM rides r WHERE r.status IN ('ACCEPTED','IN_PROGRESS','COMPLETED')
		AND (SELECT count(*) FROM offers o WHERE o.ride_id = r.id AND o.status = 'ACCEPTED' AND o.driver_id = r.driver_id) <> 1`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d rides without exactly one accepted offer by their driver", n)
	}
	// No driver ever holds two active rides (the index guarantees it; check it held).
	if err := pool.QueryRow(bg, `SELECT count(*) FROM (SELECT driver_id FROM rides WHERE status IN ('ACCEPTED','IN_PROGRESS')
		GROUP BY driver_id HAVING count(*) > 1) x`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d drivers with two active rides", n)
	}
	// Every outbox row was published by the relay.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := pool.QueryRow(bg, `SELECT count(*) FROM outbox WHERE published_at IS NULL`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n != 0 {
		t.Errorf("%d outbox rows never published", n)
	}
	// Every ride.requested was handled by match exactly once.
	if err := pool.QueryRow(bg, `SELECT count(*) FROM outbox o WHERE o.type = 'io.flagdown.ride.requested.v1'
		AND NOT EXISTS (SELECT 1 FROM processed_events p WHERE p.consumer = 'match' AND p.id = o.event_id::text)`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d ride.requested events never reached match", n)
	}
	t.Logf("requested %d, matched %d (%.0f%%), offer latency p50 %.1f ms p99 %.1f ms",
		sum.RidesRequested, sum.RidesMatched, 100*sum.MatchRate, sum.OfferLatencyP50Ms, sum.OfferLatencyP99Ms)
	t.Logf("surge computed p50 %.2f max %.2f by minute %+v; wait estimate MAE %.1f s (n=%d, mean quoted %.1f s, actual %.1f s)",
		sum.SurgeComputedP50, sum.SurgeComputedMax, sum.SurgeByMinute, sum.WaitEstimateMAES, sum.WaitEstimateCount, sum.WaitEstimateMeanS, sum.WaitActualMeanS)
}

// TestReplaySinglePingsEndToEnd drives the real platform with one ping per request (no batching).
func TestReplaySinglePingsEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end replay")
	}
	p := startTestPlatform(t)
	opts := platformReplayOptions(t, p)
	opts.Drivers, opts.Minutes, opts.Speedup, opts.BatchSize = 100, 1, 20, 1
	opts.Drain = time.Minute
	sum, err := replay.Run(context.Background(), opts, io.Discard)
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if sum.PingsTotal == 0 || sum.PingRequests != sum.PingsTotal {
		t.Errorf("pings %d in %d requests; want one request per ping", sum.PingsTotal, sum.PingRequests)
	}
	if sum.RidesMatched == 0 {
		t.Errorf("no ride matched with single pings")
	}
}

// TestReplayPreflight: without a platform the replay stops at once and says how to start one.
func TestReplayPreflight(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	opts := replayOptions(t, addr)
	_, err = replay.Run(context.Background(), opts, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "flagdown dev") {
		t.Fatalf("got %v, want an error telling to start flagdown dev", err)
	}
}

// tightTimeouts shortens every timer so timeouts happen within a short replay.
func tightTimeouts(c *config.Config) {
	c.OfferWindow, c.HeartbeatTTL, c.MaxClockSkew = 2*time.Second, 3*time.Second, time.Second
	c.RetryBase, c.RetryMaxWait, c.RetryMaxAttempts, c.RetryBudget = 500*time.Millisecond, time.Second, 4, 8*time.Second
	c.ReconcileInterval, c.ReconcileGrace = 2*time.Second, time.Second
}

// count runs a count(*) query against the platform's schema.
func count(t *testing.T, p *platform, sql string) int {
	t.Helper()
	var n int
	if err := p.deps.DB.Pool.QueryRow(context.Background(), sql).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestReplayTimeoutsEndToEnd: drivers who ignore offers and drop offline mid-shift make the real
// timeouts fire (offer expiry, heartbeat expiry → ride re-opened), and the replay's figures agree
// with PostgreSQL.
func TestReplayTimeoutsEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end replay")
	}
	p := startTestPlatform(t, tightTimeouts)
	opts := platformReplayOptions(t, p)
	// 10×: the timeouts under test fire in seconds either way; 20× under the race build on a loaded
	// host lost pushes to load, not to a fault.
	opts.Drivers, opts.Minutes, opts.Speedup, opts.Drain = 200, 2, 10, 4*time.Minute
	opts.NoAnswerProb, opts.OfflineProbPerHour = 0.3, 0.999
	sum, err := replay.Run(context.Background(), opts, io.Discard)
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if !sum.FinalStatusKnown || sum.RideFetchErrors != 0 {
		t.Fatalf("final status known %v, fetch errors %d", sum.FinalStatusKnown, sum.RideFetchErrors)
	}
	if sum.OfferTimeouts == 0 || sum.OfferTimeouts > sum.OffersIgnored {
		t.Errorf("offer timeouts %d, offers ignored %d; want 0 < timeouts <= ignored", sum.OfferTimeouts, sum.OffersIgnored)
	}
	if sum.Rematches == 0 || sum.DriversWentOffline == 0 {
		t.Errorf("rematches %d, drivers went offline %d; want both > 0", sum.Rematches, sum.DriversWentOffline)
	}
	if sum.RidesMatched+sum.RidesUnmatched+sum.RidesNeverMatched > sum.RidesRequested {
		t.Errorf("matched %d + unmatched %d + never matched %d > requested %d", sum.RidesMatched, sum.RidesUnmatched, sum.RidesNeverMatched, sum.RidesRequested)
	}
	if got, want := sum.RideStatusCounts["UNMATCHED"], sum.RidesUnmatched; got != want {
		t.Errorf("UNMATCHED in final GETs %d, rides_unmatched %d", got, want)
	}
	if n := count(t, p, `SELECT count(*) FROM offers WHERE status = 'EXPIRED'`); n < sum.OfferTimeouts {
		t.Errorf("%d EXPIRED offers in PostgreSQL, replay saw %d timeouts", n, sum.OfferTimeouts)
	}
	if n := count(t, p, `SELECT count(DISTINCT subject) FROM outbox WHERE type = 'io.flagdown.ride.reopened.v1'`); n < sum.RidesReopened {
		t.Errorf("%d rides re-opened in the outbox, replay saw %d", n, sum.RidesReopened)
	}
	if n := count(t, p, `SELECT count(*) FROM (SELECT driver_id FROM rides WHERE status IN ('ACCEPTED','IN_PROGRESS')
		GROUP BY driver_id HAVING count(*) > 1) x`); n != 0 {
		t.Errorf("%d drivers with two active rides", n)
	}
	t.Logf("offers ignored %d / timed out %d, rematches %d, drivers offline %d, abandoned %d re-opened %d re-matched %d, offers by push/ping %d/%d, pushed too late %d",
		sum.OffersIgnored, sum.OfferTimeouts, sum.Rematches, sum.DriversWentOffline,
		sum.OfflineRidesAbandoned, sum.OfflineRidesReopened, sum.OfflineRidesRematched,
		sum.OffersSeenByPush, sum.OffersSeenByPing, sum.PushOffersLate)
}

// TestReplayUnmatchedEndToEnd: with far too few drivers, rides exhaust the retry budget and become
// UNMATCHED, as PostgreSQL records.
func TestReplayUnmatchedEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end replay")
	}
	p := startTestPlatform(t, tightTimeouts)
	opts := platformReplayOptions(t, p)
	opts.Drivers, opts.Minutes, opts.Speedup, opts.Drain = 5, 1, 20, 4*time.Minute
	sum, err := replay.Run(context.Background(), opts, io.Discard)
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	n := count(t, p, `SELECT count(*) FROM rides WHERE status = 'UNMATCHED'`)
	if sum.RidesUnmatched == 0 || sum.RidesUnmatched > n {
		t.Errorf("replay saw %d UNMATCHED rides, PostgreSQL has %d; want 0 < seen <= stored", sum.RidesUnmatched, n)
	}
	if n := count(t, p, `SELECT count(*) FROM outbox WHERE type = 'io.flagdown.ride.unmatched.v1'`); n < sum.RidesUnmatched {
		t.Errorf("%d ride.unmatched events for %d UNMATCHED rides", n, sum.RidesUnmatched)
	}
}

// TestGatewayUnknownPathAnswersJSON: a path no function serves gets the JSON error shape, 404 not_found.
func TestGatewayUnknownPathAnswersJSON(t *testing.T) {
	p := startTestPlatform(t)
	resp, err := http.Get("http://" + p.Addr() + "/function/nope")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Error struct{ Code string } `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusNotFound || body.Error.Code != "not_found" {
		t.Fatalf("GET /function/nope: %d %+v (%v); want 404 not_found", resp.StatusCode, body, err)
	}
}
