// Package fake is an in-memory sandbox.Runtime for tests of the harness,
// the server and the tools, without a kernel, a daemon or root.
//
// It keeps each sandbox's workspace as a map of paths to nodes in memory
// and follows the contract in package sandbox: its errors, path
// confinement (a symlink leading out of the workspace is ErrInvalid),
// lifecycle (Stop keeps files, Resume returns them), tar snapshots, process
// handles with pids and tags, attach buffering, stdin and signals.
//
// Its processes run no program. A test scripts what a command does with
// Runtime.Handle (a Go function over the process's arguments, directory,
// environment and standard streams) or Runtime.Script (fixed output and
// exit code); any other program is ErrNotFound, as a missing program is on
// a real runtime. A test that needs a real shell or real programs runs on
// a real runtime instead: sandbox/hostproc/hostproctest makes one without
// root. The conformance suite (sandboxtest.RunWithOptions with
// Options.Scripted) checks the fake on everything that needs no program.
package fake

import (
	"context"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
)

// Defaults of the fake, used when a Spec or Runtime field is zero.
const (
	// DefaultDiskBytes caps a fake sandbox's file bytes when its spec
	// sets no Limits.DiskBytes; the fake's disk is memory.
	DefaultDiskBytes = 256 << 20
	// DefaultOutputBuffer is how much output a process keeps while no
	// reader is attached; older output is dropped first.
	DefaultOutputBuffer = 1 << 20

	maxSymlinks   = 40      // as Linux's ELOOP limit
	maxEnded      = 64      // ended processes kept for Attach
	maxStdinBytes = 1 << 20 // unread stdin a process may hold
)

var (
	_ sandbox.Runtime = (*Runtime)(nil)
	_ sandbox.Session = (*Session)(nil)
	_ sandbox.Process = (*fakeHandle)(nil)
)

// Runtime is an in-memory sandbox.Runtime for tests. Set its exported
// fields before the first call; they are not guarded.
type Runtime struct {
	// Templates lists the template names Create accepts besides ""; any
	// other is ErrNotFound. New sets "default" and "host".
	Templates []string
	// MaxSandboxes caps how many sandboxes exist at once (running or
	// stopped); Create beyond it is ErrLimit. 0 means no cap.
	MaxSandboxes int
	// OutputBuffer is how many bytes of a process's output are kept while
	// no reader is attached; 0 means DefaultOutputBuffer.
	OutputBuffer int
	// Now returns the time for file times and CreatedAt; nil means
	// time.Now.
	Now func() time.Time

	mu        sync.Mutex // guards the fields below
	seq       int
	sandboxes map[string]*Session
	order     []*Session // creation order

	progMu   sync.Mutex         // guards programs
	programs map[string]Program // by name, as Handle registered them
}

// New returns an empty Runtime.
func New() *Runtime {
	return &Runtime{
		Templates: []string{"default", "host"},
		sandboxes: make(map[string]*Session),
	}
}

func (r *Runtime) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// Create makes and starts a sandbox with an empty workspace.
func (r *Runtime) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Session, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	root, err := checkSpec(spec)
	if err != nil {
		return nil, fmt.Errorf("creating sandbox: %w", err)
	}
	if spec.Template != "" && !slices.Contains(r.Templates, spec.Template) {
		return nil, fmt.Errorf("creating sandbox: template %q: %w", spec.Template, sandbox.ErrNotFound)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sandboxes == nil {
		r.sandboxes = make(map[string]*Session)
	}
	if r.MaxSandboxes > 0 && len(r.sandboxes) >= r.MaxSandboxes {
		return nil, fmt.Errorf("creating sandbox: %d sandboxes exist, the fake's cap: %w", len(r.sandboxes), sandbox.ErrLimit)
	}
	r.seq++
	now := r.now()
	spec = copySpec(spec)
	spec.Root = root // Info reports the root in effect
	s := &Session{
		rt:        r,
		id:        fmt.Sprintf("fake-%d", r.seq),
		root:      root,
		spec:      spec,
		created:   now,
		state:     sandbox.StateRunning,
		files:     map[string]*node{root: {typ: sandbox.TypeDir, mode: 0o755, mtime: now}},
		procs:     make(map[int]*fakeProcess),
		listeners: make(map[int]*pipeListener),
		nextPID:   1,
	}
	s.startTTL()
	r.sandboxes[s.id] = s
	r.order = append(r.order, s)
	return s, nil
}

