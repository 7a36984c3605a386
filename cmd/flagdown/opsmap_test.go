package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/flagdown/flagdown/cmd/flagdown/internal/replay"
	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/opsview"
)

// chromiumPath returns the system Chromium, or fails the test saying how to install it (make test
// and .ci/run install it when missing; there is no opt-out).
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("the browser test needs Chromium and none is installed: `apt-get install -y chromium` " +
		"(Debian's package; scripts/test.sh and .ci/run install it when missing)")
	return ""
}

// artifactsDir is where the browser test keeps its screenshot: $FLAGDOWN_TEST_ARTIFACTS, or
// .local/artifacts in the repository.
func artifactsDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("FLAGDOWN_TEST_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(testkit.RepoRoot(t), ".local", "artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// pageState is what the map page shows: the snapshot it last applied and the counts it displays
// (read from the DOM text), and how many points it drew.
type pageState struct {
	Seq          int64            `json:"seq"`
	Applied      int64            `json:"applied"`
	Marker       string           `json:"marker"`
	Counts       map[string]int64 `json:"counts"`
	DrawnDrivers int              `json:"drawn_drivers"`
	DrawnRides   int              `json:"drawn_rides"`
	Conn         string           `json:"conn"`
}

// readPageJS reads pageState in the page; counts are parsed from what the page displays.
const readPageJS = `(() => {
  const counts = {};
  for (const el of document.querySelectorAll('[data-count]')) counts[el.dataset.count] = Number(el.textContent);
  const c = document.querySelector('#map');
  return {seq: Number(document.body.dataset.seq || 0), applied: Number(document.body.dataset.applied || 0),
    marker: String(window.__testMarker || ''), counts,
    drawn_drivers: Number(c.dataset.drawnDrivers || 0), drawn_rides: Number(c.dataset.drawnRides || 0),
    conn: document.querySelector('#conn').dataset.state};
})()`

// TestOpsMapInBrowser opens the live operations map in headless Chromium during a short replay
// through the real platform and checks that the page shows what the snapshot API returns for the
// same snapshot (every count, and as many drivers and rides drawn as the snapshot lists), that it
// updates without a reload (a marker set in the page survives several snapshots whose counts
// differ), that a click on a ride shows its timeline, and keeps a screenshot.
func TestOpsMapInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test")
	}
	chromium := chromiumPath(t)
	p := startTestPlatform(t)
	cfg := p.deps.Config
	mint := func(role auth.Role, sub string) string {
		tok, err := auth.Mint([]byte(cfg.JWTSecret), cfg.JWTIssuer, cfg.JWTAudience, auth.Identity{Subject: sub, Role: role}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	token := mint(auth.RoleOps, "ops-map-test")
	gw := "http://" + p.Addr()

	// The data endpoints are closed to callers without an ops token.
	for _, tc := range []struct {
		name, token string
		want        int
	}{{"no token", "", http.StatusUnauthorized}, {"rider token", mint(auth.RoleRider, "r-map"), http.StatusForbidden}} {
		st, _ := getOps(t, gw+"/function/ops-map/snapshot", tc.token)
		if st != tc.want {
			t.Errorf("snapshot with %s: HTTP %d, want %d", tc.name, st, tc.want)
		}
	}

	// The replay runs in the background while the page is checked; it is stopped at the end.
	opts := platformReplayOptions(t, p)
	opts.Drivers, opts.Minutes, opts.Speedup = 200, 6, 10
	opts.Verify = false // stopped midway: the invariants are checked by TestReplayEndToEnd
	rctx, stopReplay := context.WithCancel(context.Background())
	replayDone := make(chan error, 1)
	go func() {
		_, err := replay.Run(rctx, opts, io.Discard)
		replayDone <- err
	}()
	t.Cleanup(func() {
		stopReplay()
		if err := <-replayDone; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("replay: %v", err)
		}
	})

	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1400, 900))...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	bctx, cancelTimeout := context.WithTimeout(bctx, 2*time.Minute)
	defer cancelTimeout()

	// /map redirects to the function's page; the token travels in the fragment.
	if err := chromedp.Do(bctx,
		chromedp.EmulateViewport(1400, 900),
		chromedp.Navigate(gw+"/map#token="+token),
		chromedp.WaitVisible(chromedp.CSS("#map")),
	); err != nil {
		t.Fatalf("open the map: %v", err)
	}
	if _, err := chromedp.Run(bctx, chromedp.Evaluate[string](`window.__testMarker = 'same page'`)); err != nil {
		t.Fatal(err)
	}
	loc, err := chromedp.Run(bctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	if want := gw + "/function/ops-map/"; loc != want {
		t.Errorf("page at %s, want %s (the token fragment dropped from the address)", loc, want)
	}

	// Sample the page until it has shown several snapshots, each equal to the API's snapshot of the
	// same number, with counts that changed between them, drivers and open rides among them.
	keys := []string{"drivers", "drivers_available", "drivers_offered", "drivers_to_pickup", "drivers_on_trip",
		"rides_open", "rides_requested", "rides_accepted", "rides_in_progress", "offers_in_flight"}
	var compared []int64
	seen := map[string]bool{}
	var busy *opsview.Snapshot
	for len(compared) < 8 || len(seen) < 3 || busy == nil {
		if bctx.Err() != nil {
			t.Fatalf("after %d compared snapshots (%d distinct count sets, one with drivers and open rides: %v): %v",
				len(compared), len(seen), busy != nil, bctx.Err())
		}
		ps, err := chromedp.Run(bctx, chromedp.Evaluate[pageState](readPageJS))
		if err != nil {
			t.Fatalf("read the page: %v", err)
		}
		if ps.Seq == 0 || (len(compared) > 0 && ps.Seq == compared[len(compared)-1]) {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		if ps.Marker != "same page" {
			t.Fatalf("the page was reloaded (marker %q) at snapshot %d", ps.Marker, ps.Seq)
		}
		st, body := getOps(t, fmt.Sprintf("%s/function/ops-map/snapshot?seq=%d", gw, ps.Seq), token)
		if st == http.StatusNotFound {
			t.Fatalf("snapshot %d the page shows is not kept by the API (it keeps the last %d)", ps.Seq, opsview.DefaultKeep)
		}
		if st != http.StatusOK {
			t.Fatalf("snapshot %d: HTTP %d %s", ps.Seq, st, body)
		}
		var api opsview.Snapshot
		if err := json.Unmarshal(body, &api); err != nil {
			t.Fatal(err)
		}
		want := map[string]int64{}
		ab, _ := json.Marshal(api.Counts)
		if err := json.Unmarshal(ab, &want); err != nil {
			t.Fatal(err)
		}
		got := map[string]int64{}
		for _, k := range keys {
			got[k] = ps.Counts[k]
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("snapshot %d: the page shows %v, the API %v", ps.Seq, got, want)
		}
		if ps.DrawnDrivers != len(api.Drivers) || ps.DrawnRides != len(api.Rides) {
			t.Fatalf("snapshot %d: the page drew %d drivers and %d rides, the snapshot lists %d and %d",
				ps.Seq, ps.DrawnDrivers, ps.DrawnRides, len(api.Drivers), len(api.Rides))
		}
		compared = append(compared, ps.Seq)
		seen[string(ab)] = true
		if api.Counts.Drivers > 0 && api.Counts.RidesOpen > 0 && len(api.Rides) > 0 {
			busy = &api
		}
	}
	t.Logf("compared snapshots %v: %d distinct sets of counts; last busy one: %+v", compared, len(seen), busy.Counts)

	// A click on a ride shows its timeline. The ride is taken from the snapshot the page shows; if a
	// newer snapshot lost it before the click landed, the next attempt takes another.
	type drawnRide struct {
		ID     string  `json:"id"`
		Status string  `json:"status"`
		X      float64 `json:"x"`
		Y      float64 `json:"y"`
	}
	var shownID string
	for attempt := 1; shownID == ""; attempt++ {
		rides, err := chromedp.Run(bctx, chromedp.Evaluate[[]drawnRide](`window.flagdownMap.rides()`))
		if err != nil || len(rides) == 0 {
			t.Fatalf("rides drawn on the page: %v %v", rides, err)
		}
		ride := rides[len(rides)-1] // the oldest open ride: the least likely to end this second
		if err := chromedp.Do(bctx, chromedp.MouseClickXY(ride.X, ride.Y)); err != nil {
			t.Fatalf("click ride %s: %v", ride.ID, err)
		}
		wctx, cancel := context.WithTimeout(bctx, 5*time.Second)
		err = chromedp.Do(wctx, chromedp.WaitVisible(chromedp.CSS("#tl-events li")))
		cancel()
		if err != nil {
			if attempt == 5 {
				t.Fatalf("no timeline after %d clicks on rides (last %s at %.0f,%.0f): %v", attempt, ride.ID, ride.X, ride.Y, err)
			}
			continue
		}
		if shownID, err = chromedp.Run(bctx, chromedp.Text(chromedp.CSS("#tl-id"))); err != nil {
			t.Fatal(err)
		}
	}
	events, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll('#tl-events li').length`))
	if err != nil {
		t.Fatal(err)
	}
	st, body := getOps(t, gw+"/function/ops-map/rides/"+shownID, token)
	var tl opsview.Timeline
	if st != http.StatusOK || json.Unmarshal(body, &tl) != nil {
		t.Fatalf("timeline of the ride the page shows (%q): HTTP %d %s", shownID, st, body)
	}
	if events < 1 || events > len(tl.Events) || tl.Events[0].Kind != opsview.EventRequested {
		t.Errorf("timeline of %s: the page lists %d events, the API %d starting with %v", shownID, events, len(tl.Events), tl.Events)
	}

	shot, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join(artifactsDir(t), "ops-map.png")
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot of the map: %s (%d bytes)", path, len(shot))
}

// getOps GETs url with token as a bearer token (none when empty) and returns the status and body.
func getOps(t *testing.T, url, token string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}
