// Package local is the embedded sandbox runtime: sandboxes on this machine,
// isolated with Linux namespaces, an overlay root filesystem, cgroups,
// seccomp and Landlock, each run by a detached supervisor (`cove
// local-shim`) so it outlives the process that made it. Inside, pid 1 is
// Cove's daemon (`cove local-init`, then the guest API), reached through a
// unix socket in the sandbox's state directory.
package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/guest"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/internal/sbutil"
	"github.com/cove-sandbox/cove/sandbox/local/disk"
	"github.com/cove-sandbox/cove/sandbox/local/internal/host"
	"github.com/cove-sandbox/cove/sandbox/local/internal/sbdir"
	"github.com/cove-sandbox/cove/sandbox/mountinfo"
	"github.com/cove-sandbox/cove/template"
)

// Rootfs is what a sandbox's root filesystem is made of: a template.
type Rootfs struct {
	// Digest identifies the template, for "in use" checks.
	Digest string
	// Lower is the host directory mounted read-only as the overlay's
	// lower layer.
	Lower string
	// Binds are host directories bound read-only at the same path (the
	// host template's /usr and friends).
	Binds []string
	// Env, Workdir and User are the template's defaults.
	Env     map[string]string
	Workdir string
	User    string
}

// Templates resolves template names to root filesystems.
type Templates interface {
	// Resolve returns the template's root filesystem; ErrNotFound if no
	// template has that name.
	Resolve(ctx context.Context, name string) (Rootfs, error)
}

// Config configures a Runtime.
type Config struct {
	// Dir holds one directory per sandbox.
	Dir string
	// Templates resolves Spec.Template; "" means "host". nil means a
	// template store in Dir/.templates.
	Templates Templates
	// Command is the argv prefix that runs the hidden roles (local-shim,
	// and local-init unless InitCommand is set; see Main); nil means this
	// executable. Tests point it at the test binary.
	Command []string
	// InitCommand is the argv prefix the supervisor runs as local-init
	// (the sandbox's pid 1); nil means Command. Both roles start at every
	// sandbox start, so cove runs each from its own small program
	// (cmd/cove-shim here, cmd/cove-sandbox there) that links only what
	// the role needs.
	InitCommand []string
	// Logger receives the runtime's logs; nil discards them.
	Logger *slog.Logger
	// NoHarden skips seccomp/Landlock/capability hardening (debugging only).
	NoHarden bool
	// Env is added to the supervisor's and pid 1's environment (never to
	// sandbox commands): tests use it for GORACE.
	Env []string
	// Pool is how many sandboxes to keep started ahead of demand (see
	// pool.go); 0 means none.
	Pool int
	// PoolDiskBytes is the disk limit of pooled sandboxes; only creates
	// asking for exactly this disk (0: none) are served from the pool.
	PoolDiskBytes int64
	// NetworkRange is where networked sandboxes get their /30s; the
	// zero value means DefaultNetworkRange (network.go).
	NetworkRange netip.Prefix
	// NetworkAllowPrivate lists the ranges, otherwise unreachable, that a
	// spec's Network.Allow may name: private ranges, CGNAT, the host's
	// networks (see network.go). Cloud metadata and the host's own
	// addresses stay unreachable whatever it says; New refuses a list
	// reaching into metadata. nil: none.
	NetworkAllowPrivate []netip.Prefix
	// Runsc is gVisor's runsc, for sandboxes of the gvisor isolation
	// tier; "" means runsc on PATH, else /usr/local/bin/runsc.
	Runsc string
	// DefaultPids is the pids limit of a sandbox whose spec sets none: 0
	// means DefaultPids (the constant), a negative value no limit. The
	// pids of a host are few (pid_max is 32768 on many machines) and
	// shared by every sandbox and the host's own services, so a sandbox
	// without a limit can take the host down with a fork bomb; an
	// operator who wants that anyway says so with a negative value.
	DefaultPids int
}

// DefaultPids is the pids limit of a sandbox whose spec sets none, unless
// Config.DefaultPids says otherwise: room for a build with parallel
// compilers, a language server and a test runner's workers, while 30
// sandboxes together stay below the 32768 pids of a default host.
const DefaultPids = 1024

