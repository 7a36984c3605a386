package chaos

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// proc is one child process the controller starts, kills and restarts. Its stdout and stderr are
// appended to logPath across restarts.
type proc struct {
	name    string
	path    string
	args    []string
	env     []string
	logPath string
	cred    *syscall.Credential // the user and group it runs as; nil: this process's

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when the current process has exited
	code int           // exit status of the last exited process (-1: killed by a signal)
}

// start starts the process (it must not be running) with extraEnv appended to its environment.
func (p *proc) start(extraEnv ...string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("%s: already running", p.name)
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "\n===== chaos: starting %s at %s %v\n", p.name, time.Now().UTC().Format(time.RFC3339Nano), extraEnv)
	cmd := exec.Command(p.path, p.args...)
	cmd.Env = append(append([]string{}, p.env...), extraEnv...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr()
	cmd.SysProcAttr.Credential = p.cred
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("%s: start %s: %w", p.name, p.path, err)
	}
	done := make(chan struct{})
	p.cmd, p.done = cmd, done
	go func() {
		err := cmd.Wait()
		logf.Close()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode() // -1 when killed by a signal
		} else if err != nil {
			code = -2
		}
		p.mu.Lock()
		p.code = code
		if p.cmd == cmd {
			p.cmd = nil
		}
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// running reports whether the process is running, and the channel closed when it exits.
func (p *proc) running() (bool, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil, p.done
}

// exitCode is the exit status of the last process that exited.
func (p *proc) exitCode() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.code
}

// signal sends sig to the running process and waits up to wait for it to exit; when it has not,
// it is SIGKILLed. It returns false when nothing was running.
func (p *proc) signal(sig syscall.Signal, wait time.Duration) bool {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return false
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
		return true
	case <-time.After(wait):
	}
	_ = cmd.Process.Kill()
	<-done
	return true
}

// send sends sig to the running process without waiting (SIGSTOP, SIGCONT); it returns false when
// nothing was running.
func (p *proc) send(sig syscall.Signal) bool {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd == nil {
		return false
	}
	return cmd.Process.Signal(sig) == nil
}

// kill SIGKILLs the process and waits for it to be gone.
func (p *proc) kill() bool { return p.signal(syscall.SIGKILL, 10*time.Second) }

// stop asks the process to stop (SIGTERM), SIGKILLing it after 15 s.
func (p *proc) stop() bool { return p.signal(syscall.SIGTERM, 15*time.Second) }

// freePorts returns n distinct free loopback TCP ports.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
