package replay

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/flagdown/flagdown/shared/app"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/logging"
	"github.com/flagdown/flagdown/shared/pgstore"
)

// A comparison (flagdown replay --compare-modes greedy,batch,auto) replays one trips file under each
// matching mode in turn, each against a platform of its own: a `flagdown dev` child process started
// with FLAGDOWN_MATCH_MODE set to the mode, a PostgreSQL schema and a Redis key prefix of its own
// (migrated fresh, dropped and deleted after the run), FLAGDOWN_SIM_SPEEDUP set to the replay's
// speed-up. Every mode gets the same options (seed, drivers, supply drop, window), so the rows of
// the table differ by the mode alone, and by the noise of a shared machine.

// ParseModes parses a comma-separated list of matching modes (MatchModeGreedy, MatchModeBatch,
// MatchModeAuto), each at most once, at least one.
func ParseModes(s string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, m := range strings.Split(s, ",") {
		m = strings.TrimSpace(m)
		switch m {
		case MatchModeGreedy, MatchModeBatch, MatchModeAuto:
		default:
			return nil, fmt.Errorf("compare-modes: %q is not a matching mode (want a comma-separated list of %s, %s, %s)", m, MatchModeGreedy, MatchModeBatch, MatchModeAuto)
		}
		if seen[m] {
			return nil, fmt.Errorf("compare-modes: %s named twice", m)
		}
		seen[m] = true
		out = append(out, m)
	}
	return out, nil
}

// ModeRow is one mode's figures in a comparison. Durations are simulated seconds.
type ModeRow struct {
	// Mode is the matching mode (FLAGDOWN_MATCH_MODE) of the run.
	Mode string `json:"mode"`
	// Err says why the run failed or did not check out ("" when it passed); its figures may be partial.
	Err string `json:"error,omitempty"`
	// PickupMeanM is the mean driver → pickup distance at accept, metres; MatchRate the share of
	// requested rides matched (0..1); TimeToMatchP95S, P99S and MaxS the request → accept times.
	PickupMeanM     float64 `json:"pickup_mean_m"`
	MatchRate       float64 `json:"match_rate"`
	TimeToMatchP95S float64 `json:"time_to_match_p95_s"`
	TimeToMatchP99S float64 `json:"time_to_match_p99_s"`
	TimeToMatchMaxS float64 `json:"time_to_match_max_s"`
	// PickupWaitP95S and PickupWaitP99S are the request → driver at the pickup times (the drive
	// included: Summary.PickupWaitP95S).
	PickupWaitP95S float64 `json:"pickup_wait_p95_s"`
	PickupWaitP99S float64 `json:"pickup_wait_p99_s"`
	// Requested and Matched are the rides requested and matched.
	Requested int `json:"rides_requested"`
	Matched   int `json:"rides_matched"`
	// WaitMAES, WaitSignedS: the wait estimate's mean absolute and mean signed (quoted − actual)
	// error; WaitBaselineMAES the per-cell constant-mean baseline's and WaitMAERatio the estimate's
	// MAE over the baseline's on the same rides (WaitErrors).
	WaitMAES         float64 `json:"wait_mae_s"`
	WaitSignedS      float64 `json:"wait_mean_signed_s"`
	WaitBaselineMAES float64 `json:"wait_baseline_mae_s"`
	WaitMAERatio     float64 `json:"wait_mae_ratio"`
	// Decisions counts flagdown_match_mode_decisions_total by decided mode (auto only), as the
	// platform's GET /metrics gave it at the end.
	Decisions map[string]float64 `json:"decisions,omitempty"`
	// DecisionReasons counts the same decisions by "mode/reason" (e.g. "batch/scarce"), so a run
	// shows which rule of matching.Decide chose each mode.
	DecisionReasons map[string]float64 `json:"decision_reasons,omitempty"`
	// Summary is the run's whole summary.
	Summary *Summary `json:"summary,omitempty"`
}

