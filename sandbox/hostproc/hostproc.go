// Package hostproc runs each sandbox's daemon (`cove guest`) as a plain
// child process of the host, over a private directory tree that stands in
// for the sandbox's root. There is no isolation beyond the daemon's path
// confinement: commands see the host. It exists for development, tests and
// machines where namespaces are unavailable; sandbox/local runs the same
// daemon inside real Linux isolation.
package hostproc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/cove-sandbox/cove/guest"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/internal/sbutil"
)

// Config configures a Runtime.
type Config struct {
	// Dir holds one directory per sandbox (its root, socket, state, log).
	Dir string
	// GuestCommand is the argv that starts the daemon, before its flags;
	// nil means this executable with "guest".
	GuestCommand []string
	// GuestEnv is extra environment for the daemon process (tests use it
	// to make a test binary act as the daemon).
	GuestEnv []string
	// Logger receives the runtime's logs; nil discards them.
	Logger *slog.Logger
}

// Runtime is a sandbox.Runtime of child-process daemons. State lives in
// Config.Dir, so another Runtime over the same Dir (a later CLI call) sees
// the same sandboxes.
type Runtime struct {
	cfg Config
	log *slog.Logger

	// mu serializes lifecycle changes and guards timers.
	mu     sync.Mutex
	timers map[string]*time.Timer

	// states caches parsed state files: the check before every call
	// reads one.
	states sbutil.JSONFiles[state]
}

var _ sandbox.Runtime = (*Runtime)(nil)

// New returns a Runtime storing sandboxes under cfg.Dir.
func New(cfg Config) (*Runtime, error) {
	if cfg.Dir == "" {
		return nil, fmt.Errorf("hostproc: no state directory: %w", sandbox.ErrInvalid)
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating state directory: %w", err)
	}
	if cfg.GuestCommand == nil {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("finding the cove binary: %w", err)
		}
		cfg.GuestCommand = []string{exe, "guest"}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Runtime{cfg: cfg, log: cfg.Logger, timers: map[string]*time.Timer{}}, nil
}

// state is what the runtime stores per sandbox.
type state struct {
	Info  sandbox.Info `json:"info"`
	PID   int          `json:"pid,omitempty"`
	Token string       `json:"token"`
}

func (r *Runtime) dir(id string) string       { return filepath.Join(r.cfg.Dir, id) }
func (r *Runtime) rootDir(id string) string   { return filepath.Join(r.dir(id), "root") }
func (r *Runtime) socket(id string) string    { return filepath.Join(r.dir(id), "guest.sock") }
func (r *Runtime) statePath(id string) string { return filepath.Join(r.dir(id), "state.json") }

func (r *Runtime) load(id string) (*state, error) {
	if !sbutil.ValidID(id) {
		return nil, fmt.Errorf("sandbox %q: %w", id, sandbox.ErrNotFound)
	}
	st, err := r.readState(id)
	if err != nil {
		return nil, err
	}
	// A daemon that died (host reboot, kill) leaves the sandbox stopped.
	if st.Info.State == sandbox.StateRunning && !sbutil.Alive(st.PID) {
		st.Info.State = sandbox.StateStopped
		st.PID = 0
	}
	return &st, nil
}

// readState parses a sandbox's state file, or reuses the last parse while
// the file is unchanged.
func (r *Runtime) readState(id string) (state, error) {
	st, err := r.states.Cached(r.statePath(id))
	if errors.Is(err, os.ErrNotExist) {
		return state{}, fmt.Errorf("sandbox %q: %w", id, sandbox.ErrNotFound)
	}
	if err != nil {
		return state{}, fmt.Errorf("reading sandbox %q: %w", id, err)
	}
	return st, nil
}

func (r *Runtime) save(st *state) error { return sbutil.WriteJSON(r.statePath(st.Info.ID), st) }