// Runtime is the local sandbox runtime. State lives in Config.Dir, so
// every Runtime over the same Dir (a later CLI call) sees the same
// sandboxes.
type Runtime struct {
	cfg Config
	log *slog.Logger
	// mu serializes Create/Stop/Resume/Delete within this process;
	// state.json is guarded across processes by each sandbox's flock.
	mu sync.Mutex
	poolState
}

var _ sandbox.Runtime = (*Runtime)(nil)

// New returns a Runtime. It needs root: rootless sandboxes (user
// namespaces) are not supported yet.
func New(cfg Config) (*Runtime, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("the local runtime needs root to create namespaces, mounts and cgroups (rootless mode through user namespaces is not supported yet): run cove as root: %w", sandbox.ErrUnavailable)
	}
	if cfg.Dir == "" {
		return nil, fmt.Errorf("local runtime: no state directory: %w", sandbox.ErrInvalid)
	}
	if err := checkNetworkConfig(&cfg); err != nil {
		return nil, err
	}
	// Absolute: a supervisor's mounts are reached through its namespace's
	// root (host.MountView), from any working directory.
	abs, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("local runtime: state directory: %w", err)
	}
	cfg.Dir = abs
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating the state directory: %w", err)
	}
	if cfg.Command == nil {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		cfg.Command = []string{exe}
	}
	if cfg.InitCommand == nil {
		cfg.InitCommand = cfg.Command
	}
	if cfg.Templates == nil {
		store, err := template.Open(filepath.Join(cfg.Dir, ".templates"))
		if err != nil {
			return nil, err
		}
		cfg.Templates = StoreTemplates{Store: store}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Runtime{cfg: cfg, log: cfg.Logger}, nil
}

func (r *Runtime) dir(id string) string { return filepath.Join(r.cfg.Dir, id) }

func validID(id string) bool { return sbutil.ValidID(id) && !strings.HasPrefix(id, ".") }

// load reads a sandbox's state, correcting it if its supervisor died
// without recording the stop (SIGKILL, host crash).
func (r *Runtime) load(id string) (*state, error) {
	if !validID(id) {
		return nil, fmt.Errorf("sandbox %q: %w", id, sandbox.ErrNotFound)
	}
	st, err := sbdir.Cached(r.dir(id))
	if err != nil {
		return nil, err
	}
	if st.CreatorPID != 0 && st.CreatorPID != os.Getpid() && !sbutil.Alive(st.CreatorPID) {
		r.log.Warn("deleting a sandbox whose creator died mid-create", "id", id, "creator", st.CreatorPID)
		r.gcHalfMade(id, st)
		return nil, fmt.Errorf("sandbox %q: %w", id, sandbox.ErrNotFound)
	}
	if st.Info.State == sandbox.StateRunning && !sbutil.Alive(st.ShimPID) {
		st, err = r.reap(id)
	}
	return st, err
}

