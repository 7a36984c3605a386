package replay

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestProgressLinesWhenNotATerminal: on a buffer the replay writes one plain line per interval and a
// last one at the end, never a carriage return.
func TestProgressLinesWhenNotATerminal(t *testing.T) {
	var out bytes.Buffer
	start := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	total := 20 * time.Minute
	p := newProgress(&out, total, 5*time.Second, start)
	if p.bar != nil {
		t.Fatal("a bytes.Buffer got the progress bar; want lines")
	}
	calls := 0
	counts := func() progressCounts { calls++; return progressCounts{rides: 10 * calls, matched: 9 * calls} }
	// 20 ms ticks over 12 s of wall time, simulated time running 8× faster.
	for ms := 0; ms <= 12_000; ms += 20 {
		wall := time.Duration(ms) * time.Millisecond
		p.update(start.Add(wall), 8*wall, counts)
	}
	p.finish(start.Add(12*time.Second+500*time.Millisecond), true, counts)

	got := out.String()
	if strings.ContainsRune(got, '\r') {
		t.Fatalf("output has a carriage return: %q", got)
	}
	want := "replay: 5s elapsed, simulated 0:40/20:00, 10 rides, 9 matched\n" +
		"replay: 10s elapsed, simulated 1:20/20:00, 20 rides, 18 matched\n" +
		"replay: 13s elapsed, simulated 20:00/20:00, 30 rides, 27 matched\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if calls != 3 {
		t.Errorf("counts computed %d times; want 3 (only when a line is written)", calls)
	}
}

// TestProgressInterruptedKeepsSimulatedTime: an interrupted replay's last line shows how far it got.
func TestProgressInterruptedKeepsSimulatedTime(t *testing.T) {
	var out bytes.Buffer
	start := time.Now()
	p := newProgress(&out, 10*time.Minute, time.Hour, start)
	p.update(start.Add(time.Second), 90*time.Second, func() progressCounts { t.Fatal("counts before a line is due"); return progressCounts{} })
	p.finish(start.Add(2*time.Second), false, func() progressCounts { return progressCounts{rides: 3, matched: 1} })
	if got, want := out.String(), "replay: 2s elapsed, simulated 1:30/10:00, 3 rides, 1 matched\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestIsTerminal: buffers, regular files and pipes are not terminals.
func TestIsTerminal(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	for name, out := range map[string]io.Writer{"buffer": &bytes.Buffer{}, "file": f, "pipe": w} {
		if isTerminal(out) {
			t.Errorf("%s: isTerminal = true; want false", name)
		}
	}
}

var lineRE = regexp.MustCompile(`^replay: \d+s elapsed, simulated \d+:\d\d/\d+:\d\d, \d+ rides, \d+ matched$`)

// TestProgressLineFormat: the line is what log readers (and scripts grepping it) expect.
func TestProgressLineFormat(t *testing.T) {
	var out bytes.Buffer
	start := time.Now()
	p := newProgress(&out, 61*time.Minute+5*time.Second, 0, start)
	p.finish(start.Add(42*time.Second), true, func() progressCounts { return progressCounts{rides: 310, matched: 296} })
	line := strings.TrimSuffix(out.String(), "\n")
	if !lineRE.MatchString(line) || !strings.Contains(line, "simulated 61:05/61:05") {
		t.Errorf("line %q does not match %v with simulated 61:05/61:05", line, lineRE)
	}
}
