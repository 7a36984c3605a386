package testkit

import (
	"strings"
	"sync"
)

// Output collects a child process's stdout and stderr (exec.Cmd copies them from goroutines of its
// own) and is safe to read while the process still writes: a strings.Builder shared that way is a
// data race.
type Output struct {
	mu sync.Mutex
	b  strings.Builder
}

// Write appends p; it never fails.
func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.Write(p)
}

// String returns everything written so far.
func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}