// gcHalfMade removes a sandbox whose creating process died before it was
// made: its processes, if it got as far as starting them, and its disk.
func (r *Runtime) gcHalfMade(id string, st *state) {
	for _, pid := range []int{st.ShimPID, st.InitPID} {
		if sbutil.Alive(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if err := r.destroy(context.Background(), id); err != nil {
		r.log.Error("deleting a half-made sandbox", "id", id, "err", err)
	}
}

// reap cleans up after a supervisor that died: kills a leftover pid 1
// and marks the sandbox stopped.
func (r *Runtime) reap(id string) (*state, error) {
	return sbdir.Update(r.dir(id), func(s *state) error {
		if s.Info.State != sandbox.StateRunning || sbutil.Alive(s.ShimPID) {
			return nil
		}
		if sbutil.Alive(s.InitPID) {
			syscall.Kill(s.InitPID, syscall.SIGKILL)
		}
		os.Remove(filepath.Join(r.dir(id), "guest.sock"))
		host.ReleaseCgroup(context.Background(), s)
		if d, err := disk.Open(filepath.Join(r.dir(id), "disk")); err == nil {
			d.Unmount()
		}
		s.Info.State = sandbox.StateStopped
		s.ShimPID, s.InitPID = 0, 0
		s.StopReason = "supervisor died"
		r.log.Warn("sandbox's supervisor died; marked stopped", "id", id)
		return nil
	})
}

// MinPids is the lowest pids limit a sandbox may have: commands need
// some room, and on cgroup v2 hosts the daemon's own threads count against
// the limit (with 8 commands fail at once).
const MinPids = 16

// Create makes a sandbox, or hands out a pooled one when the spec allows.
func (r *Runtime) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Session, error) {
	if err := spec.Normalize(); err != nil {
		return nil, err
	}
	if n := runtime.NumCPU(); spec.Limits.CPUs > float64(n) {
		// A quota above the machine's CPUs limits nothing: say so rather
		// than promise what the sandbox cannot get.
		return nil, fmt.Errorf("cpus %g is more than this machine has (%d): ask for at most %d: %w", spec.Limits.CPUs, n, n, sandbox.ErrInvalid)
	}
	r.defaults(&spec)
	if r.cfg.Pool > 0 && r.poolable(spec) {
		s, ok := r.claim(ctx, spec)
		r.refill()
		if ok {
			return s, nil
		}
	}
	s, err := r.create(ctx, spec, false)
	if err != nil {
		return nil, err
	}
	r.refill()
	return s, nil
}

// defaults fills in the limits a normalized spec leaves to the runtime,
// so the sandbox's recorded spec says what it got.
func (r *Runtime) defaults(spec *sandbox.Spec) {
	if spec.Limits.Pids == 0 {
		switch {
		case r.cfg.DefaultPids == 0:
			spec.Limits.Pids = DefaultPids
		case r.cfg.DefaultPids > 0:
			spec.Limits.Pids = r.cfg.DefaultPids
		}
	}
}

// create makes a sandbox's directories and starts its supervisor. spec
// is normalized, with the runtime's defaults in.
func (r *Runtime) create(ctx context.Context, spec sandbox.Spec, pooled bool) (*guest.Session, error) {
	if n := spec.Limits.Pids; n > 0 && n < MinPids {
		return nil, fmt.Errorf("pids limit %d is too low: a shell and its pipelines need a dozen or so (and on cgroup v2 hosts the daemon's own threads count against it); ask for at least %d: %w", n, MinPids, sandbox.ErrInvalid)
	}
	root := spec.Root
	allow, err := r.checkNetwork(ctx, spec.Network)
	if err != nil {
		return nil, err
	}
	runscPath := ""
	if spec.Isolation == sandbox.IsolationGVisor {
		if runscPath, err = r.findRunsc(); err != nil {
			return nil, err
		}
	}
	tmplName := spec.Template
	if tmplName == "" {
		tmplName = "host"
	}
	rootfs, err := r.cfg.Templates.Resolve(ctx, tmplName)
	if err != nil {
		return nil, fmt.Errorf("template %q: %w", tmplName, err)
	}
	user := spec.User // checked by Normalize
	if user == "" && rootfs.User != "" {
		// An image's "user:group": the group comes from the sandbox's
		// /etc/passwd. A store made before templates were checked may
		// hold any name: pid 1 makes /home/NAME from it.
		user, _, _ = strings.Cut(rootfs.User, ":")
		if err := sandbox.ValidUserName(user); err != nil {
			return nil, fmt.Errorf("template %q names a default user that cannot be used; import it again: %w", tmplName, err)
		}
	}
	if user == "" {
		user = "user"
	}
	env := map[string]string{}
	for k, v := range rootfs.Env {
		env[k] = v
	}
	for k, v := range spec.Env {
		env[k] = v
	}

	id := sbutil.NewID()
	dir := r.dir(id)
	if err := r.newDir(id, spec, pooled); err != nil {
		return nil, fmt.Errorf("creating sandbox %q: %w", id, err)
	}
	if err := os.Mkdir(filepath.Join(dir, "rootfs"), 0o755); err != nil {
		return nil, fmt.Errorf("creating sandbox %q: %w", id, err)
	}
	// The sandbox's own disk: the overlay's upper dir, on an ext4 image
	// capped at the disk limit, its whole limit reserved on the host
	// (plain directories without one). It is mounted only by the
	// sandbox's supervisor, in a mount namespace of its own (see package
	// shim). Pristine images are kept per size and copied: mkfs on every
	// create costs about 5 ms more.
	d, err := disk.Create(ctx, filepath.Join(dir, "disk"), spec.Limits.DiskBytes, disk.WithImageCache(filepath.Join(r.cfg.Dir, ".images")))
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("creating sandbox %q: %w", id, spaceError(err))
	}
	st := &state{
		Pooled:   pooled,
		Info:     sandbox.Info{ID: id, State: sandbox.StateStopped, Spec: spec, CreatedAt: time.Now().UTC()},
		Token:    sbutil.NewToken(),
		Template: rootfs.Digest,
		Runsc:    runscPath,
		Init: initConfig{
			Dir: dir, Lower: rootfs.Lower, Binds: rootfs.Binds,
			Upper: d.Upper(), Work: d.Work(),
			Workspace: root, UID: 1000, GID: 1000, User: user, Hostname: id,
			Env: env, Harden: !r.cfg.NoHarden,
		},
	}
	st.CreatorPID = os.Getpid()
	if err := r.writeWithNetwork(id, st, spec.Network.Mode, allow); err != nil {
		r.destroy(context.WithoutCancel(ctx), id)
		return nil, fmt.Errorf("creating sandbox %q: %w", id, err)
	}
	// No runtime-wide lock here: the new sandbox is this call's alone
	// until it returns (its id is known to no one else; other processes
	// create beside it with only its own flock, as this one now does), so
	// creates of one process start their sandboxes side by side instead
	// of one after the other.
	c, st, err := r.startLocked(ctx, id, st)
	if err != nil {
		r.destroy(context.WithoutCancel(ctx), id)
		return nil, fmt.Errorf("creating sandbox %q: %w", id, err)
	}
	return r.sessionOn(c, id, st), nil
}