// checkSpec returns the spec's clean workspace root, or why the spec is
// invalid.
func checkSpec(spec sandbox.Spec) (string, error) {
	root := spec.Root
	if root == "" {
		root = sandbox.DefaultRoot
	}
	if !path.IsAbs(root) {
		return "", fmt.Errorf("workspace root %q is not an absolute path: %w", root, sandbox.ErrInvalid)
	}
	root, err := sandbox.ResolvePath("/", root)
	if err != nil {
		return "", fmt.Errorf("workspace root: %w", err)
	}
	if err := checkEnv(spec.Env); err != nil {
		return "", err
	}
	l := spec.Limits
	if l.CPUs < 0 || l.MemoryBytes < 0 || l.Pids < 0 || l.DiskBytes < 0 {
		return "", fmt.Errorf("limits %+v: negative limit: %w", l, sandbox.ErrInvalid)
	}
	switch spec.Network.Mode {
	case "", "none", "host", "allow":
	default:
		return "", fmt.Errorf("network mode %q: want none, host or allow: %w", spec.Network.Mode, sandbox.ErrInvalid)
	}
	if spec.TTL < 0 {
		return "", fmt.Errorf("negative TTL %v: %w", spec.TTL, sandbox.ErrInvalid)
	}
	return root, nil
}

func checkEnv(env map[string]string) error {
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexByte(v, 0) >= 0 {
			return fmt.Errorf("environment variable %q: names must be non-empty without \"=\" and values without NUL: %w", k, sandbox.ErrInvalid)
		}
	}
	return nil
}

func copySpec(s sandbox.Spec) sandbox.Spec {
	s.Env = maps.Clone(s.Env)
	s.Labels = maps.Clone(s.Labels)
	s.Network.Allow = slices.Clone(s.Network.Allow)
	return s
}

func (r *Runtime) lookup(id string) (*Session, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.sandboxes[id]
	if !ok {
		return nil, fmt.Errorf("sandbox %q: %w", id, sandbox.ErrNotFound)
	}
	return s, nil
}

// Get returns the sandbox's session, running or stopped.
func (r *Runtime) Get(ctx context.Context, id string) (sandbox.Session, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s, err := r.lookup(id)
	if err != nil {
		return nil, fmt.Errorf("getting sandbox: %w", err)
	}
	return s, nil
}

// List returns every sandbox in creation order.
func (r *Runtime) List(ctx context.Context) ([]sandbox.Info, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r.mu.Lock()
	order := slices.Clone(r.order)
	r.mu.Unlock()
	infos := make([]sandbox.Info, 0, len(order))
	for _, s := range order {
		s.mu.Lock()
		if !s.deleted {
			infos = append(infos, s.infoLocked())
		}
		s.mu.Unlock()
	}
	return infos, nil
}

// Stop kills the sandbox's processes and keeps its files.
func (r *Runtime) Stop(ctx context.Context, id string) error {
	s, err := r.lookup(id)
	if err != nil {
		return fmt.Errorf("stopping sandbox: %w", err)
	}
	if err := s.stop(ctx); err != nil {
		return fmt.Errorf("stopping sandbox %q: %w", id, err)
	}
	return nil
}

// Resume starts a stopped sandbox again with its files as they were.
func (r *Runtime) Resume(ctx context.Context, id string) (sandbox.Session, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s, err := r.lookup(id)
	if err != nil {
		return nil, fmt.Errorf("resuming sandbox: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.deleted {
		return nil, fmt.Errorf("resuming sandbox %q: %w", id, sandbox.ErrNotFound)
	}
	if s.state == sandbox.StateStopped {
		s.state = sandbox.StateRunning
		s.startTTL()
	}
	return s, nil
}

// Delete stops the sandbox and forgets it and its files.
func (r *Runtime) Delete(ctx context.Context, id string) error {
	r.mu.Lock()
	s, ok := r.sandboxes[id]
	if ok {
		delete(r.sandboxes, id)
		r.order = slices.DeleteFunc(r.order, func(x *Session) bool { return x == s })
	}
	r.mu.Unlock()
	if !ok {
		return fmt.Errorf("deleting sandbox %q: %w", id, sandbox.ErrNotFound)
	}
	err := s.stop(ctx)
	s.mu.Lock()
	s.deleted = true
	s.files = nil
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("deleting sandbox %q: %w", id, err)
	}
	return nil
}

