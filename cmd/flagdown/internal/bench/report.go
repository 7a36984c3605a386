package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"
)

// Row is one figure of the table: what flagdown did, beside the ceiling measured in the same run on
// the same services, and their ratio.
type Row struct {
	// Section groups rows: ingest, order-create, match, end-to-end, memory, micro.
	Section string `json:"section"`
	// Name says what was measured, with its shape (batch size, clients, fleet).
	Name string `json:"name"`
	// Value is flagdown's figure in Unit.
	Value float64 `json:"value"`
	// Unit is the unit of Value and CeilingValue: pings/s, rides/s, ms, B/driver, B/ride, ns/op.
	Unit string `json:"unit"`
	// Ceiling names the raw measure Value is compared with (empty when there is none).
	Ceiling string `json:"ceiling,omitempty"`
	// CeilingValue is the ceiling's figure in Unit; 0 when there is none.
	CeilingValue float64 `json:"ceiling_value,omitempty"`
	// Ratio is Value / CeilingValue (0 when there is no ceiling), or, for figures measured in
	// several rounds, the median of the rounds' ratios. For rates higher is better; for latencies
	// and sizes it says how many times the raw operation flagdown costs.
	Ratio float64 `json:"ratio,omitempty"`
	// Target is the target for this row ("ratio ≥ 0.25", "p99 ≤ 2 ms"), empty when none.
	Target string `json:"target,omitempty"`
	// Met reports whether Target was met; nil when there is no target.
	Met *bool `json:"met,omitempty"`
	// Note carries what else a reader needs (errors, p50, what the ceiling ran).
	Note string `json:"note,omitempty"`
}

// Report is the result of one bench run.
type Report struct {
	// Started is when the run began (UTC).
	Started time.Time `json:"started"`
	// DurationS is how long the run took, seconds.
	DurationS float64 `json:"duration_s"`
	// Quick is true for a --quick (CI smoke) run: figures are indicative only.
	Quick bool `json:"quick"`
	// Machine describes where it ran: CPUs, load averages before and after, service versions.
	Machine Machine `json:"machine"`
	// Rows are the figures, in table order.
	Rows []Row `json:"rows"`
}

// Machine is where a run happened.
type Machine struct {
	// CPUs is runtime.NumCPU().
	CPUs int `json:"cpus"`
	// LoadBefore and LoadAfter are /proc/loadavg's 1, 5 and 15 minute load averages.
	LoadBefore string `json:"load_before"`
	LoadAfter  string `json:"load_after"`
	// Redis is the Redis server version; Postgres the PostgreSQL server version.
	Redis    string `json:"redis"`
	Postgres string `json:"postgres"`
	// GoVersion is the Go toolchain that built the tool.
	GoVersion string `json:"go"`
}

func met(ok bool) *bool { return &ok }

// add appends a row, computing its ratio.
func (r *Report) add(row Row) {
	if row.Ratio == 0 && row.CeilingValue > 0 && !math.IsNaN(row.Value) && !math.IsInf(row.Value, 0) {
		row.Ratio = row.Value / row.CeilingValue
	}
	r.Rows = append(r.Rows, row)
}

func num(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "∞"
	case math.IsNaN(v):
		return "—"
	case v == 0:
		return "0"
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.1f", v)
	case math.Abs(v) >= 1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3g", v)
}

func (row Row) cells() []string {
	ceil, ratio := "—", "—"
	if row.Ceiling != "" {
		ceil = row.Ceiling
		if row.CeilingValue > 0 {
			ceil += ": " + num(row.CeilingValue)
		}
	}
	if row.Ratio != 0 {
		ratio = fmt.Sprintf("%.3g", row.Ratio)
	}
	target := row.Target
	switch {
	case row.Met == nil:
	case *row.Met:
		target += " met"
	default:
		target += " NOT met"
	}
	if target == "" {
		target = "—"
	}
	return []string{row.Section, row.Name, num(row.Value) + " " + row.Unit, ceil, ratio, target, row.Note}
}

var header = []string{"section", "measure", "flagdown", "ceiling (same run)", "ratio", "target", "note"}

// WriteText prints the table for a terminal.
func (r *Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "flagdown bench %s (%.0f s, %d CPUs, load %s → %s, redis %s, postgres %s%s)\n",
		r.Started.Format(time.RFC3339), r.DurationS, r.Machine.CPUs, r.Machine.LoadBefore, r.Machine.LoadAfter,
		r.Machine.Redis, r.Machine.Postgres, map[bool]string{true: ", QUICK: indicative only"}[r.Quick])
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, row := range r.Rows {
		fmt.Fprintln(tw, strings.Join(row.cells(), "\t"))
	}
	_ = tw.Flush()
}

// WriteMarkdown writes the table as a markdown document.
func (r *Report) WriteMarkdown(w io.Writer) {
	fmt.Fprintf(w, "# flagdown bench\n\nWritten by `make bench` (`flagdown bench`); see docs/performance.md (Benchmarks, Capacity model).\n\n")
	fmt.Fprintf(w, "Run %s, %.0f s, %d CPUs, load average (1/5/15 min) %s before and %s after, Redis %s, PostgreSQL %s, %s.",
		r.Started.Format(time.RFC3339), r.DurationS, r.Machine.CPUs, r.Machine.LoadBefore, r.Machine.LoadAfter,
		r.Machine.Redis, r.Machine.Postgres, r.Machine.GoVersion)
	if r.Quick {
		fmt.Fprintf(w, " **Quick run (CI smoke): the figures are indicative only.**")
	}
	fmt.Fprintf(w, "\nEvery ceiling was measured in the same run on the same services; ratio = flagdown / ceiling.\n\n")
	fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(header, " | "), strings.Repeat(" --- |", len(header)))
	for _, row := range r.Rows {
		c := row.cells()
		for i := range c {
			c[i] = strings.ReplaceAll(c[i], "|", "\\|")
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(c, " | "))
	}
}

// WriteFiles writes bench.json and bench.md into dir.
func (r *Report) WriteFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "bench.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	var md strings.Builder
	r.WriteMarkdown(&md)
	return os.WriteFile(filepath.Join(dir, "bench.md"), []byte(md.String()), 0o644)
}