// startLocked starts the supervisor, waits until the daemon answers and
// records the sandbox running (and made: CreatorPID cleared). It returns
// the client that saw the daemon answer, already connected, for the
// sandbox's session, and the state as recorded. The caller holds r.mu,
// or owns a sandbox no one else knows yet.
func (r *Runtime) startLocked(ctx context.Context, id string, st *state) (*guest.Client, *state, error) {
	dir := r.dir(id)
	// Each run adds at most sbutil.MaxRunLog of pid 1's lines; the file
	// keeps a few runs' worth.
	if err := sbutil.TrimLog(filepath.Join(dir, "sandbox.log"), 4*sbutil.MaxRunLog, sbutil.MaxRunLog); err != nil {
		r.log.Warn("trimming a sandbox's host log", "sandbox", id, "err", err)
	}
	logf, err := os.OpenFile(filepath.Join(dir, "sandbox.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, err
	}
	defer logf.Close()
	// The daemon's socket is opened here and handed down (supervisor, then
	// pid 1): a client can connect at once, the kernel queues it, and the
	// first health check is answered the moment the daemon serves, with no
	// polling.
	args := append(append([]string(nil), r.cfg.Command[1:]...), "local-shim", "--dir", dir)
	args = append(args, r.cfg.InitCommand...) // what the supervisor runs as local-init
	cmd := exec.Command(r.cfg.Command[0], args...)
	if !gvisor(st) {
		lf, err := listenFile(filepath.Join(dir, "guest.sock"))
		if err != nil {
			return nil, nil, err
		}
		defer lf.Close()
		cmd.ExtraFiles = []*os.File{lf}
	}
	// A clean environment: the caller's secrets stay out of the sandbox.
	cmd.Env = append([]string{"PATH=" + sbdir.DefaultPath}, r.cfg.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("starting the supervisor: %w", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()

	// The socket listens already, so the dial succeeds at once; the
	// client goes on to serve the sandbox's session.
	c, err := r.client(id, st, cmd.Process.Pid)
	if err != nil {
		return nil, nil, err
	}
	deadline := time.Now().Add(startTimeout(st))
	if gvisor(st) {
		// The daemon binds its socket only once it serves: wait for it
		// here, at a finer grain than the client's dial backoff.
		waitSocket(ctx, func() string { return r.gvisorSocket(id, cmd.Process.Pid) }, exited, deadline)
	}
	for {
		hctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		err := c.Health(hctx)
		cancel()
		if err == nil {
			// The daemon may answer before the supervisor has recorded
			// itself: record it here too, so nobody takes the sandbox for
			// one whose supervisor died.
			st, err := sbdir.Update(dir, func(s *state) error {
				if s.ShimPID == 0 {
					s.ShimPID = cmd.Process.Pid
				}
				s.Info.State = sandbox.StateRunning
				s.CreatorPID = 0
				if s.Info.Paused {
					// Its memory is back in the running sandbox; a later
					// stop starts afresh.
					s.Info.Paused = false
					os.RemoveAll(memoryDir(dir))
				}
				return nil
			})
			if err != nil {
				c.Close()
				return nil, nil, err
			}
			return c, st, nil
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "sandbox.log"))
			c.Close()
			return nil, nil, fmt.Errorf("the sandbox stopped while starting: %s: %w", sbutil.LastLines(string(log), 4), sandbox.ErrUnavailable)
		default:
		}
		if ctx.Err() != nil {
			c.Close()
			return nil, nil, ctx.Err()
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "sandbox.log"))
			c.Close()
			return nil, nil, fmt.Errorf("the sandbox's daemon did not answer within %s: %s: %w", startTimeout(st), sbutil.LastLines(string(log), 4), sandbox.ErrUnavailable)
		}
		time.Sleep(time.Millisecond)
	}
}