// Create makes the sandbox's tree and starts its daemon.
func (r *Runtime) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Session, error) {
	if err := spec.Normalize(); err != nil {
		return nil, err
	}
	root := spec.Root
	if spec.Template != "" && spec.Template != "host" {
		return nil, fmt.Errorf("template %q: the hostproc runtime only has the \"host\" template: %w", spec.Template, sandbox.ErrNotFound)
	}
	st := &state{Info: sandbox.Info{ID: sbutil.NewID(), State: sandbox.StateStopped, Spec: spec, CreatedAt: time.Now().UTC()}, Token: sbutil.NewToken()}
	id := st.Info.ID
	if err := os.MkdirAll(filepath.Join(r.rootDir(id), root), 0o755); err != nil {
		return nil, fmt.Errorf("creating sandbox %q: %w", id, err)
	}
	for _, d := range []string{"tmp", "etc"} {
		os.MkdirAll(filepath.Join(r.rootDir(id), d), 0o755)
	}
	if err := r.save(st); err != nil {
		return nil, fmt.Errorf("creating sandbox %q: %w", id, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.startLocked(ctx, st); err != nil {
		os.RemoveAll(r.dir(id))
		return nil, fmt.Errorf("creating sandbox %q: %w", id, err)
	}
	return r.session(st)
}

// startLocked starts the daemon and waits until it answers.
func (r *Runtime) startLocked(ctx context.Context, st *state) error {
	id := st.Info.ID
	sock := r.socket(id)
	os.Remove(sock)
	args := append(append([]string(nil), r.cfg.GuestCommand[1:]...),
		"--root", r.rootDir(id), "--workdir", st.Info.Spec.Root, "--listen", "unix://"+sock)
	keys := make([]string, 0, len(st.Info.Spec.Env))
	for k := range st.Info.Spec.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "--env", k+"="+st.Info.Spec.Env[k])
	}
	if st.Info.Spec.User != "" {
		args = append(args, "--user", st.Info.Spec.User)
	}
	logf, err := os.OpenFile(filepath.Join(r.dir(id), "guest.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(r.cfg.GuestCommand[0], args...)
	// The daemon gets a clean environment: the host's (and the caller's
	// secrets) must not leak into the sandbox.
	cmd.Env = append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", guest.TokenEnv + "=" + st.Token}, r.cfg.GuestEnv...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = r.rootDir(id)
	// Its own session: the sandbox outlives the process that created it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the sandbox daemon: %w", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	c, err := guest.NewClient("unix://"+sock, guest.ClientOptions{AccessToken: st.Token})
	if err != nil {
		return err
	}
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		hctx, cancel := context.WithTimeout(ctx, time.Second)
		err := c.Health(hctx)
		cancel()
		if err == nil {
			break
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(r.dir(id), "guest.log"))
			return fmt.Errorf("the sandbox daemon exited at start: %s: %w", sbutil.LastLines(string(log), 5), sandbox.ErrUnavailable)
		default:
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			cmd.Process.Kill()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("the sandbox daemon did not answer within 10s: %w", sandbox.ErrUnavailable)
		}
		time.Sleep(2 * time.Millisecond)
	}
	st.PID = cmd.Process.Pid
	st.Info.State = sandbox.StateRunning
	if err := r.save(st); err != nil {
		cmd.Process.Kill()
		return err
	}
	if ttl := st.Info.Spec.TTL; ttl > 0 {
		if t := r.timers[id]; t != nil {
			t.Stop()
		}
		r.timers[id] = time.AfterFunc(ttl, func() {
			r.log.Info("sandbox TTL reached; stopping", "id", id, "ttl", ttl)
			r.Stop(context.Background(), id)
		})
	}
	return nil
}

func (r *Runtime) session(st *state) (sandbox.Session, error) {
	id := st.Info.ID
	c, err := guest.NewClient("unix://"+r.socket(id), guest.ClientOptions{AccessToken: st.Token})
	if err != nil {
		return nil, err
	}
	return guest.NewSession(c, guest.RuntimeSessionOptions(id, st.Info.Spec.Root, func(ctx context.Context) (sandbox.Info, error) {
		st, err := r.load(id)
		if err != nil {
			return sandbox.Info{}, err
		}
		return st.Info, nil
	}, "")), nil
}

func (r *Runtime) Get(ctx context.Context, id string) (sandbox.Session, error) {
	st, err := r.load(id)
	if err != nil {
		return nil, err
	}
	return r.session(st)
}

func (r *Runtime) List(ctx context.Context) ([]sandbox.Info, error) {
	return sbutil.ListSandboxes(r.cfg.Dir, func(id string) (sandbox.Info, bool) {
		st, err := r.load(id)
		if err != nil {
			return sandbox.Info{}, false
		}
		return st.Info, true
	})
}

func (r *Runtime) Stop(ctx context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	st, err := r.load(id)
	if err != nil {
		return err
	}
	if t := r.timers[id]; t != nil {
		t.Stop()
		delete(r.timers, id)
	}
	if st.Info.State == sandbox.StateStopped {
		return nil
	}
	stopDaemon(st.PID)
	st.PID = 0
	st.Info.State = sandbox.StateStopped
	if err := r.save(st); err != nil {
		return fmt.Errorf("stopping sandbox %q: %w", id, err)
	}
	return nil
}

// stopDaemon asks the daemon to end (it kills its processes), then kills
// its whole session after a grace period.
func stopDaemon(pid int) {
	if pid <= 0 {
		return
	}
	syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(3 * time.Second)
	for sbutil.Alive(pid) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	// The daemon leads its session; anything left in its group goes too.
	syscall.Kill(-pid, syscall.SIGKILL)
	syscall.Kill(pid, syscall.SIGKILL)
	for i := 0; i < 200 && sbutil.Alive(pid); i++ {
		time.Sleep(5 * time.Millisecond)
	}
}

func (r *Runtime) Resume(ctx context.Context, id string) (sandbox.Session, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st, err := r.load(id)
	if err != nil {
		return nil, err
	}
	if st.Info.State != sandbox.StateRunning {
		if err := r.startLocked(ctx, st); err != nil {
			return nil, fmt.Errorf("resuming sandbox %q: %w", id, err)
		}
	}
	return r.session(st)
}

func (r *Runtime) Delete(ctx context.Context, id string) error {
	if err := r.Stop(ctx, id); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := os.RemoveAll(r.dir(id)); err != nil {
		return fmt.Errorf("deleting sandbox %q: %w", id, err)
	}
	return nil
}