// Comparison is what a comparison measured, one row per mode in the order asked.
type Comparison struct {
	Rows []ModeRow `json:"rows"`
	// LoadAverage is /proc/loadavg at the start and the end (empty where there is none).
	LoadAverageStart string `json:"load_average_start"`
	LoadAverageEnd   string `json:"load_average_end"`
}

// rowOf is the comparison row of one run's summary.
func rowOf(mode string, s *Summary) ModeRow {
	r := ModeRow{Mode: mode}
	if s == nil {
		return r
	}
	r.Summary = s
	r.PickupMeanM, r.MatchRate = s.PickupDistanceMeanM, s.MatchRate
	r.TimeToMatchP95S, r.TimeToMatchP99S, r.TimeToMatchMaxS = s.TimeToMatchP95S, s.TimeToMatchP99S, s.TimeToMatchMaxS
	r.PickupWaitP95S, r.PickupWaitP99S = s.PickupWaitP95S, s.PickupWaitP99S
	r.Requested, r.Matched = s.RidesRequested, s.RidesMatched
	if w := s.WaitErrors; w != nil {
		r.WaitMAES, r.WaitSignedS, r.WaitBaselineMAES, r.WaitMAERatio = w.MAES, w.MeanSignedS, w.BaselineMAES, w.MAERatio
	}
	return r
}

// WriteTable prints the comparison as the table of docs/matching.md: one line per mode.
func (c *Comparison) WriteTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "mode\tpickup mean\tmatched\ttime to match p95 / p99 / max\tpickup wait p95 / p99\twait MAE / signed\tbaseline MAE (ratio)\tdecisions\t")
	for _, r := range c.Rows {
		dec := ""
		if len(r.Decisions) > 0 {
			total := 0.0
			for _, v := range r.Decisions {
				total += v
			}
			var parts []string
			for _, m := range []string{MatchModeGreedy, MatchModeBatch} {
				parts = append(parts, fmt.Sprintf("%s %.0f %%", m, 100*r.Decisions[m]/total))
			}
			dec = strings.Join(parts, ", ") + fmt.Sprintf(" (n=%.0f)", total)
		}
		fmt.Fprintf(tw, "%s\t%.0f m\t%.1f %% (%d/%d)\t%.0f / %.0f / %.0f s\t%.0f / %.0f s\t%.1f / %+.1f s\t%.1f s (%.2f)\t%s\t\n",
			r.Mode, r.PickupMeanM, 100*r.MatchRate, r.Matched, r.Requested, r.TimeToMatchP95S, r.TimeToMatchP99S, r.TimeToMatchMaxS,
			r.PickupWaitP95S, r.PickupWaitP99S, r.WaitMAES, r.WaitSignedS, r.WaitBaselineMAES, r.WaitMAERatio, dec)
		if r.Err != "" {
			fmt.Fprintf(tw, "  %s: %s\t\t\t\t\t\t\t\t\n", r.Mode, r.Err)
		}
	}
	tw.Flush()
	for _, r := range c.Rows {
		if len(r.DecisionReasons) == 0 {
			continue
		}
		keys := slices.Sorted(maps.Keys(r.DecisionReasons))
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%s %.0f", k, r.DecisionReasons[k])
		}
		fmt.Fprintf(w, "%s decisions by reason: %s\n", r.Mode, strings.Join(parts, ", "))
	}
}

// WriteJSON writes c as indented JSON to path.
func (c *Comparison) WriteJSON(path string) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// ParseDecisions sums the samples of flagdown_match_mode_decisions_total in a Prometheus text
// exposition by their mode label (byMode) and by "mode/reason" (byReason).
func ParseDecisions(r io.Reader) (byMode, byReason map[string]float64, err error) {
	byMode, byReason = map[string]float64{}, map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "flagdown_match_mode_decisions_total{") {
			continue
		}
		labels, value, ok := strings.Cut(strings.TrimPrefix(line, "flagdown_match_mode_decisions_total{"), "} ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return nil, nil, fmt.Errorf("decisions: %q: %w", line, err)
		}
		var mode, reason string
		for _, kv := range strings.Split(labels, ",") {
			if k, val, ok := strings.Cut(kv, "="); ok {
				switch k {
				case "mode":
					mode = strings.Trim(val, `"`)
				case "reason":
					reason = strings.Trim(val, `"`)
				}
			}
		}
		if mode != "" {
			byMode[mode] += v
			byReason[mode+"/"+reason] += v
		}
	}
	return byMode, byReason, sc.Err()
}