func (r *Runtime) session(id string, st *state) *guest.Session {
	c, _ := r.client(id, st, st.ShimPID)
	return r.sessionOn(c, id, st)
}

// sessionOn is session over a client already made.
func (r *Runtime) sessionOn(c *guest.Client, id string, st *state) *guest.Session {
	return guest.NewSession(c, guest.RuntimeSessionOptions(id, st.Info.Spec.Root, func(ctx context.Context) (sandbox.Info, error) {
		st, err := r.load(id)
		if err != nil {
			return sandbox.Info{}, err
		}
		return st.Info, nil
	}, " (cove sandbox resume)"))
}

func (r *Runtime) Get(ctx context.Context, id string) (sandbox.Session, error) {
	st, err := r.load(id)
	if err != nil {
		return nil, err
	}
	return r.session(id, st), nil
}

func (r *Runtime) List(ctx context.Context) ([]sandbox.Info, error) {
	r.sweepNew()
	return sbutil.ListSandboxes(r.cfg.Dir, func(id string) (sandbox.Info, bool) {
		st, err := r.load(id)
		if err != nil || st.Pooled {
			return sandbox.Info{}, false
		}
		in := st.Info
		in.Deadline = st.Deadline
		return in, true
	})
}

// newDir makes a sandbox's directory with a first record naming this
// process as its creator, so that what a creator killed mid-way leaves is
// found and removed (load). The directory appears under its name only with
// that record in it: a kill before leaves a hidden .new-* directory, which
// sweepNew removes.
func (r *Runtime) newDir(id string, spec sandbox.Spec, pooled bool) error {
	tmp := filepath.Join(r.cfg.Dir, ".new-"+id)
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return err
	}
	if err := sbdir.Write(tmp, &state{Info: sandbox.Info{ID: id, State: sandbox.StateStopped, Spec: spec, CreatedAt: time.Now().UTC()}, CreatorPID: os.Getpid(), Pooled: pooled}); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	if err := os.Rename(tmp, r.dir(id)); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	return nil
}

// sweepNew removes the .new-* directories of creates killed before their
// first record was in place, once they are surely not in the making.
func (r *Runtime) sweepNew() {
	entries, err := os.ReadDir(r.cfg.Dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ".new-") {
			continue
		}
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > time.Minute {
			os.RemoveAll(filepath.Join(r.cfg.Dir, e.Name()))
		}
	}
}

// Stop asks the supervisor to end the sandbox and waits until it has.
func (r *Runtime) Stop(ctx context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stopLocked(ctx, id)
}

