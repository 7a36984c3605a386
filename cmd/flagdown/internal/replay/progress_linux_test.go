package replay

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openPTY opens a real pseudo-terminal pair (/dev/ptmx and its /dev/pts/N) and returns the master
// and the terminal end.
func openPTY(t *testing.T) (master, tty *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { master.Close() })
	fd := int(master.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlockpt: %v", err)
	}
	n, err := unix.IoctlGetUint32(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("ptsname: %v", err)
	}
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open tty: %v", err)
	}
	t.Cleanup(func() { tty.Close() })
	return master, tty
}

// TestProgressBarOnATerminal: on a real terminal the replay draws the progress bar (redrawn in place
// with carriage returns), not lines.
func TestProgressBarOnATerminal(t *testing.T) {
	master, tty := openPTY(t)
	if !isTerminal(tty) {
		t.Fatal("isTerminal(/dev/pts/N) = false; want true")
	}
	read := make(chan string, 1)
	go func() {
		var buf bytes.Buffer
		_, _ = io.Copy(&buf, master) // ends with EIO once the terminal end is closed
		read <- buf.String()
	}()
	start := time.Now()
	p := newProgress(tty, 10*time.Minute, time.Millisecond, start)
	if p.bar == nil {
		t.Fatal("a terminal got progress lines; want the bar")
	}
	counts := func() progressCounts { return progressCounts{rides: 1, matched: 1} }
	for i := 1; i <= 5; i++ {
		p.update(start.Add(time.Duration(i)*time.Second), time.Duration(i)*time.Minute, counts)
		time.Sleep(250 * time.Millisecond) // past the bar's 200 ms throttle
	}
	p.finish(start.Add(6*time.Second), true, counts)
	tty.Close()
	var got string
	select {
	case got = <-read:
	case <-time.After(5 * time.Second):
		t.Fatal("nothing read from the terminal")
	}
	if !strings.Contains(got, "simulated s") || !strings.Contains(got, "\r") {
		t.Errorf("terminal output %q has no redrawn progress bar (description %q and carriage returns)", got, "simulated s")
	}
	if strings.Contains(got, "replay: ") {
		t.Errorf("terminal output %q has progress lines; want only the bar", got)
	}
}
