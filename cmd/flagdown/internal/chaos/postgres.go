package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgServer is the run's private PostgreSQL (initdb'd in the run's work dir, trust auth, a child
// process on a free port), started only when the run injects PostgresRestart: the shared
// PostgreSQL of Options.DatabaseURL is never restarted. Run as root, it runs as the system user
// postgres (PostgreSQL refuses root).
type pgServer struct {
	bin  string // directory of initdb and postgres
	port int
	dir  string
	cred *syscall.Credential // nil: this process's user
	proc *proc
}

// url is the DATABASE_URL of the private server.
func (s *pgServer) url() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port)
}

// findPostgres returns the directory holding initdb and postgres: on PATH, or Debian's
// /usr/lib/postgresql/<version>/bin (newest first).
func findPostgres() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if _, err := exec.LookPath("postgres"); err == nil {
			return filepath.Dir(p), nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "initdb")); err == nil {
			return dirs[i], nil
		}
	}
	return "", fmt.Errorf("chaos: the postgres_restart fault needs PostgreSQL's initdb and postgres (Debian: apt-get install postgresql)")
}

// PostgresAvailable reports why a run cannot inject PostgresRestart on this machine (nil: it can):
// PostgreSQL's server binaries are not installed.
func PostgresAvailable() error {
	_, err := findPostgres()
	return err
}

// newPGServer prepares a private server in dir on port.
func newPGServer(dir string, port int) (*pgServer, error) {
	bin, err := findPostgres()
	if err != nil {
		return nil, err
	}
	s := &pgServer{bin: bin, port: port, dir: dir}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("chaos: run as root, the private PostgreSQL runs as user postgres, which does not exist: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	return s, nil
}

// start initdb's the data directory on first use, starts postgres and waits until it accepts a
// connection.
func (s *pgServer) start(ctx context.Context) error {
	data := filepath.Join(s.dir, "data")
	if s.proc == nil {
		if err := os.MkdirAll(s.dir, 0o700); err != nil {
			return err
		}
		if s.cred != nil {
			// postgres's user must reach its directory through the run's (private) work dir.
			if err := os.Chmod(filepath.Dir(s.dir), 0o711); err != nil {
				return err
			}
			if err := os.Chown(s.dir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
				return err
			}
		}
		initdb := exec.CommandContext(ctx, filepath.Join(s.bin, "initdb"), "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8")
		initdb.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
		if out, err := initdb.CombinedOutput(); err != nil {
			return fmt.Errorf("chaos: initdb: %v: %s", err, out)
		}
		s.proc = &proc{name: "postgres", path: filepath.Join(s.bin, "postgres"), env: os.Environ(), cred: s.cred,
			logPath: filepath.Join(s.dir, "postgres.log"),
			args: []string{"-D", data, "-p", strconv.Itoa(s.port), "-c", "listen_addresses=127.0.0.1",
				"-c", "unix_socket_directories=" + s.dir, "-c", "max_connections=300", "-c", "fsync=off"}}
	}
	if err := s.proc.start(); err != nil {
		return err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(cctx, s.url())
		if err == nil {
			err = conn.Ping(cctx)
			conn.Close(cctx)
		}
		cancel()
		if err == nil {
			return nil
		}
		if up, _ := s.proc.running(); !up {
			return fmt.Errorf("chaos: postgres exited with status %d (log %s)", s.proc.exitCode(), s.proc.logPath)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("chaos: the private PostgreSQL on port %d is not answering: %v", s.port, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// restart stops the server the way a crash does (SIGQUIT: immediate shutdown, no checkpoint; every
// connection and transaction in flight is cut, the next start runs crash recovery), waits down for
// a moment, and starts it again.
func (s *pgServer) restart(ctx context.Context, down time.Duration) error {
	s.proc.signal(syscall.SIGQUIT, 30*time.Second)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(down):
	}
	return s.start(ctx)
}

// stop shuts the server down (SIGINT: fast shutdown).
func (s *pgServer) stop() {
	if s.proc != nil {
		s.proc.signal(syscall.SIGINT, 15*time.Second)
	}
}