// CompareOptions configure a comparison beyond the replay's Options.
type CompareOptions struct {
	// Modes are the matching modes to run, in order.
	Modes []string
	// Binary is the flagdown executable started as each mode's platform (`flagdown dev`).
	Binary string
	// Environ is the environment the platforms inherit (os.Environ()); their schema, prefix, mode,
	// speed-up, address and token secret are set by the comparison.
	Environ []string
	// LogDir holds each platform's log (dev-<mode>.log).
	LogDir string
	// Keep keeps each mode's schema and Redis keys after its run (for inspection).
	Keep bool
}

// Compare replays opts under each of co.Modes in turn (see above), prints each run's summary and
// then the comparison table on out, and writes the comparison JSON to opts.SummaryPath (each
// run's own summary next to it, with the mode before the extension). A mode whose run fails (or
// whose invariants do not hold) keeps its row with the error and the others still run; the error
// returned then names the first such mode.
func Compare(ctx context.Context, opts Options, co CompareOptions, out io.Writer) (*Comparison, error) {
	if out == nil {
		out = io.Discard
	}
	if len(co.Modes) == 0 {
		return nil, fmt.Errorf("compare-modes: no mode")
	}
	if opts.JWTSecret == "" {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		opts.JWTSecret = hex.EncodeToString(b)
	}
	if opts.RunID == "" {
		opts.RunID = strconv.FormatInt(time.Now().Unix()%1_000_000_000, 36)
	}
	cmp := &Comparison{LoadAverageStart: loadAverage()}
	summaryPath := opts.SummaryPath
	for _, mode := range co.Modes {
		if ctx.Err() != nil {
			break
		}
		o := opts
		o.MatchMode = mode
		o.RunID = opts.RunID + mode[:1]
		if summaryPath != "" {
			ext := filepath.Ext(summaryPath)
			o.SummaryPath = strings.TrimSuffix(summaryPath, ext) + "-" + mode + ext
		}
		fmt.Fprintf(out, "\n== compare-modes: %s ==\n", mode)
		sum, dec, reasons, err := runMode(ctx, o, co, out)
		row := rowOf(mode, sum)
		row.Decisions, row.DecisionReasons = dec, reasons
		if err != nil {
			row.Err = err.Error()
			fmt.Fprintf(out, "compare-modes: %s: %v\n", mode, err)
		}
		cmp.Rows = append(cmp.Rows, row)
	}
	cmp.LoadAverageEnd = loadAverage()
	fmt.Fprintf(out, "\n== compare-modes: %d drivers%s, %g min after %g skipped, %gx, seed %d, driver starts %s (load average %s → %s) ==\n",
		opts.Drivers, dropNote(opts), opts.Minutes, opts.SkipMinutes, opts.Speedup, opts.Seed, opts.DriverStarts, cmp.LoadAverageStart, cmp.LoadAverageEnd)
	cmp.WriteTable(out)
	if summaryPath != "" {
		if err := cmp.WriteJSON(summaryPath); err != nil {
			return cmp, err
		}
		fmt.Fprintf(out, "comparison written to %s\n", summaryPath)
	}
	if err := ctx.Err(); err != nil {
		return cmp, err
	}
	for _, r := range cmp.Rows {
		if r.Err != "" {
			return cmp, fmt.Errorf("compare-modes: %s: %s", r.Mode, r.Err)
		}
	}
	return cmp, nil
}

// dropNote describes the supply drop of o for the table's title ("" without one).
func dropNote(o Options) string {
	if o.DriversDropTo == 0 {
		return ""
	}
	return fmt.Sprintf(" → %d at %g min", o.DriversDropTo, o.DriversDropAt*o.Minutes)
}