// Session is one fake sandbox; Create, Get and Resume return the same
// *Session for a sandbox, so a test may type-assert a sandbox.Session
// to reach Listen and Symlink, which stand in for what programs inside a
// real sandbox would do.
type Session struct {
	rt      *Runtime
	id      string
	root    string // clean absolute workspace root
	spec    sandbox.Spec
	created time.Time

	mu        sync.Mutex // guards the fields below
	state     sandbox.State
	deleted   bool
	files     map[string]*node // by clean absolute path; root is always a directory
	procs     map[int]*fakeProcess
	ended     []*fakeProcess // recently ended, oldest first, for Attach
	nextPID   int
	listeners map[int]*pipeListener
	ttl       *time.Timer
}

// node is one filesystem entry. Its data is never changed in place, only
// replaced or appended to, so a reader may keep a slice of it.
type node struct {
	typ    sandbox.FileType
	mode   uint32
	mtime  time.Time
	data   []byte // files
	target string // symlinks
}

// startTTL arms the spec's TTL; s.mu is held or s is not yet shared.
func (s *Session) startTTL() {
	if s.spec.TTL > 0 {
		s.ttl = time.AfterFunc(s.spec.TTL, func() { s.stop(context.Background()) })
	}
}

// stop ends every process and closes every listener, keeping the files,
// and waits (bounded by ctx) for the processes to end.
func (s *Session) stop(ctx context.Context) error {
	s.mu.Lock()
	if s.state == sandbox.StateStopped || s.deleted {
		s.mu.Unlock()
		return nil
	}
	s.state = sandbox.StateStopped
	if s.ttl != nil {
		s.ttl.Stop()
		s.ttl = nil
	}
	procs := slices.Collect(maps.Values(s.procs))
	listeners := slices.Collect(maps.Values(s.listeners))
	s.procs = make(map[int]*fakeProcess)
	s.listeners = make(map[int]*pipeListener)
	s.ended = nil
	s.mu.Unlock()

	for _, l := range listeners {
		l.shutdown()
	}
	for _, p := range procs {
		p.deliver(sandbox.SIGKILL)
	}
	for _, p := range procs {
		select {
		case <-p.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// live says why the sandbox cannot be used now, or nil; s.mu is held.
func (s *Session) live() error {
	switch {
	case s.deleted:
		return fmt.Errorf("sandbox %q: %w", s.id, sandbox.ErrNotFound)
	case s.state != sandbox.StateRunning:
		return fmt.Errorf("sandbox %q is stopped; resume it first: %w", s.id, sandbox.ErrState)
	}
	return nil
}

// lock locks s for an operation that needs a running sandbox; on error s
// is left unlocked.
func (s *Session) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if err := s.live(); err != nil {
		s.mu.Unlock()
		return err
	}
	return nil
}

// ID returns the sandbox id.
func (s *Session) ID() string { return s.id }

// Info describes the sandbox. Unlike the other calls it works on a
// stopped sandbox, so callers can see that it is stopped.
func (s *Session) Info(ctx context.Context) (sandbox.Info, error) {
	if err := ctx.Err(); err != nil {
		return sandbox.Info{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.deleted {
		return sandbox.Info{}, fmt.Errorf("sandbox %q: %w", s.id, sandbox.ErrNotFound)
	}
	return s.infoLocked(), nil
}

func (s *Session) infoLocked() sandbox.Info {
	return sandbox.Info{ID: s.id, State: s.state, Spec: copySpec(s.spec), CreatedAt: s.created}
}