func (r *Runtime) stopLocked(ctx context.Context, id string) error {
	st, err := r.load(id)
	if err != nil {
		return err
	}
	if st.Info.State != sandbox.StateRunning {
		return nil
	}
	syscall.Kill(st.ShimPID, syscall.SIGTERM)
	for deadline := time.Now().Add(10 * time.Second); sbutil.Alive(st.ShimPID); {
		if time.Now().After(deadline) {
			syscall.Kill(st.ShimPID, syscall.SIGKILL)
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	if _, err = r.load(id); err != nil { // marks it stopped if the supervisor could not
		return err
	}
	// Stopped means its disk can be mounted again: the loop device is
	// free once the last mount of its filesystem is gone, in any mount
	// namespace. A process that holds it (one that entered the
	// supervisor's namespace, an open file there) makes that a lie.
	if d, err := disk.Open(filepath.Join(r.dir(id), "disk")); err == nil {
		if err := d.WaitFree(5 * time.Second); err != nil {
			return fmt.Errorf("stopping sandbox %q: its processes ended, but %w", id, errDiskHeld{err})
		}
	}
	return nil
}

// errDiskHeld is a stop's error when the sandbox stopped but its disk is
// still held on the host: Delete goes on regardless.
type errDiskHeld struct{ error }

func (e errDiskHeld) Unwrap() error { return e.error }

// spaceError is err, unless it says the host cannot back a disk: then the
// disk package's own message, which names no host path.
func spaceError(err error) error {
	var se *disk.SpaceError
	if errors.As(err, &se) {
		return se
	}
	return err
}

func (r *Runtime) Resume(ctx context.Context, id string) (sandbox.Session, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.resumeLocked(ctx, id)
}

func (r *Runtime) resumeLocked(ctx context.Context, id string) (sandbox.Session, error) {
	st, err := r.load(id)
	if err != nil {
		return nil, err
	}
	if st.Info.State != sandbox.StateRunning {
		if !st.Deadline.IsZero() && time.Now().After(st.Deadline) {
			// A TTL measures the sandbox's life, not one run of it.
			return nil, fmt.Errorf("sandbox %q reached its TTL at %s; create a new one or fork it: %w", id, st.Deadline.Format(time.RFC3339), sandbox.ErrState)
		}
		// The disk's last mount (in the namespace of the supervisor that
		// stopped) may take a moment to go: its unmount writes the
		// filesystem's journal and the loop device flushes its image,
		// seconds on a host whose disk is busy (measured: 2 s idle, over
		// 10 s under a full test run). And a disk made sparse by an older
		// Cove gets its space reserved, or the resume is refused.
		if d, err := disk.Open(filepath.Join(r.dir(id), "disk")); err == nil {
			if err := d.WaitFree(30 * time.Second); err != nil {
				return nil, fmt.Errorf("resuming sandbox %q: %w", id, err)
			}
			if err := d.Reserve(); err != nil {
				return nil, fmt.Errorf("resuming sandbox %q: %w", id, spaceError(err))
			}
		}
		c, started, err := r.startLocked(ctx, id, st)
		if err != nil && st.Info.Paused {
			return nil, r.restoreFailed(id, err)
		}
		if err != nil {
			return nil, fmt.Errorf("resuming sandbox %q: %w", id, err)
		}
		return r.sessionOn(c, id, started), nil
	}
	return r.session(id, st), nil
}

func (r *Runtime) Delete(ctx context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.stopLocked(ctx, id); err != nil && !errors.As(err, new(errDiskHeld)) {
		return err
	}
	return r.destroy(ctx, id)
}

// writeWithNetwork writes the sandbox's state with its network plan (nil
// for loopback only); its supervisor picks its addresses at every start.
func (r *Runtime) writeWithNetwork(id string, st *state, mode string, allow []allowRule) error {
	st.Init.Net = nil
	if mode != "" && mode != NetworkNone {
		st.Init.Net = r.netPlan(id, mode, allow)
	}
	return sbdir.Write(r.dir(id), st)
}

// destroy frees a stopped sandbox's cgroup, network, disk and state.
func (r *Runtime) destroy(ctx context.Context, id string) error {
	dir := r.dir(id)
	if st, err := sbdir.Read(dir); err == nil {
		host.ReleaseCgroup(ctx, st)
		if st.Init.Net != nil {
			// Its supervisor removes these when it stops; one killed
			// first leaves them.
			if err := host.NetDown(r.cfg.Dir, id, st.Init.Net); err != nil {
				r.log.Warn("removing a sandbox's network rules", "sandbox", id, "err", err)
			}
		}
	}
	// Nothing may stay mounted under the directory when it is deleted:
	// RemoveAll would delete through a mount into what it shows (the
	// template under an overlay left on rootfs by a start cut short, a
	// host directory bound somewhere in the disk). The capped disk's own
	// mount is the disk's to undo, and the disk must go before its
	// directory.
	d, err := disk.Open(filepath.Join(dir, "disk"))
	own := ""
	if err == nil && d.Limit() != 0 {
		own = filepath.Dir(d.Upper())
	}
	if err := detachMountsUnder(dir, own); err != nil {
		return fmt.Errorf("deleting sandbox %q: %w", id, err)
	}
	if d != nil {
		if err := removeClearingFlags(dir, d.Remove); err != nil {
			return fmt.Errorf("deleting sandbox %q: %w", id, err)
		}
	}
	if err := detachMountsUnder(dir, ""); err != nil {
		return fmt.Errorf("deleting sandbox %q: %w", id, err)
	}
	if err := removeClearingFlags(dir, func() error { return os.RemoveAll(dir) }); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("deleting sandbox %q: %w", id, err)
	}
	return nil
}

// detachMountsUnder detaches every mount at or below dir except the one
// on keep, deepest first, and returns an error if any is left: one for
// the operator (it names the host path), so no sentinel a front door
// would show a tenant.
func detachMountsUnder(dir, keep string) error {
	for range 3 {
		mounts := mountsUnder(dir, keep)
		if len(mounts) == 0 {
			return nil
		}
		for i := len(mounts) - 1; i >= 0; i-- { // mountinfo lists parents first
			syscall.Unmount(mounts[i], syscall.MNT_DETACH)
		}
	}
	if mounts := mountsUnder(dir, keep); len(mounts) > 0 {
		return fmt.Errorf("%s is still mounted and cannot be detached; not deleting through it", mounts[0])
	}
	return nil
}

// mountsUnder lists the mount points at or below dir, other than keep,
// in mount order.
func mountsUnder(dir, keep string) []string {
	mounts, _ := mountinfo.Under(dir)
	return slices.DeleteFunc(mounts, func(m string) bool { return m == keep })
}

// Inode flags that stop a file from being deleted (<linux/fs.h>).
const (
	fsImmutable  = 0x10 // FS_IMMUTABLE_FL
	fsAppendOnly = 0x20 // FS_APPEND_FL
)

// removeClearingFlags runs remove and, when it fails for lack of
// permission (as root, that is an immutable or append-only file: a
// template's, copied up into the disk), takes those flags off everything
// under dir and runs it again.
func removeClearingFlags(dir string, remove func() error) error {
	err := remove()
	if !errors.Is(err, syscall.EPERM) {
		return err
	}
	clearFileFlags(dir)
	return remove()
}

// clearFileFlags takes the immutable and append-only flags off the
// directories and regular files under dir. It follows no link (nothing
// is mounted under dir any more, and the sandbox is stopped: its disk
// does not change meanwhile) and opens nothing else.
func clearFileFlags(dir string) {
	filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || !(e.IsDir() || e.Type().IsRegular()) {
			return nil
		}
		f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
		if err != nil {
			return nil
		}
		defer f.Close()
		if fi, err := f.Stat(); err != nil || fi.IsDir() != e.IsDir() {
			return nil
		}
		flags, err := unix.IoctlGetUint32(int(f.Fd()), unix.FS_IOC_GETFLAGS)
		if err == nil && flags&(fsImmutable|fsAppendOnly) != 0 {
			unix.IoctlSetPointerInt(int(f.Fd()), unix.FS_IOC_SETFLAGS, int(flags&^(fsImmutable|fsAppendOnly)))
		}
		return nil
	})
}

// Processes returns the host pids of a running sandbox's supervisor and
// pid 1, for measuring what a sandbox costs.
func (r *Runtime) Processes(id string) ([]int, error) {
	st, err := r.load(id)
	if err != nil {
		return nil, err
	}
	if st.Info.State != sandbox.StateRunning {
		return nil, fmt.Errorf("sandbox %q is not running: %w", id, sandbox.ErrState)
	}
	return []int{st.ShimPID, st.InitPID}, nil
}
