package replay

import (
	"fmt"
	"io"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// DefaultProgressEvery is how often, in wall time, the replay writes a progress line when its output
// is not a terminal.
const DefaultProgressEvery = 5 * time.Second

// isTerminal reports whether w is a terminal: a file (os.Stdout, os.Stderr, ...) whose descriptor
// refers to a tty. Buffers, pipes, regular files and CI logs are not.
func isTerminal(w io.Writer) bool {
	f, ok := w.(interface{ Fd() uintptr })
	return ok && term.IsTerminal(int(f.Fd()))
}

// progress shows how far a replay is. On a terminal it draws a progress bar over simulated seconds
// (redrawn in place with carriage returns); anywhere else it writes one plain line every `every` of
// wall time and a last one at the end, so a log file gets a few lines instead of thousands of frames.
type progress struct {
	out      io.Writer
	bar      *progressbar.ProgressBar // nil in line mode
	every    time.Duration
	simTotal time.Duration // the whole replay in simulated time (warm-up, window and drain)
	start    time.Time     // wall time of the first update
	last     time.Time     // wall time of the last line written
	lastSim  time.Duration
}

// progressCounts are the figures a progress line shows; the replay computes them only when a line is
// due (it walks every ride).
type progressCounts struct {
	rides, matched int
}

// newProgress returns the progress display fitting out: the bar when out is a terminal, lines every
// `every` otherwise (DefaultProgressEvery when every ≤ 0). simTotal is the replay's length in
// simulated time; start is the wall time the replay starts.
func newProgress(out io.Writer, simTotal, every time.Duration, start time.Time) *progress {
	if every <= 0 {
		every = DefaultProgressEvery
	}
	p := &progress{out: out, every: every, simTotal: simTotal, start: start, last: start}
	if isTerminal(out) {
		p.bar = progressbar.NewOptions64(int64(simTotal.Seconds()),
			progressbar.OptionSetWriter(out),
			progressbar.OptionSetDescription("simulated s"),
			progressbar.OptionShowCount(),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionThrottle(200*time.Millisecond),
			progressbar.OptionSetWidth(30),
		)
	}
	return p
}

// update records that the replay reached sim (simulated time since its start, warm-up included) at
// wall time now; counts is called only when a line is written.
func (p *progress) update(now time.Time, sim time.Duration, counts func() progressCounts) {
	sim = min(max(sim, 0), p.simTotal)
	p.lastSim = sim
	if p.bar != nil {
		_ = p.bar.Set64(int64(sim.Seconds()))
		return
	}
	if now.Sub(p.last) < p.every {
		return
	}
	p.last = now
	p.line(now, counts())
}

// finish ends the display: the bar is completed (when the replay ran to its end) and its line closed;
// in line mode a last line is written.
func (p *progress) finish(now time.Time, completed bool, counts func() progressCounts) {
	if p.bar != nil {
		if completed {
			_ = p.bar.Finish()
		}
		fmt.Fprintln(p.out)
		return
	}
	if completed {
		p.lastSim = p.simTotal
	}
	p.line(now, counts())
}

// line writes one progress line, e.g.
// "replay: 42s elapsed, simulated 12:03/24:04, 310 rides, 296 matched".
func (p *progress) line(now time.Time, c progressCounts) {
	fmt.Fprintf(p.out, "replay: %s elapsed, simulated %s/%s, %d rides, %d matched\n",
		now.Sub(p.start).Round(time.Second), clock(p.lastSim), clock(p.simTotal), c.rides, c.matched)
}

// clock formats a duration as minutes:seconds (90 s → "1:30").
func clock(d time.Duration) string {
	s := int64(d / time.Second)
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}