// loadAverage is the first three fields of /proc/loadavg ("" where there is none).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// runMode runs one mode's platform and replay and cleans up after them. It returns the run's
// summary and, in auto mode, the platform's decisions by mode and by "mode/reason".
func runMode(ctx context.Context, o Options, co CompareOptions, out io.Writer) (*Summary, map[string]float64, map[string]float64, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	schema, prefix := "cmp_"+o.RunID, "cmp:"+o.RunID+":"
	set := map[string]string{
		"FLAGDOWN_DB_SCHEMA": schema, "FLAGDOWN_REDIS_PREFIX": prefix, "FLAGDOWN_MATCH_MODE": o.MatchMode,
		"FLAGDOWN_SIM_SPEEDUP": strconv.FormatFloat(o.Speedup, 'f', -1, 64), "FLAGDOWN_JWT_SECRET": o.JWTSecret,
		"FLAGDOWN_ADDR": addr,
	}
	var env []string
	vars := map[string]string{}
	for _, kv := range co.Environ {
		k, v, _ := strings.Cut(kv, "=")
		if _, over := set[k]; over {
			continue
		}
		env = append(env, kv)
		vars[k] = v
	}
	for k, v := range set {
		env = append(env, k+"="+v)
		vars[k] = v
	}
	cfg, err := config.FromEnv(vars)
	if err != nil {
		return nil, nil, nil, err
	}
	o.VerifyConfig, o.URL = cfg, "http://"+addr

	migrate := exec.CommandContext(ctx, co.Binary, "migrate", "--fresh")
	migrate.Env = env
	if b, err := migrate.CombinedOutput(); err != nil {
		return nil, nil, nil, fmt.Errorf("migrate: %v: %s", err, strings.TrimSpace(string(b)))
	}
	if !co.Keep {
		defer cleanup(cfg)
	}
	logf, err := os.Create(filepath.Join(co.LogDir, "dev-"+o.MatchMode+".log"))
	if err != nil {
		return nil, nil, nil, err
	}
	defer logf.Close()
	dev := exec.Command(co.Binary, "dev", "--addr", addr)
	dev.Env, dev.Stdout, dev.Stderr = env, logf, logf
	if err := dev.Start(); err != nil {
		return nil, nil, nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- dev.Wait() }()
	defer func() {
		_ = dev.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = dev.Process.Kill()
			<-exited
		}
	}()
	if err := waitPlatform(ctx, o.URL, exited); err != nil {
		return nil, nil, nil, fmt.Errorf("flagdown dev (%s, log %s): %w", o.MatchMode, logf.Name(), err)
	}
	sum, err := Run(ctx, o, out)
	var dec, reasons map[string]float64
	if o.MatchMode == MatchModeAuto {
		dec, reasons, _ = scrapeDecisions(ctx, o.URL)
	}
	return sum, dec, reasons, err
}

// waitPlatform polls GET url/readyz until 200, the platform exits, or 120 s pass.
func waitPlatform(ctx context.Context, url string, exited <-chan error) error {
	hc := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(120 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/readyz", nil)
		if resp, err := hc.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-exited:
			return fmt.Errorf("exited: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after 120 s")
		}
	}
}

// scrapeDecisions reads the platform's decision counts from GET url/metrics (ParseDecisions).
func scrapeDecisions(ctx context.Context, url string) (byMode, byReason map[string]float64, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
	if err != nil {
		return nil, nil, err
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	return ParseDecisions(resp.Body)
}

// cleanup drops a mode's schema and deletes its Redis keys.
func cleanup(cfg *config.Config) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if d, err := app.Open(ctx, cfg, logging.Discard()); err == nil {
		_, _ = d.Redis.DeleteAll(ctx)
		d.Close()
	}
	_ = pgstore.DropSchema(ctx, cfg.DatabaseURL, cfg.DatabaseSchema)
}
