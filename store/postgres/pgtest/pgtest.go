// Package pgtest starts a real PostgreSQL for tests: Debian's server
// binaries (/usr/lib/postgresql/*/bin), a cluster made by initdb in a
// temporary directory, listening only on a unix socket in that directory
// (no TCP port, so nothing collides with other tests or the host's own
// PostgreSQL), stopped and removed when the test ends.
//
// Use NewDatabase for a fresh, empty database per test. A test binary
// whose TestMain calls Main shares one server among its tests (a server
// start costs about a second); without Main, each test gets its own.
// A test skips, saying why, only when PostgreSQL is not installed
// (scripts/deps.sh installs it). COVE_TEST_PG_BIN names another bin
// directory (initdb, postgres) to use instead.
//
// If the test binary is killed, its servers get SIGQUIT (an immediate
// shutdown) from the kernel; their /tmp/cove-pg-* directories stay.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Server is a running PostgreSQL of a test.
type Server struct {
	// Dir holds the cluster (Dir/data), the socket and the log.
	Dir  string
	bin  string
	cred *syscall.Credential
	cmd  *exec.Cmd
	done chan struct{}
}

// errAbsent: the machine has no PostgreSQL server binaries.
var errAbsent = errors.New("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/postgres); scripts/deps.sh test installs it")

// binDir finds the newest /usr/lib/postgresql/<version>/bin with a
// server in it.
func binDir() (string, error) {
	if d := os.Getenv("COVE_TEST_PG_BIN"); d != "" {
		return d, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "postgres")); err == nil {
			return d, nil
		}
	}
	return "", errAbsent
}

func version(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// credential is who runs initdb and the server: PostgreSQL refuses to
// run as root, so root runs them as the postgres user (Debian's package
// makes it); anyone else runs them as themselves.
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL refuses to run as root and there is no postgres user to run it as (Debian's postgresql package makes one): %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// Start makes a cluster in a new temporary directory and starts its
// server; tb's cleanup stops it and removes the directory. It skips tb
// when PostgreSQL is not installed.
func Start(tb testing.TB) *Server {
	tb.Helper()
	s, err := start()
	if errors.Is(err, errAbsent) {
		tb.Skip(err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Stop)
	return s
}

func start() (*Server, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	cred, err := credential()
	if err != nil {
		return nil, err
	}
	// Not t.TempDir: its parents are root's, closed to the postgres user.
	dir, err := os.MkdirTemp("", "cove-pg-")
	if err != nil {
		return nil, err
	}
	s := &Server{Dir: dir, bin: bin, cred: cred}
	if err := s.initdb(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := s.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

func (s *Server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.Dir = s.Dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C", "TZ=UTC"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	return cmd
}

func (s *Server) initdb() error {
	if s.cred != nil {
		if err := os.Chown(s.Dir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return err
		}
	}
	// --no-sync: a test cluster need not survive a host crash (the server
	// itself runs with fsync on). trust: only the socket reaches the server, and its directory is
	// closed to everyone but the server's user (and root).
	out, err := s.command("initdb", "--pgdata", filepath.Join(s.Dir, "data"), "--username", "postgres",
		"--auth", "trust", "--encoding", "UTF8", "--locale", "C", "--no-instructions", "--no-sync").CombinedOutput()
	if err != nil {
		return fmt.Errorf("initdb: %v\n%s", err, out)
	}
	return nil
}

// Start starts the server (again, after Kill or Stop) and waits until it
// takes connections. The data directory stays as it was.
func (s *Server) Start() error {
	log, err := os.OpenFile(filepath.Join(s.Dir, "postgres.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := s.command("postgres", "-D", filepath.Join(s.Dir, "data"),
		"-c", "listen_addresses=", "-c", "unix_socket_directories="+s.Dir,
		"-c", "unix_socket_permissions=0700", "-c", "max_connections=200",
		"-c", "fsync=on", "-c", "synchronous_commit=on")
	cmd.Stdout, cmd.Stderr = log, log
	// If the test binary dies, the server goes too (an immediate
	// shutdown, which also ends its backends).
	cmd.SysProcAttr.Pdeathsig = syscall.SIGQUIT
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting postgres: %w", err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func() { cmd.Wait(); close(s.done) }()
	if err := s.waitReady(); err != nil {
		s.Kill()
		return err
	}
	return nil
}

func (s *Server) waitReady() error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c, err := pgx.Connect(ctx, s.URL("postgres"))
		cancel()
		if err == nil {
			c.Close(context.Background())
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("postgres exited at start: %s", s.logTail())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres did not take connections in 60s: %v\n%s", err, s.logTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *Server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, "postgres.log"))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-10):], "\n")
}

// URL is a connection URL of database db over the server's socket.
func (s *Server) URL(db string) string {
	q := url.Values{"host": {s.Dir}, "sslmode": {"disable"}}
	return (&url.URL{Scheme: "postgres", User: url.User("postgres"), Path: "/" + db, RawQuery: q.Encode()}).String()
}

// Kill kills the server with SIGKILL, as a crash would: the postmaster
// and every process of its cluster (its backends would exit by
// themselves when they notice it gone, but until then they hold its
// shared memory and a new server cannot start). Start recovers from the
// write-ahead log.
func (s *Server) Kill() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
	s.cmd = nil
	data := filepath.Join(s.Dir, "data")
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		pids := clusterPids(data)
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// clusterPids lists the processes working in the data directory: every
// PostgreSQL process of a cluster has it as its working directory.
func clusterPids(data string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd")); err == nil && cwd == data {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Stop shuts the server down (fast: rolls back open transactions) and
// removes its directory.
func (s *Server) Stop() {
	if s.cmd != nil {
		s.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-s.done:
		case <-time.After(30 * time.Second):
			s.cmd.Process.Signal(syscall.SIGQUIT)
			<-s.done
		}
		s.cmd = nil
	}
	os.RemoveAll(s.Dir)
}

// CreateDatabase makes a new empty database and returns its URL.
func (s *Server) CreateDatabase(ctx context.Context, name string) (string, error) {
	c, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return "", err
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("creating database %s: %w", name, err)
	}
	return s.URL(name), nil
}

var (
	shared     *Server
	sharedErr  error
	sharedOnce sync.Once
	inMain     atomic.Bool
	dbCount    atomic.Int64
)

// Main runs a test binary's tests (call it from TestMain) with one
// server shared by their NewDatabase calls, and stops it after.
func Main(m *testing.M) {
	inMain.Store(true)
	code := m.Run()
	if shared != nil {
		shared.Stop()
	}
	os.Exit(code)
}

// NewDatabase returns the URL of a new, empty database: on the binary's
// shared server under Main, else on a server of tb's own.
func NewDatabase(tb testing.TB) string {
	tb.Helper()
	s := For(tb)
	name := fmt.Sprintf("test_%d_%d", os.Getpid(), dbCount.Add(1))
	u, err := s.CreateDatabase(context.Background(), name)
	if err != nil {
		tb.Fatal(err)
	}
	return u
}

// For returns the binary's shared server under Main, or a new server of
// tb's own.
func For(tb testing.TB) *Server {
	tb.Helper()
	if !inMain.Load() {
		return Start(tb)
	}
	sharedOnce.Do(func() { shared, sharedErr = start() })
	if errors.Is(sharedErr, errAbsent) {
		tb.Skip(sharedErr)
	}
	if sharedErr != nil {
		tb.Fatal(sharedErr)
	}
	return shared
}
