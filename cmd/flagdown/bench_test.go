package main

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flagdown/flagdown/cmd/flagdown/internal/bench"
	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/config"
)

// TestBenchQuickShape runs `flagdown bench --quick` end to end against the real services (a smoke
// run of a few seconds: shrunk stages, one small fleet, 1-second end-to-end steps) and checks the
// shape of what it writes: every section present, every flagdown figure positive, every ceiling
// measured in the same run with its ratio, every target marked met or not. It checks no speed.
func TestBenchQuickShape(t *testing.T) {
	for _, tool := range []string{"redis-benchmark", "pgbench"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (Debian: redis-tools, postgresql-client; scripts/bench.sh installs them)", tool)
		}
	}
	cfg, err := config.FromEnv(map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.DatabaseURL, cfg.RedisURL = testkit.DatabaseURL(), testkit.RedisURL()
	o := benchOptions(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	o.TripsPath = filepath.Join(testkit.RepoRoot(t), "testdata", "trips.csv")
	o.Quick, o.Fleets, o.StepDuration = true, []int{1000}, time.Second
	micro := filepath.Join(t.TempDir(), "micro.txt")
	if err := os.WriteFile(micro, []byte("pkg: github.com/flagdown/flagdown/shared/dispatch\n"+
		"BenchmarkScore-2   	1000000	      12.5 ns/op	       0 B/op	       0 allocs/op\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o.MicroFile = micro
	rep, err := bench.Run(t.Context(), o)
	if err != nil {
		t.Fatalf("bench: %v", err)
	}
	dir := t.TempDir()
	if err := rep.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	var got bench.Report
	js, err := os.ReadFile(filepath.Join(dir, "bench.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(js, &got); err != nil {
		t.Fatalf("bench.json: %v", err)
	}
	if !got.Quick || got.Machine.CPUs < 1 || got.Machine.Redis == "" || got.Machine.Postgres == "" {
		t.Errorf("machine = %+v, quick %v; want CPUs, versions and quick", got.Machine, got.Quick)
	}
	sections := map[string]int{}
	targets := 0
	for _, r := range got.Rows {
		sections[r.Section]++
		if r.Section != "micro" && !(r.Value > 0) {
			t.Errorf("%s / %s: value %v, want > 0", r.Section, r.Name, r.Value)
		}
		if r.Ceiling != "" && r.Section != "micro" && (!(r.CeilingValue > 0) || r.Ratio <= 0) {
			t.Errorf("%s / %s: ceiling %q = %v, ratio %v; want a measured ceiling and its ratio", r.Section, r.Name, r.Ceiling, r.CeilingValue, r.Ratio)
		}
		if r.Target != "" {
			targets++
			if r.Met == nil {
				t.Errorf("%s / %s: target %q not marked met or not", r.Section, r.Name, r.Target)
			}
		}
	}
	for _, s := range []string{"ingest", "order-create", "match", "end-to-end", "memory", "micro"} {
		if sections[s] == 0 {
			t.Errorf("no %s rows in %v", s, sections)
		}
	}
	// Quick runs have no 100k/1M fleets, so their two match targets are absent.
	if targets < 5 {
		t.Errorf("%d rows with a target, want at least 5 (ingest ×3, order-create, Redis bytes, end-to-end)", targets)
	}
	md, err := os.ReadFile(filepath.Join(dir, "bench.md"))
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	rep.WriteText(&text)
	for name, out := range map[string]string{"bench.md": string(md), "text": text.String()} {
		for _, want := range []string{"ceiling (same run)", "ratio", "HTTP batch 500", "pgbench", "highest sustained rate"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s lacks %q", name, want)
			}
		}
	}
}
