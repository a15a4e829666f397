// Package sandboxtest helps test code that implements or uses
// sandbox.Runtime: Run is the conformance suite every runtime passes, and
// NewFake returns an in-memory Runtime for tests of the harness, the
// server and the tools, without a kernel, a daemon or root.
//
// The fake keeps each sandbox's workspace as a map of paths to nodes in
// memory and follows the contract in package sandbox: its errors, path
// confinement (a symlink leading out of the workspace is ErrInvalid),
// lifecycle (Stop keeps files, Resume returns them), tar snapshots, process
// handles with pids and tags, attach buffering and signals.
//
// The fake's Exec is not a shell and runs no program. It is a small
// scripted interpreter for tests: a handful of built-in commands (true,
// false, echo, printf, cat, pwd, printenv, env, sleep, exit, ln -s, head,
// yes, mkdir, rm, touch, ls, test, whoami, sh) working on the in-memory
// files, and "sh -c" scripts made of simple commands joined by ";", "&&",
// "||" and "|", with quoting, $VAR expansion and the redirections >, >>,
// <, >&2 and 2>&1. Any other program is ErrNotFound, as a missing program
// is on a real runtime. Tests that need real programs belong with a real
// runtime.
package sandboxtest

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/tarball"
)

// Defaults of the fake, used when a Spec or FakeRuntime field is zero.
const (
	// DefaultFakeDiskBytes caps a fake sandbox's file bytes when its spec
	// sets no Limits.DiskBytes; the fake's disk is memory.
	DefaultFakeDiskBytes = 256 << 20
	// DefaultFakeOutputBuffer is how much output a process keeps while no
	// reader is attached; older output is dropped first.
	DefaultFakeOutputBuffer = 1 << 20

	maxSymlinks   = 40      // as Linux's ELOOP limit
	maxEnded      = 64      // ended processes kept for Attach
	maxStdinBytes = 1 << 20 // unread stdin a process may hold
)

var (
	_ sandbox.Runtime = (*FakeRuntime)(nil)
	_ sandbox.Session = (*FakeSession)(nil)
	_ sandbox.Process = (*fakeHandle)(nil)
)

// FakeRuntime is an in-memory sandbox.Runtime for tests. Set its exported
// fields before the first call; they are not guarded.
type FakeRuntime struct {
	// Templates lists the template names Create accepts besides ""; any
	// other is ErrNotFound. NewFake sets "default" and "host".
	Templates []string
	// MaxSandboxes caps how many sandboxes exist at once (running or
	// stopped); Create beyond it is ErrLimit. 0 means no cap.
	MaxSandboxes int
	// OutputBuffer is how many bytes of a process's output are kept while
	// no reader is attached; 0 means DefaultFakeOutputBuffer.
	OutputBuffer int
	// Now returns the time for file times and CreatedAt; nil means
	// time.Now.
	Now func() time.Time

	mu        sync.Mutex // guards the fields below
	seq       int
	sandboxes map[string]*FakeSession
	order     []*FakeSession // creation order
}

// NewFake returns an empty FakeRuntime.
func NewFake() *FakeRuntime {
	return &FakeRuntime{
		Templates: []string{"default", "host"},
		sandboxes: make(map[string]*FakeSession),
	}
}

func (r *FakeRuntime) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// Create makes and starts a sandbox with an empty workspace.
func (r *FakeRuntime) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Session, error) {
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
		r.sandboxes = make(map[string]*FakeSession)
	}
	if r.MaxSandboxes > 0 && len(r.sandboxes) >= r.MaxSandboxes {
		return nil, fmt.Errorf("creating sandbox: %d sandboxes exist, the fake's cap: %w", len(r.sandboxes), sandbox.ErrLimit)
	}
	r.seq++
	now := r.now()
	spec = copySpec(spec)
	spec.Root = root // Info reports the root in effect
	s := &FakeSession{
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

func (r *FakeRuntime) lookup(id string) (*FakeSession, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.sandboxes[id]
	if !ok {
		return nil, fmt.Errorf("sandbox %q: %w", id, sandbox.ErrNotFound)
	}
	return s, nil
}

// Get returns the sandbox's session, running or stopped.
func (r *FakeRuntime) Get(ctx context.Context, id string) (sandbox.Session, error) {
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
func (r *FakeRuntime) List(ctx context.Context) ([]sandbox.Info, error) {
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
func (r *FakeRuntime) Stop(ctx context.Context, id string) error {
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
func (r *FakeRuntime) Resume(ctx context.Context, id string) (sandbox.Session, error) {
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
func (r *FakeRuntime) Delete(ctx context.Context, id string) error {
	r.mu.Lock()
	s, ok := r.sandboxes[id]
	if ok {
		delete(r.sandboxes, id)
		r.order = slices.DeleteFunc(r.order, func(x *FakeSession) bool { return x == s })
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

// FakeSession is one fake sandbox; Create, Get and Resume return the same
// *FakeSession for a sandbox, so a test may type-assert a sandbox.Session
// to reach Listen.
type FakeSession struct {
	rt      *FakeRuntime
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
func (s *FakeSession) startTTL() {
	if s.spec.TTL > 0 {
		s.ttl = time.AfterFunc(s.spec.TTL, func() { s.stop(context.Background()) })
	}
}

// stop ends every process and closes every listener, keeping the files,
// and waits (bounded by ctx) for the processes to end.
func (s *FakeSession) stop(ctx context.Context) error {
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
func (s *FakeSession) live() error {
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
func (s *FakeSession) lock(ctx context.Context) error {
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
func (s *FakeSession) ID() string { return s.id }

// Info describes the sandbox. Unlike the other calls it works on a
// stopped sandbox, so callers can see that it is stopped.
func (s *FakeSession) Info(ctx context.Context) (sandbox.Info, error) {
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

func (s *FakeSession) infoLocked() sandbox.Info {
	return sandbox.Info{ID: s.id, State: s.state, Spec: copySpec(s.spec), CreatedAt: s.created}
}

// ---- Filesystem ----

// resolve turns a session path into the real path of the entry it names,
// following every symlink on the way and the final one too when follow is
// set. A symlink leading out of the workspace, even for a moment, is
// ErrInvalid. Missing entries are fine: the path they would have is
// returned. s.mu is held.
func (s *FakeSession) resolve(p string, follow bool) (string, error) {
	abs, err := sandbox.ResolvePath(s.root, p)
	if err != nil {
		return "", err
	}
	todo := s.below(abs)
	var stack []string // components of the resolved path below root
	links := 0
	lastLink := ""
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(stack) == 0 {
				return "", fmt.Errorf("path %q leads out of the workspace through symlink %q: %w", p, lastLink, sandbox.ErrInvalid)
			}
			stack = stack[:len(stack)-1]
			continue
		}
		cur := s.join(append(stack, c))
		n := s.files[cur]
		if n == nil || n.typ != sandbox.TypeSymlink || (len(todo) == 0 && !follow) {
			stack = append(stack, c)
			continue
		}
		links++
		if links > maxSymlinks {
			return "", fmt.Errorf("path %q: too many levels of symbolic links: %w", p, sandbox.ErrInvalid)
		}
		lastLink = cur
		var next []string
		if path.IsAbs(n.target) {
			rel, ok := s.underRoot(n.target)
			if !ok {
				return "", fmt.Errorf("path %q leads out of the workspace through symlink %q -> %q: %w", p, cur, n.target, sandbox.ErrInvalid)
			}
			stack = nil
			next = rel
		} else {
			next = strings.Split(n.target, "/")
		}
		todo = append(next, todo...)
	}
	return s.join(stack), nil
}

// below splits a clean absolute path within root into its components
// below root.
func (s *FakeSession) below(abs string) []string {
	rel := strings.TrimPrefix(strings.TrimPrefix(abs, s.root), "/")
	if rel == "" {
		return nil
	}
	return strings.Split(rel, "/")
}

// underRoot returns the components below root of an absolute symlink
// target whose first components name root itself; ok is false otherwise.
func (s *FakeSession) underRoot(target string) ([]string, bool) {
	var comps []string
	for _, c := range strings.Split(target, "/") {
		if c != "" && c != "." {
			comps = append(comps, c)
		}
	}
	for _, rc := range strings.Split(strings.Trim(s.root, "/"), "/") {
		if rc == "" {
			continue // root is "/"
		}
		if len(comps) == 0 || comps[0] != rc {
			return nil, false
		}
		comps = comps[1:]
	}
	return comps, true
}

func (s *FakeSession) join(comps []string) string {
	return path.Join(append([]string{s.root}, comps...)...)
}

// rel returns p (clean, within root) relative to root, "." for root.
func (s *FakeSession) rel(p string) string {
	if p == s.root {
		return "."
	}
	return strings.TrimPrefix(strings.TrimPrefix(p, s.root), "/")
}

// mkdirAll makes p (a resolved path) and its missing parents directories;
// a file in the way is ErrExist. s.mu is held.
func (s *FakeSession) mkdirAll(p string) error {
	cur := s.root
	for _, c := range s.below(p) {
		cur = path.Join(cur, c)
		n := s.files[cur]
		switch {
		case n == nil:
			s.files[cur] = &node{typ: sandbox.TypeDir, mode: 0o755, mtime: s.rt.now()}
		case n.typ != sandbox.TypeDir:
			return fmt.Errorf("%s is not a directory: %w", cur, sandbox.ErrExist)
		}
	}
	return nil
}

// usage is the bytes the workspace's files hold; s.mu is held.
func (s *FakeSession) usage() int64 {
	var n int64
	for _, f := range s.files {
		n += int64(len(f.data))
	}
	return n
}

func (s *FakeSession) diskLimit() int64 {
	if s.spec.Limits.DiskBytes > 0 {
		return s.spec.Limits.DiskBytes
	}
	return DefaultFakeDiskBytes
}

// checkGrow says whether the disk can take grow more bytes; s.mu is held.
func (s *FakeSession) checkGrow(grow int64) error {
	if grow > 0 && s.usage()+grow > s.diskLimit() {
		return fmt.Errorf("no space left on the sandbox's %d-byte disk: %w", s.diskLimit(), sandbox.ErrLimit)
	}
	return nil
}

// ReadFile returns the file's content as it is now.
func (s *FakeSession) ReadFile(ctx context.Context, p string) (io.ReadCloser, error) {
	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("reading %q: %w", p, err)
	}
	defer s.mu.Unlock()
	data, err := s.readLocked(p)
	if err != nil {
		return nil, fmt.Errorf("reading %q: %w", p, err)
	}
	return io.NopCloser(bytes.NewReader(data)), nil
}

func (s *FakeSession) readLocked(p string) ([]byte, error) {
	r, err := s.resolve(p, true)
	if err != nil {
		return nil, err
	}
	n := s.files[r]
	switch {
	case n == nil:
		return nil, fmt.Errorf("no such file: %w", sandbox.ErrNotFound)
	case n.typ == sandbox.TypeDir:
		return nil, fmt.Errorf("is a directory: %w", sandbox.ErrInvalid)
	}
	return n.data[:len(n.data):len(n.data)], nil
}

// WriteFile creates or replaces a file, creating its parents. A final
// symlink is followed, as open(2) does. The file gets perm's permission
// bits (0 means 0644), also when it existed before.
func (s *FakeSession) WriteFile(ctx context.Context, p string, r io.Reader, perm uint32) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	// Read first, outside the lock; the disk limit bounds how much.
	data, err := io.ReadAll(io.LimitReader(tarball.ContextReader(ctx, r), s.diskLimit()+1))
	if err != nil {
		return fmt.Errorf("writing %q: %w", p, err)
	}
	if err := s.lock(ctx); err != nil {
		return fmt.Errorf("writing %q: %w", p, err)
	}
	defer s.mu.Unlock()
	if err := s.writeLocked(p, data, perm); err != nil {
		return fmt.Errorf("writing %q: %w", p, err)
	}
	return nil
}

func (s *FakeSession) writeLocked(p string, data []byte, perm uint32) error {
	r, err := s.resolve(p, true)
	if err != nil {
		return err
	}
	if r == s.root {
		return fmt.Errorf("is the workspace root: %w", sandbox.ErrInvalid)
	}
	old := s.files[r]
	if old != nil && old.typ == sandbox.TypeDir {
		return fmt.Errorf("is a directory: %w", sandbox.ErrInvalid)
	}
	var oldLen int64
	if old != nil {
		oldLen = int64(len(old.data))
	}
	if err := s.checkGrow(int64(len(data)) - oldLen); err != nil {
		return err
	}
	if err := s.mkdirAll(path.Dir(r)); err != nil {
		return err
	}
	perm &= 0o777
	if perm == 0 {
		perm = 0o644
	}
	s.files[r] = &node{typ: sandbox.TypeFile, mode: perm, mtime: s.rt.now(), data: data}
	return nil
}

// Stat describes one entry without following a final symlink. Path is
// the absolute form of the path asked about.
func (s *FakeSession) Stat(ctx context.Context, p string) (sandbox.FileInfo, error) {
	if err := s.lock(ctx); err != nil {
		return sandbox.FileInfo{}, fmt.Errorf("stat %q: %w", p, err)
	}
	defer s.mu.Unlock()
	r, err := s.resolve(p, false)
	if err != nil {
		return sandbox.FileInfo{}, fmt.Errorf("stat %q: %w", p, err)
	}
	n := s.files[r]
	if n == nil {
		return sandbox.FileInfo{}, fmt.Errorf("stat %q: %w", p, sandbox.ErrNotFound)
	}
	abs, _ := sandbox.ResolvePath(s.root, p)
	return fileInfo(abs, n), nil
}

func fileInfo(abs string, n *node) sandbox.FileInfo {
	fi := sandbox.FileInfo{
		Name:    path.Base(abs),
		Path:    abs,
		Type:    n.typ,
		Mode:    n.mode,
		ModTime: n.mtime,
	}
	switch n.typ {
	case sandbox.TypeFile:
		fi.Size = int64(len(n.data))
	case sandbox.TypeSymlink:
		fi.Size = int64(len(n.target))
		fi.SymlinkTarget = n.target
	}
	return fi
}

// List returns the entries under a directory (a final symlink is
// followed) in walk order: each directory before its contents, siblings
// sorted by name. Symlinked directories inside are listed, not entered.
// A path that is not a directory is ErrInvalid.
func (s *FakeSession) List(ctx context.Context, p string, depth int) ([]sandbox.FileInfo, error) {
	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("listing %q: %w", p, err)
	}
	defer s.mu.Unlock()
	if depth <= 0 {
		depth = 1
	}
	r, err := s.resolve(p, true)
	if err != nil {
		return nil, fmt.Errorf("listing %q: %w", p, err)
	}
	n := s.files[r]
	switch {
	case n == nil:
		return nil, fmt.Errorf("listing %q: %w", p, sandbox.ErrNotFound)
	case n.typ != sandbox.TypeDir:
		return nil, fmt.Errorf("listing %q: not a directory: %w", p, sandbox.ErrInvalid)
	}
	abs, _ := sandbox.ResolvePath(s.root, p)
	var out []sandbox.FileInfo
	for _, e := range s.walk(r) {
		rel := e // "/a/b" below r
		if r != "/" {
			rel = strings.TrimPrefix(e, r)
		}
		if strings.Count(rel, "/") > depth {
			continue
		}
		out = append(out, fileInfo(path.Join(abs, rel), s.files[e]))
	}
	return out, nil
}

// walk returns the paths below dir (resolved, a directory) in walk order;
// s.mu is held.
func (s *FakeSession) walk(dir string) []string {
	prefix := dir + "/"
	if dir == "/" {
		prefix = "/"
	}
	var out []string
	for p := range s.files {
		if p != dir && strings.HasPrefix(p, prefix) {
			out = append(out, p)
		}
	}
	// NUL sorts before every byte a name may hold, so "a/b" comes before
	// "a-b" and each directory's contents follow it directly.
	sort.Slice(out, func(i, j int) bool {
		return strings.ReplaceAll(out[i], "/", "\x00") < strings.ReplaceAll(out[j], "/", "\x00")
	})
	return out
}

// Mkdir creates a directory and its parents; an existing directory (or a
// symlink to one) is fine, anything else in the way is ErrExist.
func (s *FakeSession) Mkdir(ctx context.Context, p string) error {
	if err := s.lock(ctx); err != nil {
		return fmt.Errorf("making directory %q: %w", p, err)
	}
	defer s.mu.Unlock()
	if err := s.mkdirLocked(p); err != nil {
		return fmt.Errorf("making directory %q: %w", p, err)
	}
	return nil
}

func (s *FakeSession) mkdirLocked(p string) error {
	r, err := s.resolve(p, true)
	if err != nil {
		return err
	}
	if n := s.files[r]; n == nil {
		// A dangling symlink is in the way, as mkdir -p finds.
		if l, err := s.resolve(p, false); err == nil && s.files[l] != nil {
			return fmt.Errorf("a dangling symlink is in the way: %w", sandbox.ErrExist)
		}
	}
	return s.mkdirAll(r)
}

// Remove deletes a file, a symlink (not its target) or a directory tree.
func (s *FakeSession) Remove(ctx context.Context, p string) error {
	if err := s.lock(ctx); err != nil {
		return fmt.Errorf("removing %q: %w", p, err)
	}
	defer s.mu.Unlock()
	if err := s.removeLocked(p); err != nil {
		return fmt.Errorf("removing %q: %w", p, err)
	}
	return nil
}

func (s *FakeSession) removeLocked(p string) error {
	r, err := s.resolve(p, false)
	if err != nil {
		return err
	}
	if r == s.root {
		return fmt.Errorf("the workspace root cannot be removed: %w", sandbox.ErrInvalid)
	}
	if s.files[r] == nil {
		return fmt.Errorf("no such file or directory: %w", sandbox.ErrNotFound)
	}
	for _, c := range s.walk(r) {
		delete(s.files, c)
	}
	delete(s.files, r)
	return nil
}

// Move renames src to dst, creating dst's parents. A symlink is moved,
// not its target. An existing dst is ErrExist; moving a directory into
// itself or the root is ErrInvalid.
func (s *FakeSession) Move(ctx context.Context, src, dst string) error {
	if err := s.lock(ctx); err != nil {
		return fmt.Errorf("moving %q to %q: %w", src, dst, err)
	}
	defer s.mu.Unlock()
	if err := s.moveLocked(src, dst); err != nil {
		return fmt.Errorf("moving %q to %q: %w", src, dst, err)
	}
	return nil
}

func (s *FakeSession) moveLocked(src, dst string) error {
	rs, err := s.resolve(src, false)
	if err != nil {
		return err
	}
	rd, err := s.resolve(dst, false)
	if err != nil {
		return err
	}
	switch {
	case rs == s.root:
		return fmt.Errorf("the workspace root cannot be moved: %w", sandbox.ErrInvalid)
	case s.files[rs] == nil:
		return fmt.Errorf("source: no such file or directory: %w", sandbox.ErrNotFound)
	case s.files[rd] != nil:
		return fmt.Errorf("destination already exists: %w", sandbox.ErrExist)
	case sandbox.Within(rs, rd):
		return fmt.Errorf("cannot move a directory into itself: %w", sandbox.ErrInvalid)
	}
	if err := s.mkdirAll(path.Dir(rd)); err != nil {
		return err
	}
	for _, c := range s.walk(rs) {
		s.files[rd+strings.TrimPrefix(c, rs)] = s.files[c]
		delete(s.files, c)
	}
	s.files[rd] = s.files[rs]
	delete(s.files, rs)
	return nil
}

// SnapshotWorkspace writes the workspace as a tar stream: members
// relative to the root in walk order, directories with a trailing "/",
// times truncated to the second.
func (s *FakeSession) SnapshotWorkspace(ctx context.Context, w io.Writer) error {
	if err := s.lock(ctx); err != nil {
		return fmt.Errorf("snapshotting workspace: %w", err)
	}
	type entry struct {
		rel string
		n   node
	}
	var entries []entry
	for _, p := range s.walk(s.root) {
		entries = append(entries, entry{s.rel(p), *s.files[p]})
	}
	s.mu.Unlock()

	tw := tar.NewWriter(w)
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr := &tar.Header{Name: e.rel, Mode: int64(e.n.mode), ModTime: e.n.mtime.Truncate(time.Second)}
		switch e.n.typ {
		case sandbox.TypeDir:
			hdr.Typeflag = tar.TypeDir
			hdr.Name += "/"
		case sandbox.TypeSymlink:
			hdr.Typeflag = tar.TypeSymlink
			hdr.Linkname = e.n.target
		default:
			hdr.Typeflag = tar.TypeReg
			hdr.Size = int64(len(e.n.data))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("snapshotting workspace: %w", err)
		}
		if _, err := tw.Write(e.n.data); err != nil {
			return fmt.Errorf("snapshotting workspace: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("snapshotting workspace: %w", err)
	}
	return nil
}

// RestoreWorkspace extracts a tar stream into the workspace with the same
// rules as tarball.Extract: every member passes tarball.CheckHeader, no
// member is written through a symlink, a later member replaces an earlier
// entry, modes are masked to 0777 and hard links (to earlier members of
// the stream only) become copies. Entries the stream does not name are
// kept.
func (s *FakeSession) RestoreWorkspace(ctx context.Context, r io.Reader) error {
	if err := s.lock(ctx); err != nil {
		return fmt.Errorf("restoring workspace: %w", err)
	}
	s.mu.Unlock()
	tr := tar.NewReader(r)
	written := make(map[string]bool) // regular files from this stream
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("restoring workspace: reading tar stream: %w: %w", err, sandbox.ErrInvalid)
		}
		name, err := tarball.CheckHeader(hdr)
		if err != nil {
			return fmt.Errorf("restoring workspace: %w", err)
		}
		var data []byte
		if isRegular(hdr) {
			if hdr.Size > s.diskLimit() {
				return fmt.Errorf("restoring workspace: tar member %q: %d bytes do not fit the %d-byte disk: %w", hdr.Name, hdr.Size, s.diskLimit(), sandbox.ErrLimit)
			}
			if data, err = io.ReadAll(tarball.ContextReader(ctx, tr)); err != nil {
				return fmt.Errorf("restoring workspace: tar member %q: %w: %w", hdr.Name, err, sandbox.ErrInvalid)
			}
		}
		if err := s.restoreMember(ctx, hdr, name, data, written); err != nil {
			return fmt.Errorf("restoring workspace: %w", err)
		}
	}
}

func isRegular(hdr *tar.Header) bool {
	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeCont, tar.TypeGNUSparse:
		return true
	case tar.TypeRegA:
		return !strings.HasSuffix(hdr.Name, "/")
	}
	return false
}

func (s *FakeSession) restoreMember(ctx context.Context, hdr *tar.Header, name string, data []byte, written map[string]bool) error {
	if name == "." {
		return nil
	}
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	bad := func(format string, args ...any) error {
		return fmt.Errorf("tar member %q: %s: %w", hdr.Name, fmt.Sprintf(format, args...), sandbox.ErrInvalid)
	}
	// Parents: real directories only, never through a symlink.
	cur := s.root
	comps := strings.Split(name, "/")
	for _, c := range comps[:len(comps)-1] {
		cur = path.Join(cur, c)
		n := s.files[cur]
		switch {
		case n == nil:
			s.files[cur] = &node{typ: sandbox.TypeDir, mode: 0o755, mtime: s.rt.now()}
		case n.typ == sandbox.TypeSymlink:
			return bad("parent %q is a symlink; refusing to write through it", s.rel(cur))
		case n.typ != sandbox.TypeDir:
			return bad("parent %q is not a directory", s.rel(cur))
		}
	}
	p := path.Join(s.root, name)
	mode := uint32(hdr.Mode) & 0o777
	nn := &node{mode: mode, mtime: hdr.ModTime}
	switch {
	case isRegular(hdr):
		nn.typ, nn.data = sandbox.TypeFile, data
	case hdr.Typeflag == tar.TypeDir || hdr.Typeflag == tar.TypeRegA:
		nn.typ = sandbox.TypeDir
	case hdr.Typeflag == tar.TypeSymlink:
		nn.typ, nn.target = sandbox.TypeSymlink, hdr.Linkname
	case hdr.Typeflag == tar.TypeLink:
		target := path.Join(s.root, path.Clean(hdr.Linkname))
		t := s.files[target]
		if !written[target] || t == nil || t.typ != sandbox.TypeFile {
			return bad("hard link target %q is not a regular file written earlier by this stream", hdr.Linkname)
		}
		// A copy: the fake has no inodes to share, and nodes must not
		// share a backing array that appends would write through.
		nn.typ, nn.data, nn.mode = sandbox.TypeFile, bytes.Clone(t.data), t.mode
	default:
		return bad("unsupported member type %q", string(hdr.Typeflag))
	}
	old := s.files[p]
	if old != nil && old.typ == sandbox.TypeDir {
		if nn.typ == sandbox.TypeDir {
			old.mode, old.mtime = nn.mode, nn.mtime
			return nil
		}
		if len(s.walk(p)) > 0 {
			return fmt.Errorf("tar member %q: a directory that is not empty is in the way: %w", hdr.Name, sandbox.ErrExist)
		}
	}
	var oldLen int64
	if old != nil {
		oldLen = int64(len(old.data))
	}
	if err := s.checkGrow(int64(len(nn.data)) - oldLen); err != nil {
		return fmt.Errorf("tar member %q: %w", hdr.Name, err)
	}
	s.files[p] = nn
	if nn.typ == sandbox.TypeFile {
		written[p] = true
	} else {
		delete(written, p)
	}
	return nil
}

// ---- Ports ----

// Listen makes the fake sandbox listen on port, as a server inside it
// would: DialPort(port) connects to the returned listener through an
// in-memory pipe. It panics if port is out of range or already listened
// on (a bug in the test). On a stopped or deleted sandbox the listener is
// returned closed. Stop closes every listener.
func (s *FakeSession) Listen(port int) net.Listener {
	if port < 1 || port > 65535 {
		panic(fmt.Sprintf("sandboxtest: Listen(%d): port out of range", port))
	}
	l := &pipeListener{s: s, port: port, conns: make(chan net.Conn, 64), done: make(chan struct{})}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live() != nil {
		l.shutdown()
		return l
	}
	if _, ok := s.listeners[port]; ok {
		panic(fmt.Sprintf("sandboxtest: Listen(%d): port already in use in sandbox %s", port, s.id))
	}
	s.listeners[port] = l
	return l
}

// DialPort connects to a listener made by Listen.
func (s *FakeSession) DialPort(ctx context.Context, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("dialing port %d: port out of range: %w", port, sandbox.ErrInvalid)
	}
	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("dialing port %d: %w", port, err)
	}
	l := s.listeners[port]
	s.mu.Unlock()
	if l == nil {
		return nil, fmt.Errorf("dialing port %d: nothing listens there: %w", port, sandbox.ErrUnavailable)
	}
	return l.dial(port)
}

// pipeListener is an in-memory net.Listener for one port.
type pipeListener struct {
	s     *FakeSession
	port  int
	conns chan net.Conn // server ends waiting for Accept
	done  chan struct{} // closed by shutdown

	mu     sync.Mutex // guards closed
	closed bool
}

func (l *pipeListener) dial(port int) (net.Conn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, fmt.Errorf("dialing port %d: nothing listens there: %w", port, sandbox.ErrUnavailable)
	}
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	default:
		client.Close()
		server.Close()
		return nil, fmt.Errorf("dialing port %d: accept backlog full: %w", port, sandbox.ErrUnavailable)
	}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.Addr(), Err: net.ErrClosed}
	}
}

// Close stops listening; connections not yet accepted are closed.
func (l *pipeListener) Close() error {
	l.shutdown()
	l.s.mu.Lock()
	if l.s.listeners[l.port] == l {
		delete(l.s.listeners, l.port)
	}
	l.s.mu.Unlock()
	return nil
}

// shutdown closes the listener without touching the session's table.
func (l *pipeListener) shutdown() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.closed = true
	close(l.done)
	for {
		select {
		case c := <-l.conns:
			c.Close()
		default:
			return
		}
	}
}

func (l *pipeListener) Addr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: l.port}
}

// ---- Processes ----

// fakeProcess is one run of a built-in command.
type fakeProcess struct {
	s     *FakeSession
	pid   int
	tag   string
	info  sandbox.ProcessInfo
	pty   bool
	stdin *stdinPipe
	out   *output
	ctx   context.Context // ends when a fatal signal is delivered
	kill  context.CancelCauseFunc
	done  chan struct{} // closed once status is set and output delivered

	mu      sync.Mutex // guards the fields below
	status  sandbox.ExitStatus
	ptySize sandbox.PTYSize
}

// signalCause is the cancel cause of a process killed by a signal.
type signalCause struct{ sig sandbox.Signal }

func (c signalCause) Error() string { return syscall.Signal(c.sig).String() }

// deliver sends sig to the process: every signal whose default action
// ends a process ends it (a no-op once it has ended); the others are
// ignored, as the fake has no job control.
func (p *fakeProcess) deliver(sig sandbox.Signal) {
	switch syscall.Signal(sig) {
	case 0, syscall.SIGCHLD, syscall.SIGCONT, syscall.SIGURG, syscall.SIGWINCH,
		syscall.SIGSTOP, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU:
		return
	}
	p.kill(signalCause{sig})
}

func (p *fakeProcess) ended() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Exec runs a built-in command to completion.
func (s *FakeSession) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExitStatus, error) {
	p, _, err := s.start(ctx, req)
	if err != nil {
		return sandbox.ExitStatus{}, fmt.Errorf("running %q: %w", req.Cmd, err)
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		p.deliver(sandbox.SIGKILL)
		<-p.done
		return sandbox.ExitStatus{}, ctx.Err()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status, nil
}

// Start runs a built-in command in the background.
func (s *FakeSession) Start(ctx context.Context, req sandbox.ExecRequest) (sandbox.Process, error) {
	p, att, err := s.start(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("starting %q: %w", req.Cmd, err)
	}
	return &fakeHandle{p: p, att: att}, nil
}

func (s *FakeSession) start(ctx context.Context, req sandbox.ExecRequest) (*fakeProcess, *attachment, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	argv, err := commandLine(req)
	if err != nil {
		return nil, nil, err
	}
	prog, err := lookProgram(argv[0])
	if err != nil {
		return nil, nil, err
	}
	if err := checkEnv(req.Env); err != nil {
		return nil, nil, err
	}
	if req.Timeout < 0 {
		return nil, nil, fmt.Errorf("negative timeout %v: %w", req.Timeout, sandbox.ErrInvalid)
	}

	if err := s.lock(ctx); err != nil {
		return nil, nil, err
	}
	dir := s.root
	if req.Dir != "" {
		r, err := s.resolve(req.Dir, true)
		if err != nil {
			s.mu.Unlock()
			return nil, nil, fmt.Errorf("working directory: %w", err)
		}
		if n := s.files[r]; n == nil || n.typ != sandbox.TypeDir {
			s.mu.Unlock()
			return nil, nil, fmt.Errorf("working directory %q is not a directory: %w", req.Dir, sandbox.ErrInvalid)
		}
		dir = r
	}
	if req.Tag != "" {
		for _, q := range s.procs {
			if q.tag == req.Tag {
				s.mu.Unlock()
				return nil, nil, fmt.Errorf("process tag %q is in use by pid %d: %w", req.Tag, q.pid, sandbox.ErrExist)
			}
		}
	}
	if limit := s.spec.Limits.Pids; limit > 0 && len(s.procs) >= limit {
		s.mu.Unlock()
		return nil, nil, fmt.Errorf("the sandbox's %d-process limit is reached: %w", limit, sandbox.ErrLimit)
	}
	pid := s.nextPID
	s.nextPID++
	env := map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": s.root}
	maps.Copy(env, s.spec.Env)
	maps.Copy(env, req.Env)
	env["PWD"] = dir
	user := req.User
	if user == "" {
		user = s.spec.User
	}
	if user == "" {
		user = "user"
	}
	pctx, kill := context.WithCancelCause(context.Background())
	bufSize := s.rt.OutputBuffer
	if bufSize <= 0 {
		bufSize = DefaultFakeOutputBuffer
	}
	p := &fakeProcess{
		s:   s,
		pid: pid,
		tag: req.Tag,
		info: sandbox.ProcessInfo{
			PID: pid, Tag: req.Tag, Cmd: req.Cmd, Args: slices.Clone(req.Args),
			Env: maps.Clone(req.Env), Dir: dir,
		},
		pty:   req.PTY != nil,
		stdin: newStdinPipe(req.PTY != nil),
		out:   &output{max: bufSize, pty: req.PTY != nil},
		ctx:   pctx,
		kill:  kill,
		done:  make(chan struct{}),
	}
	if req.PTY != nil {
		p.ptySize = *req.PTY
	}
	s.procs[pid] = p
	s.mu.Unlock()

	att := &attachment{stdout: req.Stdout, stderr: req.Stderr}
	p.out.attach(att)
	switch {
	case req.Stdin != nil:
		go p.stdin.copyFrom(req.Stdin, !req.OpenStdin)
	case !req.OpenStdin && req.PTY == nil:
		p.stdin.close()
	}
	pr := &proc{
		ctx:    pctx,
		s:      s,
		stdin:  procStdin{p.stdin, pctx},
		stdout: streamWriter{p.out, 1, pctx},
		stderr: streamWriter{p.out, 2, pctx},
		dir:    dir,
		env:    env,
		user:   user,
		pid:    pid,
	}
	go p.run(prog, pr, argv)
	p.killAfter(req.Timeout)
	return p, att, nil
}

func (p *fakeProcess) run(prog builtin, pr *proc, argv []string) {
	code := prog(pr, argv)
	status := sandbox.ExitStatus{Code: code}
	var sc signalCause
	if errors.As(context.Cause(p.ctx), &sc) {
		status = sandbox.ExitStatus{Code: -1, Signal: syscall.Signal(sc.sig).String()}
	}
	if n := p.out.droppedBytes(); n > 0 {
		status.Error = fmt.Sprintf("%d bytes of output were dropped while no reader was attached", n)
	}
	p.stdin.broken()
	p.s.processEnded(p)
	p.mu.Lock()
	p.status = status
	p.mu.Unlock()
	p.kill(errExited)
	close(p.done)
}

var errExited = errors.New("process exited")

// processEnded moves p from the running table to the recently ended list, unless
// Stop already cleared it.
func (s *FakeSession) processEnded(p *fakeProcess) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.procs[p.pid] != p {
		return
	}
	delete(s.procs, p.pid)
	s.ended = append(s.ended, p)
	if len(s.ended) > maxEnded {
		s.ended = slices.Delete(s.ended, 0, len(s.ended)-maxEnded)
	}
}

// commandLine returns the argv a request runs.
func commandLine(req sandbox.ExecRequest) ([]string, error) {
	if strings.TrimSpace(req.Cmd) == "" {
		return nil, fmt.Errorf("empty command: %w", sandbox.ErrInvalid)
	}
	if strings.IndexByte(req.Cmd, 0) >= 0 {
		return nil, fmt.Errorf("command contains a NUL byte: %w", sandbox.ErrInvalid)
	}
	if req.Shell {
		return append([]string{"sh", "-c", req.Cmd}, req.Args...), nil
	}
	return append([]string{req.Cmd}, req.Args...), nil
}

// lookProgram finds a built-in by name, or by its path in a standard bin
// directory ("/bin/echo").
func lookProgram(name string) (builtin, error) {
	base := name
	if strings.Contains(name, "/") {
		dir, b := path.Split(name)
		switch path.Clean(dir) {
		case "/bin", "/usr/bin", "/usr/local/bin", "/sbin", "/usr/sbin":
			base = b
		default:
			base = ""
		}
	}
	if b, ok := builtins[base]; ok {
		return b, nil
	}
	return nil, fmt.Errorf("program %q not found (the fake runs only its built-in commands): %w", name, sandbox.ErrNotFound)
}

// Attach reattaches to a running or recently ended process.
func (s *FakeSession) Attach(ctx context.Context, sel sandbox.ProcessSelector, stdout, stderr io.Writer) (sandbox.Process, error) {
	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("attaching: %w", err)
	}
	p := s.findLocked(sel)
	s.mu.Unlock()
	if p == nil {
		if sel.Tag == "" && sel.PID == 0 {
			return nil, fmt.Errorf("attaching: no pid or tag given: %w", sandbox.ErrInvalid)
		}
		return nil, fmt.Errorf("attaching to %s: %w", selString(sel), sandbox.ErrNotFound)
	}
	att := &attachment{stdout: stdout, stderr: stderr}
	p.out.attach(att)
	return &fakeHandle{p: p, att: att}, nil
}

func selString(sel sandbox.ProcessSelector) string {
	if sel.Tag != "" {
		return fmt.Sprintf("process tagged %q", sel.Tag)
	}
	return fmt.Sprintf("pid %d", sel.PID)
}

// findLocked finds a process by tag (running first, then the most
// recently ended) or pid; s.mu is held.
func (s *FakeSession) findLocked(sel sandbox.ProcessSelector) *fakeProcess {
	match := func(p *fakeProcess) bool {
		if sel.Tag != "" {
			return p.tag == sel.Tag
		}
		return sel.PID != 0 && p.pid == sel.PID
	}
	for _, p := range s.procs {
		if match(p) {
			return p
		}
	}
	for i := len(s.ended) - 1; i >= 0; i-- {
		if match(s.ended[i]) {
			return s.ended[i]
		}
	}
	return nil
}

// Processes lists the running processes by pid.
func (s *FakeSession) Processes(ctx context.Context) ([]sandbox.ProcessInfo, error) {
	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	defer s.mu.Unlock()
	out := make([]sandbox.ProcessInfo, 0, len(s.procs))
	for _, p := range s.procs {
		info := p.info
		info.Args = slices.Clone(info.Args)
		info.Env = maps.Clone(info.Env)
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b sandbox.ProcessInfo) int { return a.PID - b.PID })
	return out, nil
}

// fakeHandle is one caller's handle on a process: Start's, or Attach's.
type fakeHandle struct {
	p   *fakeProcess
	att *attachment
}

func (h *fakeHandle) PID() int    { return h.p.pid }
func (h *fakeHandle) Tag() string { return h.p.tag }

func (h *fakeHandle) Wait(ctx context.Context) (sandbox.ExitStatus, error) {
	select {
	case <-h.p.done:
		h.p.mu.Lock()
		defer h.p.mu.Unlock()
		return h.p.status, nil
	case <-ctx.Done():
		return sandbox.ExitStatus{}, ctx.Err()
	}
}

func (h *fakeHandle) Write(ctx context.Context, b []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if h.p.ended() {
		return fmt.Errorf("writing to pid %d: process has ended: %w", h.p.pid, sandbox.ErrState)
	}
	if err := h.p.stdin.write(b); err != nil {
		return fmt.Errorf("writing to pid %d: %w", h.p.pid, err)
	}
	return nil
}

// CloseStdin signals EOF; on a PTY it does what sending 0x04 does.
func (h *fakeHandle) CloseStdin(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if h.p.ended() {
		return fmt.Errorf("closing stdin of pid %d: process has ended: %w", h.p.pid, sandbox.ErrState)
	}
	h.p.stdin.close()
	return nil
}

// Signal delivers sig. SIGKILL, SIGTERM, SIGINT and every other signal
// whose default action ends a process end the fake process; a signal to a
// process that has ended is ErrState.
func (h *fakeHandle) Signal(ctx context.Context, sig sandbox.Signal) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if sig < 0 || sig > 64 {
		return fmt.Errorf("signalling pid %d: no signal %d: %w", h.p.pid, sig, sandbox.ErrInvalid)
	}
	if h.p.ended() {
		return fmt.Errorf("signalling pid %d: process has ended: %w", h.p.pid, sandbox.ErrState)
	}
	h.p.deliver(sig)
	return nil
}

func (h *fakeHandle) Resize(ctx context.Context, size sandbox.PTYSize) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !h.p.pty {
		return fmt.Errorf("resizing pid %d: it has no PTY: %w", h.p.pid, sandbox.ErrInvalid)
	}
	if h.p.ended() {
		return fmt.Errorf("resizing pid %d: process has ended: %w", h.p.pid, sandbox.ErrState)
	}
	h.p.mu.Lock()
	h.p.ptySize = size
	h.p.mu.Unlock()
	return nil
}

// Detach stops delivering output to this handle; with no other handle
// attached, output is buffered for the next Attach. Detaching twice is
// not an error.
func (h *fakeHandle) Detach() error {
	h.p.out.detach(h.att)
	return nil
}

// attachment is where one handle's output goes; nil writers discard.
type attachment struct {
	stdout, stderr io.Writer
}

// output fans a process's output out to the attached handles, or buffers
// it (bounded, oldest dropped) while none is attached.
type output struct {
	max int
	pty bool // stderr goes to stdout

	mu      sync.Mutex // guards the fields below; held while writing out
	atts    []*attachment
	buf     []chunk
	size    int
	dropped int64
}

type chunk struct {
	stream int // 1 stdout, 2 stderr
	data   []byte
}

func (o *output) write(stream int, p []byte) {
	if o.pty {
		stream = 1
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.atts) == 0 {
		o.buffer(stream, p)
		return
	}
	for _, a := range o.atts {
		a.write(stream, p)
	}
}

func (a *attachment) write(stream int, p []byte) {
	w := a.stdout
	if stream == 2 {
		w = a.stderr
	}
	if w != nil {
		w.Write(p) // a failing reader loses output, as a closed pipe would
	}
}

// buffer keeps p, dropping the oldest output beyond max; o.mu is held.
func (o *output) buffer(stream int, p []byte) {
	if len(p) > o.max {
		o.dropped += int64(len(p) - o.max)
		p = p[len(p)-o.max:]
	}
	o.buf = append(o.buf, chunk{stream, bytes.Clone(p)})
	o.size += len(p)
	for o.size > o.max {
		excess := o.size - o.max
		if c := &o.buf[0]; len(c.data) > excess {
			c.data = c.data[excess:]
			o.size -= excess
			o.dropped += int64(excess)
		} else {
			o.size -= len(c.data)
			o.dropped += int64(len(c.data))
			o.buf = o.buf[1:]
		}
	}
}

// attach delivers the buffered output to a and adds it to the readers.
func (o *output) attach(a *attachment) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, c := range o.buf {
		a.write(c.stream, c.data)
	}
	o.buf, o.size = nil, 0
	o.atts = append(o.atts, a)
}

func (o *output) detach(a *attachment) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.atts = slices.DeleteFunc(o.atts, func(x *attachment) bool { return x == a })
}

func (o *output) droppedBytes() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.dropped
}

// streamWriter is a process's stdout or stderr. Writes fail once the
// process has been killed, which stops a writer such as yes.
type streamWriter struct {
	o      *output
	stream int
	ctx    context.Context
}

func (w streamWriter) Write(p []byte) (int, error) {
	if err := w.ctx.Err(); err != nil {
		return 0, err
	}
	w.o.write(w.stream, p)
	return len(p), nil
}

// stdinPipe is a process's standard input: bytes written by Process.Write
// or copied from ExecRequest.Stdin, read by the built-ins.
type stdinPipe struct {
	pty    bool
	notify chan struct{} // a token when data or EOF arrives

	mu     sync.Mutex // guards the fields below
	buf    []byte
	eof    bool // no more input after buf
	closed bool // the process has ended: writes fail
}

func newStdinPipe(pty bool) *stdinPipe {
	return &stdinPipe{pty: pty, notify: make(chan struct{}, 1)}
}

func (p *stdinPipe) wake() {
	select {
	case p.notify <- struct{}{}:
	default:
	}
}

func (p *stdinPipe) write(b []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.closed:
		return fmt.Errorf("process has ended: %w", sandbox.ErrState)
	case p.eof:
		return fmt.Errorf("stdin is closed: %w", sandbox.ErrState)
	case len(p.buf)+len(b) > maxStdinBytes:
		return fmt.Errorf("more than %d bytes of unread input: %w", maxStdinBytes, sandbox.ErrLimit)
	}
	if i := bytes.IndexByte(b, 0x04); p.pty && i >= 0 {
		b, p.eof = b[:i], true // ^D on a terminal: end of input
	}
	p.buf = append(p.buf, b...)
	p.wake()
	return nil
}

func (p *stdinPipe) close() {
	p.mu.Lock()
	p.eof = true
	p.mu.Unlock()
	p.wake()
}

// broken makes further writes fail: the reader is gone.
func (p *stdinPipe) broken() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
}

// copyFrom copies r into the pipe, then closes it when closeAfter is set.
func (p *stdinPipe) copyFrom(r io.Reader, closeAfter bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			p.mu.Lock()
			closed := p.closed
			if !closed {
				p.buf = append(p.buf, buf[:n]...)
			}
			p.mu.Unlock()
			if closed {
				return
			}
			p.wake()
		}
		if err != nil {
			break
		}
	}
	if closeAfter {
		p.close()
	}
}

// procStdin reads a stdinPipe, giving up when the process is killed.
type procStdin struct {
	p   *stdinPipe
	ctx context.Context
}

func (r procStdin) Read(b []byte) (int, error) {
	for {
		r.p.mu.Lock()
		if len(r.p.buf) > 0 {
			n := copy(b, r.p.buf)
			r.p.buf = r.p.buf[n:]
			r.p.mu.Unlock()
			return n, nil
		}
		eof := r.p.eof
		r.p.mu.Unlock()
		if eof {
			return 0, io.EOF
		}
		select {
		case <-r.p.notify:
		case <-r.ctx.Done():
			return 0, r.ctx.Err()
		}
	}
}

// ---- Built-in commands ----

// proc is what a built-in runs with.
type proc struct {
	ctx            context.Context // ends when the process is killed
	s              *FakeSession
	stdin          io.Reader
	stdout, stderr io.Writer
	dir            string // resolved working directory
	env            map[string]string
	user           string
	pid            int
}

// builtin runs argv (argv[0] is the command's name) and returns its exit
// code.
type builtin func(p *proc, argv []string) int

var builtins map[string]builtin

func init() {
	builtins = map[string]builtin{
		"true":     func(*proc, []string) int { return 0 },
		":":        func(*proc, []string) int { return 0 },
		"false":    func(*proc, []string) int { return 1 },
		"echo":     cmdEcho,
		"printf":   cmdPrintf,
		"cat":      cmdCat,
		"pwd":      cmdPwd,
		"printenv": cmdPrintenv,
		"env":      cmdEnv,
		"sleep":    cmdSleep,
		"exit":     cmdExit,
		"ln":       cmdLn,
		"head":     cmdHead,
		"yes":      cmdYes,
		"mkdir":    cmdMkdir,
		"rm":       cmdRm,
		"touch":    cmdTouch,
		"ls":       cmdLs,
		"test":     cmdTest,
		"[":        cmdTest,
		"whoami":   cmdWhoami,
		"sh":       cmdSh,
	}
}

func (p *proc) errorf(format string, args ...any) {
	fmt.Fprintf(p.stderr, format+"\n", args...)
}

// abs makes a command's path argument absolute against its directory.
func (p *proc) abs(name string) string {
	if path.IsAbs(name) {
		return name
	}
	return path.Join(p.dir, name)
}

// fs runs f with the session locked, if the sandbox still runs.
func (p *proc) fs(f func(s *FakeSession) error) error {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	if err := p.s.live(); err != nil {
		return err
	}
	return f(p.s)
}

func cmdEcho(p *proc, argv []string) int {
	args := argv[1:]
	nl := true
	if len(args) > 0 && args[0] == "-n" {
		nl, args = false, args[1:]
	}
	s := strings.Join(args, " ")
	if nl {
		s += "\n"
	}
	if _, err := io.WriteString(p.stdout, s); err != nil {
		p.errorf("echo: write error: %v", err)
		return 1
	}
	return 0
}

// cmdPrintf supports %s, %d, %b, %c, %% and the escapes \n \t \r \\ \" \a
// \0, reusing the format while arguments remain, as printf(1) does.
func cmdPrintf(p *proc, argv []string) int {
	if len(argv) < 2 {
		p.errorf("printf: usage: printf FORMAT [ARGUMENT]...")
		return 2
	}
	format, args := argv[1], argv[2:]
	var out strings.Builder
	code := 0
	for {
		used := 0
		next := func() string {
			if used < len(args) {
				used++
				return args[used-1]
			}
			used++
			return ""
		}
		for i := 0; i < len(format); i++ {
			c := format[i]
			switch {
			case c == '\\' && i+1 < len(format):
				i++
				out.WriteString(unescape(format[i]))
			case c == '%' && i+1 < len(format):
				i++
				switch format[i] {
				case '%':
					out.WriteByte('%')
				case 's':
					out.WriteString(next())
				case 'b':
					out.WriteString(expandEscapes(next()))
				case 'c':
					if a := next(); a != "" {
						out.WriteByte(a[0])
					}
				case 'd', 'i':
					a := next()
					n, err := strconv.ParseInt(a, 10, 64)
					if err != nil && a != "" {
						p.errorf("printf: %s: invalid number", a)
						code = 1
					}
					out.WriteString(strconv.FormatInt(n, 10))
				default:
					out.WriteByte('%')
					out.WriteByte(format[i])
				}
			default:
				out.WriteByte(c)
			}
		}
		args = args[min(used, len(args)):]
		if used == 0 || len(args) == 0 {
			break
		}
	}
	if _, err := io.WriteString(p.stdout, out.String()); err != nil {
		p.errorf("printf: write error: %v", err)
		return 1
	}
	return code
}

func unescape(c byte) string {
	switch c {
	case 'n':
		return "\n"
	case 't':
		return "\t"
	case 'r':
		return "\r"
	case 'a':
		return "\a"
	case '0':
		return "\x00"
	case '\\':
		return "\\"
	case '"':
		return "\""
	}
	return "\\" + string(c)
}

func expandEscapes(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
			b.WriteString(unescape(s[i]))
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func cmdCat(p *proc, argv []string) int {
	files := argv[1:]
	if len(files) == 0 {
		files = []string{"-"}
	}
	code := 0
	for _, f := range files {
		if f == "-" {
			if _, err := io.Copy(p.stdout, p.stdin); err != nil {
				return 1
			}
			continue
		}
		var data []byte
		err := p.fs(func(s *FakeSession) (err error) {
			data, err = s.readLocked(p.abs(f))
			return err
		})
		if err != nil {
			p.errorf("cat: %s: %v", f, err)
			code = 1
			continue
		}
		if _, err := p.stdout.Write(data); err != nil {
			p.errorf("cat: write error: %v", err)
			return 1
		}
	}
	return code
}

func cmdPwd(p *proc, _ []string) int {
	fmt.Fprintln(p.stdout, p.dir)
	return 0
}

func cmdPrintenv(p *proc, argv []string) int {
	if len(argv) == 1 {
		return cmdEnv(p, argv)
	}
	code := 0
	for _, name := range argv[1:] {
		v, ok := p.env[name]
		if !ok {
			code = 1
			continue
		}
		fmt.Fprintln(p.stdout, v)
	}
	return code
}

func cmdEnv(p *proc, argv []string) int {
	if len(argv) > 1 {
		p.errorf("env: the fake runs no command through env")
		return 125
	}
	for _, k := range slices.Sorted(maps.Keys(p.env)) {
		fmt.Fprintf(p.stdout, "%s=%s\n", k, p.env[k])
	}
	return 0
}

func cmdSleep(p *proc, argv []string) int {
	if len(argv) != 2 {
		p.errorf("sleep: usage: sleep SECONDS")
		return 1
	}
	secs, err := strconv.ParseFloat(strings.TrimSuffix(argv[1], "s"), 64)
	if err != nil || secs < 0 {
		p.errorf("sleep: invalid time interval %q", argv[1])
		return 1
	}
	t := time.NewTimer(time.Duration(secs * float64(time.Second)))
	defer t.Stop()
	select {
	case <-t.C:
		return 0
	case <-p.ctx.Done():
		return 1
	}
}

func cmdExit(p *proc, argv []string) int {
	if len(argv) < 2 {
		return 0
	}
	n, err := strconv.Atoi(argv[1])
	if err != nil {
		p.errorf("exit: %s: numeric argument required", argv[1])
		return 2
	}
	return n & 0xff
}

// cmdLn supports ln -s [-f] TARGET NAME, and NAME a directory.
func cmdLn(p *proc, argv []string) int {
	sym, force := false, false
	var args []string
	for _, a := range argv[1:] {
		if strings.HasPrefix(a, "-") && len(a) > 1 {
			sym = sym || strings.Contains(a, "s")
			force = force || strings.Contains(a, "f")
			continue
		}
		args = append(args, a)
	}
	if !sym || len(args) != 2 {
		p.errorf("ln: the fake supports only ln -s [-f] TARGET NAME")
		return 1
	}
	target, name := args[0], args[1]
	err := p.fs(func(s *FakeSession) error {
		link, err := s.resolve(p.abs(name), false)
		if err != nil {
			return err
		}
		if d, err := s.resolve(p.abs(name), true); err == nil && s.files[d] != nil && s.files[d].typ == sandbox.TypeDir {
			link = path.Join(d, path.Base(target))
		}
		if parent := s.files[path.Dir(link)]; parent == nil || parent.typ != sandbox.TypeDir {
			return fmt.Errorf("no such directory: %w", sandbox.ErrNotFound)
		}
		if old := s.files[link]; old != nil {
			if !force || old.typ == sandbox.TypeDir {
				return fmt.Errorf("file exists: %w", sandbox.ErrExist)
			}
		}
		s.files[link] = &node{typ: sandbox.TypeSymlink, mode: 0o777, mtime: s.rt.now(), target: target}
		return nil
	})
	if err != nil {
		p.errorf("ln: %s: %v", name, err)
		return 1
	}
	return 0
}

// cmdHead supports head [-c N | -n N] [FILE].
func cmdHead(p *proc, argv []string) int {
	bytesMode, n := false, int64(10)
	args := argv[1:]
	for len(args) > 0 && strings.HasPrefix(args[0], "-") && len(args[0]) > 1 {
		opt := args[0]
		args = args[1:]
		var val string
		switch {
		case opt == "-c" || opt == "-n":
			if len(args) == 0 {
				p.errorf("head: option %s needs a number", opt)
				return 1
			}
			val, args = args[0], args[1:]
		case strings.HasPrefix(opt, "-c") || strings.HasPrefix(opt, "-n"):
			val = opt[2:]
		default:
			p.errorf("head: unknown option %s", opt)
			return 1
		}
		v, err := strconv.ParseInt(val, 10, 64)
		if err != nil || v < 0 {
			p.errorf("head: invalid number %q", val)
			return 1
		}
		bytesMode, n = opt[1] == 'c', v
	}
	in := p.stdin
	if len(args) > 0 && args[0] != "-" {
		var data []byte
		if err := p.fs(func(s *FakeSession) (err error) {
			data, err = s.readLocked(p.abs(args[0]))
			return err
		}); err != nil {
			p.errorf("head: %s: %v", args[0], err)
			return 1
		}
		in = bytes.NewReader(data)
	}
	if bytesMode {
		if _, err := io.CopyN(p.stdout, in, n); err != nil && err != io.EOF {
			return 1
		}
		return 0
	}
	var line [1]byte
	var out []byte
	for n > 0 {
		k, err := in.Read(line[:])
		if k == 1 {
			out = append(out, line[0])
			if line[0] == '\n' {
				n--
				p.stdout.Write(out)
				out = out[:0]
			}
		}
		if err != nil {
			break
		}
	}
	if len(out) > 0 {
		p.stdout.Write(out)
	}
	return 0
}

func cmdYes(p *proc, argv []string) int {
	line := "y"
	if len(argv) > 1 {
		line = strings.Join(argv[1:], " ")
	}
	chunk := []byte(strings.Repeat(line+"\n", max(1, 4096/(len(line)+1))))
	for {
		if p.ctx.Err() != nil {
			return 1
		}
		if _, err := p.stdout.Write(chunk); err != nil {
			return 1
		}
	}
}

func cmdMkdir(p *proc, argv []string) int {
	parents := false
	code := 0
	for _, a := range argv[1:] {
		if a == "-p" {
			parents = true
			continue
		}
		err := p.fs(func(s *FakeSession) error {
			if !parents {
				r, err := s.resolve(p.abs(a), false)
				if err != nil {
					return err
				}
				if s.files[r] != nil {
					return fmt.Errorf("file exists: %w", sandbox.ErrExist)
				}
				if d := s.files[path.Dir(r)]; d == nil || d.typ != sandbox.TypeDir {
					return fmt.Errorf("no such directory: %w", sandbox.ErrNotFound)
				}
			}
			return s.mkdirLocked(p.abs(a))
		})
		if err != nil {
			p.errorf("mkdir: %s: %v", a, err)
			code = 1
		}
	}
	return code
}

func cmdRm(p *proc, argv []string) int {
	recursive, force := false, false
	code := 0
	for _, a := range argv[1:] {
		if strings.HasPrefix(a, "-") && len(a) > 1 {
			recursive = recursive || strings.ContainsAny(a, "rR")
			force = force || strings.Contains(a, "f")
			continue
		}
		err := p.fs(func(s *FakeSession) error {
			r, err := s.resolve(p.abs(a), false)
			if err != nil {
				return err
			}
			if n := s.files[r]; n != nil && n.typ == sandbox.TypeDir && !recursive {
				return fmt.Errorf("is a directory: %w", sandbox.ErrInvalid)
			}
			return s.removeLocked(p.abs(a))
		})
		if err != nil && !(force && errors.Is(err, sandbox.ErrNotFound)) {
			p.errorf("rm: %s: %v", a, err)
			code = 1
		}
	}
	return code
}

func cmdTouch(p *proc, argv []string) int {
	code := 0
	for _, a := range argv[1:] {
		err := p.fs(func(s *FakeSession) error {
			r, err := s.resolve(p.abs(a), true)
			if err != nil {
				return err
			}
			if n := s.files[r]; n != nil {
				n.mtime = s.rt.now()
				return nil
			}
			if d := s.files[path.Dir(r)]; d == nil || d.typ != sandbox.TypeDir {
				return fmt.Errorf("no such directory: %w", sandbox.ErrNotFound)
			}
			s.files[r] = &node{typ: sandbox.TypeFile, mode: 0o644, mtime: s.rt.now()}
			return nil
		})
		if err != nil {
			p.errorf("touch: %s: %v", a, err)
			code = 1
		}
	}
	return code
}

// cmdLs prints the names in each directory argument (or the working
// directory), one a line, sorted; a file argument prints itself.
func cmdLs(p *proc, argv []string) int {
	var args []string
	for _, a := range argv[1:] {
		if !strings.HasPrefix(a, "-") {
			args = append(args, a)
		}
	}
	if len(args) == 0 {
		args = []string{"."}
	}
	code := 0
	for _, a := range args {
		var names []string
		err := p.fs(func(s *FakeSession) error {
			r, err := s.resolve(p.abs(a), true)
			if err != nil {
				return err
			}
			n := s.files[r]
			if n == nil {
				return fmt.Errorf("no such file or directory: %w", sandbox.ErrNotFound)
			}
			if n.typ != sandbox.TypeDir {
				names = []string{a}
				return nil
			}
			for _, c := range s.walk(r) {
				if path.Dir(c) == r {
					names = append(names, path.Base(c))
				}
			}
			return nil
		})
		if err != nil {
			p.errorf("ls: %s: %v", a, err)
			code = 2
			continue
		}
		for _, n := range names {
			fmt.Fprintln(p.stdout, n)
		}
	}
	return code
}

// cmdTest supports -e -f -d -L -s -z -n, = and != on strings, and
// -eq -ne -lt -le -gt -ge on integers, with an optional leading "!".
func cmdTest(p *proc, argv []string) int {
	args := argv[1:]
	if argv[0] == "[" {
		if len(args) == 0 || args[len(args)-1] != "]" {
			p.errorf("[: missing ]")
			return 2
		}
		args = args[:len(args)-1]
	}
	neg := false
	if len(args) > 0 && args[0] == "!" {
		neg, args = true, args[1:]
	}
	ok, err := evalTest(p, args)
	if err != nil {
		p.errorf("test: %v", err)
		return 2
	}
	if ok != neg {
		return 0
	}
	return 1
}

func evalTest(p *proc, args []string) (bool, error) {
	switch len(args) {
	case 0:
		return false, nil
	case 1:
		return args[0] != "", nil
	case 2:
		op, a := args[0], args[1]
		switch op {
		case "-z":
			return a == "", nil
		case "-n":
			return a != "", nil
		case "-e", "-f", "-d", "-L", "-h", "-s":
			var n *node
			p.fs(func(s *FakeSession) error {
				r, err := s.resolve(p.abs(a), op != "-L" && op != "-h")
				if err == nil {
					n = s.files[r]
				}
				return nil
			})
			switch op {
			case "-e":
				return n != nil, nil
			case "-f":
				return n != nil && n.typ == sandbox.TypeFile, nil
			case "-d":
				return n != nil && n.typ == sandbox.TypeDir, nil
			case "-s":
				return n != nil && len(n.data) > 0, nil
			default:
				return n != nil && n.typ == sandbox.TypeSymlink, nil
			}
		}
	case 3:
		a, op, b := args[0], args[1], args[2]
		switch op {
		case "=", "==":
			return a == b, nil
		case "!=":
			return a != b, nil
		case "-eq", "-ne", "-lt", "-le", "-gt", "-ge":
			x, err1 := strconv.Atoi(a)
			y, err2 := strconv.Atoi(b)
			if err1 != nil || err2 != nil {
				return false, fmt.Errorf("integer expression expected")
			}
			return map[string]bool{"-eq": x == y, "-ne": x != y, "-lt": x < y, "-le": x <= y, "-gt": x > y, "-ge": x >= y}[op], nil
		}
	}
	return false, fmt.Errorf("unsupported expression %q", args)
}

func cmdWhoami(p *proc, _ []string) int {
	fmt.Fprintln(p.stdout, p.user)
	return 0
}

// cmdSh runs sh -c SCRIPT [NAME [ARG...]], sh FILE, or a script read
// from standard input.
func cmdSh(p *proc, argv []string) int {
	var script string
	var positional []string
	args := argv[1:]
	for len(args) > 0 && strings.HasPrefix(args[0], "-") && args[0] != "-c" {
		args = args[1:] // -e, -x, ...: accepted and ignored
	}
	switch {
	case len(args) > 0 && args[0] == "-c":
		if len(args) < 2 {
			p.errorf("sh: -c requires an argument")
			return 2
		}
		script = args[1]
		positional = args[2:]
		if len(positional) == 0 {
			positional = []string{argv[0]}
		}
	case len(args) > 0:
		var data []byte
		if err := p.fs(func(s *FakeSession) (err error) {
			data, err = s.readLocked(p.abs(args[0]))
			return err
		}); err != nil {
			p.errorf("sh: %s: %v", args[0], err)
			return 127
		}
		script, positional = string(data), args
	default:
		data, err := io.ReadAll(p.stdin)
		if err != nil {
			return 1
		}
		script, positional = string(data), []string{argv[0]}
	}
	list, err := parseScript(script)
	if err != nil {
		p.errorf("sh: syntax error: %v", err)
		return 2
	}
	sh := &shell{
		vars:       maps.Clone(p.env),
		dir:        p.dir,
		positional: positional,
	}
	return sh.runList(p, list)
}

// ---- The fake shell: parsing ----

// A script is a list of and-or chains of pipelines of simple commands.
type (
	andOr struct {
		first pipeline
		rest  []andOrPart
	}
	andOrPart struct {
		op string // "&&" or "||"
		p  pipeline
	}
	pipeline struct {
		neg  bool
		cmds []simpleCmd
	}
	simpleCmd struct {
		assigns []assign
		words   []word
		redirs  []redir
	}
	assign struct {
		name  string
		value word
	}
	redir struct {
		fd     int    // 0, 1 or 2
		op     string // ">", ">>", "<", ">&"
		target word
	}
	// word is concatenated parts: literal text and $-expansions, each
	// quoted or not (unquoted expansions are split into fields).
	word     []wordPart
	wordPart struct {
		text   string // literal text, or the variable's name
		isVar  bool
		quoted bool
	}
)

type tokKind int

const (
	tokWord tokKind = iota
	tokOp           // ; newline && || | &
	tokRedir
)

type token struct {
	kind tokKind
	w    word
	op   string
	fd   int
}

func tokenize(src string) ([]token, error) {
	var toks []token
	i := 0
	for i < len(src) {
		c := src[i]
		switch {
		case c == ' ' || c == '\t':
			i++
		case c == '\\' && i+1 < len(src) && src[i+1] == '\n':
			i += 2
		case c == '\n' || c == ';':
			toks = append(toks, token{kind: tokOp, op: string(c)})
			i++
		case c == '#':
			for i < len(src) && src[i] != '\n' {
				i++
			}
		case c == '&' || c == '|':
			if i+1 < len(src) && src[i+1] == c {
				toks = append(toks, token{kind: tokOp, op: string([]byte{c, c})})
				i += 2
			} else {
				toks = append(toks, token{kind: tokOp, op: string(c)})
				i++
			}
		case c == '>' || c == '<' || (c >= '0' && c <= '9' && i+1 < len(src) && (src[i+1] == '>' || src[i+1] == '<')):
			fd := 1
			if c == '<' {
				fd = 0
			}
			if c >= '0' && c <= '9' {
				fd = int(c - '0')
				i++
				c = src[i]
			}
			op := string(c)
			i++
			if c == '>' && i < len(src) && (src[i] == '>' || src[i] == '&') {
				op += string(src[i])
				i++
			}
			if fd > 2 {
				return nil, fmt.Errorf("file descriptor %d: the fake shell knows only 0, 1 and 2", fd)
			}
			toks = append(toks, token{kind: tokRedir, op: op, fd: fd})
		default:
			w, n, err := scanWord(src[i:])
			if err != nil {
				return nil, err
			}
			toks = append(toks, token{kind: tokWord, w: w})
			i += n
		}
	}
	return toks, nil
}

// scanWord reads one word at the start of src and returns it with the
// number of bytes it took.
func scanWord(src string) (word, int, error) {
	var w word
	var lit strings.Builder // unquoted literal text not yet in w
	flush := func() {
		if lit.Len() > 0 {
			w = append(w, wordPart{text: lit.String()})
		}
		lit.Reset()
	}
	i := 0
	for i < len(src) {
		c := src[i]
		switch {
		case strings.IndexByte(" \t\n;&|<>", c) >= 0:
			flush()
			return w, i, nil
		case c == '\\':
			if i+1 < len(src) {
				if src[i+1] != '\n' {
					lit.WriteByte(src[i+1])
				}
				i += 2
			} else {
				i++
			}
		case c == '\'':
			flush()
			end := strings.IndexByte(src[i+1:], '\'')
			if end < 0 {
				return nil, 0, fmt.Errorf("unterminated single quote")
			}
			w = append(w, wordPart{text: src[i+1 : i+1+end], quoted: true})
			i += end + 2
		case c == '"':
			flush()
			i++
			closed := false
			empty := true
			for i < len(src) && !closed {
				d := src[i]
				switch {
				case d == '"':
					closed = true
					i++
				case d == '\\' && i+1 < len(src) && strings.IndexByte("\"\\$`\n", src[i+1]) >= 0:
					if src[i+1] != '\n' {
						lit.WriteByte(src[i+1])
					}
					i += 2
				case d == '$':
					name, n := scanVar(src[i:])
					if n == 0 {
						lit.WriteByte('$')
						i++
						continue
					}
					if lit.Len() > 0 {
						w = append(w, wordPart{text: lit.String(), quoted: true})
						lit.Reset()
					}
					w = append(w, wordPart{text: name, isVar: true, quoted: true})
					empty = false
					i += n
				default:
					lit.WriteByte(d)
					i++
				}
			}
			if !closed {
				return nil, 0, fmt.Errorf("unterminated double quote")
			}
			if lit.Len() > 0 || empty {
				w = append(w, wordPart{text: lit.String(), quoted: true})
			}
			lit.Reset()
		case c == '$':
			name, n := scanVar(src[i:])
			if n == 0 {
				lit.WriteByte('$')
				i++
				continue
			}
			flush()
			w = append(w, wordPart{text: name, isVar: true})
			i += n
		default:
			lit.WriteByte(c)
			i++
		}
	}
	flush()
	return w, i, nil
}

// scanVar reads "$NAME", "${NAME}" or "$?"-like specials at the start of
// src; n is 0 when there is none.
func scanVar(src string) (name string, n int) {
	if len(src) < 2 {
		return "", 0
	}
	c := src[1]
	switch {
	case c == '{':
		end := strings.IndexByte(src, '}')
		if end < 0 {
			return "", 0
		}
		return src[2:end], end + 1
	case strings.IndexByte("?#$@*!-", c) >= 0 || (c >= '0' && c <= '9'):
		return string(c), 2
	case c == '_' || (c|0x20 >= 'a' && c|0x20 <= 'z'):
		j := 2
		for j < len(src) && (src[j] == '_' || (src[j]|0x20 >= 'a' && src[j]|0x20 <= 'z') || (src[j] >= '0' && src[j] <= '9')) {
			j++
		}
		return src[1:j], j
	}
	return "", 0
}

func parseScript(src string) ([]andOr, error) {
	toks, err := tokenize(src)
	if err != nil {
		return nil, err
	}
	ps := &parser{toks: toks}
	var list []andOr
	for {
		for ps.peekSep() {
			ps.i++
		}
		if ps.i >= len(ps.toks) {
			return list, nil
		}
		ao, err := ps.andOr()
		if err != nil {
			return nil, err
		}
		list = append(list, ao)
		if ps.i < len(ps.toks) && !ps.peekSep() {
			t := ps.toks[ps.i]
			if t.op == "&" {
				return nil, fmt.Errorf("background jobs (&) are not supported by the fake shell; use Session.Start")
			}
			return nil, fmt.Errorf("unexpected %q", t.op)
		}
	}
}

type parser struct {
	toks []token
	i    int
}

func (ps *parser) peekOp(op string) bool {
	return ps.i < len(ps.toks) && ps.toks[ps.i].kind == tokOp && ps.toks[ps.i].op == op
}

// peekSep reports whether a command separator, ";" or a newline, is next.
func (ps *parser) peekSep() bool { return ps.peekOp(";") || ps.peekOp("\n") }

func (ps *parser) andOr() (andOr, error) {
	first, err := ps.pipeline()
	if err != nil {
		return andOr{}, err
	}
	ao := andOr{first: first}
	for ps.peekOp("&&") || ps.peekOp("||") {
		op := ps.toks[ps.i].op
		ps.i++
		for ps.peekOp("\n") {
			ps.i++ // a newline may follow && and ||
		}
		p, err := ps.pipeline()
		if err != nil {
			return andOr{}, err
		}
		ao.rest = append(ao.rest, andOrPart{op, p})
	}
	return ao, nil
}

func (ps *parser) pipeline() (pipeline, error) {
	var pl pipeline
	if ps.i < len(ps.toks) && ps.toks[ps.i].kind == tokWord && len(ps.toks[ps.i].w) == 1 &&
		ps.toks[ps.i].w[0] == (wordPart{text: "!"}) {
		pl.neg = true
		ps.i++
	}
	for {
		c, err := ps.command()
		if err != nil {
			return pipeline{}, err
		}
		pl.cmds = append(pl.cmds, c)
		if !ps.peekOp("|") {
			return pl, nil
		}
		ps.i++
	}
}

func (ps *parser) command() (simpleCmd, error) {
	var c simpleCmd
	for ps.i < len(ps.toks) {
		t := ps.toks[ps.i]
		switch t.kind {
		case tokOp:
			if len(c.words) == 0 && len(c.assigns) == 0 && len(c.redirs) == 0 {
				return c, fmt.Errorf("unexpected %q", t.op)
			}
			return c, nil
		case tokRedir:
			ps.i++
			if ps.i >= len(ps.toks) || ps.toks[ps.i].kind != tokWord {
				return c, fmt.Errorf("redirection %s without a target", t.op)
			}
			c.redirs = append(c.redirs, redir{fd: t.fd, op: t.op, target: ps.toks[ps.i].w})
			ps.i++
		default:
			if a, ok := asAssign(t.w); ok && len(c.words) == 0 {
				c.assigns = append(c.assigns, a)
			} else {
				c.words = append(c.words, t.w)
			}
			ps.i++
		}
	}
	if len(c.words) == 0 && len(c.assigns) == 0 && len(c.redirs) == 0 {
		return c, fmt.Errorf("unexpected end of script")
	}
	return c, nil
}

// asAssign recognises NAME=value.
func asAssign(w word) (assign, bool) {
	if len(w) == 0 || w[0].isVar || w[0].quoted {
		return assign{}, false
	}
	name, rest, ok := strings.Cut(w[0].text, "=")
	if !ok || name == "" {
		return assign{}, false
	}
	for i, c := range []byte(name) {
		if !(c == '_' || (c|0x20 >= 'a' && c|0x20 <= 'z') || (i > 0 && c >= '0' && c <= '9')) {
			return assign{}, false
		}
	}
	value := word{{text: rest}}
	value = append(value, w[1:]...)
	return assign{name: name, value: value}, true
}

// ---- The fake shell: running ----

type shell struct {
	vars       map[string]string
	dir        string
	positional []string // $0, $1, ...
	last       int      // $?
	exited     bool
}

func (sh *shell) lookup(p *proc, name string) string {
	switch name {
	case "?":
		return strconv.Itoa(sh.last)
	case "$":
		return strconv.Itoa(p.pid)
	case "#":
		return strconv.Itoa(max(0, len(sh.positional)-1))
	case "@", "*":
		if len(sh.positional) < 2 {
			return ""
		}
		return strings.Join(sh.positional[1:], " ")
	}
	if n, err := strconv.Atoi(name); err == nil {
		if n < len(sh.positional) {
			return sh.positional[n]
		}
		return ""
	}
	return sh.vars[name]
}

// expand turns a word into fields: unquoted expansions split on blanks.
func (sh *shell) expand(p *proc, w word) []string {
	var fields []string
	var cur strings.Builder
	have := false
	flush := func() {
		if have {
			fields = append(fields, cur.String())
		}
		cur.Reset()
		have = false
	}
	for _, part := range w {
		if !part.isVar {
			cur.WriteString(part.text)
			have = have || part.quoted || part.text != ""
			continue
		}
		val := sh.lookup(p, part.text)
		if part.quoted {
			cur.WriteString(val)
			have = true
			continue
		}
		fs := strings.Fields(val)
		if len(fs) == 0 {
			if val != "" {
				flush() // all blanks: a field break
			}
			continue
		}
		if strings.IndexByte(" \t\n", val[0]) >= 0 {
			flush()
		}
		for i, f := range fs {
			if i > 0 {
				flush()
			}
			cur.WriteString(f)
			have = true
		}
		if strings.IndexByte(" \t\n", val[len(val)-1]) >= 0 {
			flush()
		}
	}
	flush()
	return fields
}

// expandOne expands a word without field splitting.
func (sh *shell) expandOne(p *proc, w word) string {
	var b strings.Builder
	for _, part := range w {
		if part.isVar {
			b.WriteString(sh.lookup(p, part.text))
		} else {
			b.WriteString(part.text)
		}
	}
	return b.String()
}

func (sh *shell) runList(p *proc, list []andOr) int {
	for _, ao := range list {
		if sh.exited || p.ctx.Err() != nil {
			break
		}
		sh.last = sh.runPipeline(p, ao.first)
		for _, part := range ao.rest {
			if sh.exited || p.ctx.Err() != nil {
				break
			}
			if (part.op == "&&") != (sh.last == 0) {
				continue
			}
			sh.last = sh.runPipeline(p, part.p)
		}
	}
	return sh.last
}

func (sh *shell) runPipeline(p *proc, pl pipeline) int {
	var code int
	if len(pl.cmds) == 1 {
		code = sh.runCmd(p, pl.cmds[0], false)
	} else {
		codes := make([]int, len(pl.cmds))
		var wg sync.WaitGroup
		stdin := p.stdin
		for i, c := range pl.cmds {
			q := *p
			q.stdin = stdin
			var pw *io.PipeWriter
			if i < len(pl.cmds)-1 {
				var pr *io.PipeReader
				pr, pw = io.Pipe()
				q.stdout = pw
				stdin = pr
			}
			in, _ := q.stdin.(*io.PipeReader)
			sub := &shell{vars: maps.Clone(sh.vars), dir: sh.dir, positional: sh.positional, last: sh.last}
			wg.Add(1)
			go func() {
				defer wg.Done()
				codes[i] = sub.runCmd(&q, c, true)
				if pw != nil {
					pw.Close()
				}
				if in != nil {
					in.CloseWithError(io.ErrClosedPipe) // the writer gets a broken pipe
				}
			}()
		}
		wg.Wait()
		code = codes[len(codes)-1]
	}
	if pl.neg {
		if code == 0 {
			return 1
		}
		return 0
	}
	return code
}

// runCmd runs one simple command; in a subshell (a pipeline member) exit,
// cd and assignments do not reach the parent shell.
func (sh *shell) runCmd(p *proc, c simpleCmd, subshell bool) int {
	var argv []string
	for _, w := range c.words {
		argv = append(argv, sh.expand(p, w)...)
	}
	env := sh.vars
	if len(argv) > 0 && len(c.assigns) > 0 {
		env = maps.Clone(sh.vars)
	}
	for _, a := range c.assigns {
		env[a.name] = sh.expandOne(p, a.value)
	}
	q := *p
	q.dir = sh.dir
	q.env = env
	if err := sh.redirect(&q, c.redirs); err != nil {
		fmt.Fprintf(p.stderr, "sh: %v\n", err)
		return 1
	}
	if len(argv) == 0 {
		return 0
	}
	switch argv[0] {
	case "exit":
		code := cmdExit(&q, argv)
		if len(argv) < 2 {
			code = sh.last
		}
		sh.exited = !subshell
		return code
	case "cd":
		return sh.cd(&q, argv)
	case "export":
		for _, a := range argv[1:] {
			if name, v, ok := strings.Cut(a, "="); ok {
				sh.vars[name] = v
			}
		}
		return 0
	case "unset":
		for _, a := range argv[1:] {
			delete(sh.vars, a)
		}
		return 0
	}
	prog, err := lookProgram(argv[0])
	if err != nil {
		fmt.Fprintf(q.stderr, "sh: %s: not found\n", argv[0])
		return 127
	}
	q.env = maps.Clone(env)
	q.env["PWD"] = sh.dir
	return prog(&q, argv)
}

func (sh *shell) cd(p *proc, argv []string) int {
	target := sh.vars["HOME"]
	if len(argv) > 1 {
		target = argv[1]
	}
	var dir string
	err := p.fs(func(s *FakeSession) error {
		r, err := s.resolve(p.abs(target), true)
		if err != nil {
			return err
		}
		if n := s.files[r]; n == nil || n.typ != sandbox.TypeDir {
			return fmt.Errorf("not a directory: %w", sandbox.ErrNotFound)
		}
		dir = r
		return nil
	})
	if err != nil {
		p.errorf("sh: cd: %s: %v", target, err)
		return 2
	}
	sh.dir = dir
	return 0
}

// redirect applies redirections to p's standard streams, in order.
func (sh *shell) redirect(p *proc, rs []redir) error {
	for _, r := range rs {
		target := sh.expandOne(p, r.target)
		switch r.op {
		case ">&":
			var w io.Writer
			switch target {
			case "1":
				w = p.stdout
			case "2":
				w = p.stderr
			default:
				return fmt.Errorf("%d>&%s: the fake shell duplicates only 1 and 2", r.fd, target)
			}
			if r.fd == 2 {
				p.stderr = w
			} else {
				p.stdout = w
			}
		case "<":
			var data []byte
			if err := p.fs(func(s *FakeSession) (err error) {
				data, err = s.readLocked(p.abs(target))
				return err
			}); err != nil {
				return fmt.Errorf("%s: %v", target, err)
			}
			p.stdin = bytes.NewReader(data)
		default: // > and >>
			fw, err := openRedirect(p, p.abs(target), r.op == ">>")
			if err != nil {
				return fmt.Errorf("cannot create %s: %v", target, err)
			}
			if r.fd == 2 {
				p.stderr = fw
			} else {
				p.stdout = fw
			}
		}
	}
	return nil
}

// fileWriter appends a command's output to an in-memory file. It keeps
// the node, so a file removed meanwhile goes on growing unseen, as an
// unlinked file does.
type fileWriter struct {
	s *FakeSession
	n *node
}

func openRedirect(p *proc, name string, appendTo bool) (*fileWriter, error) {
	var fw *fileWriter
	err := p.fs(func(s *FakeSession) error {
		r, err := s.resolve(name, true)
		if err != nil {
			return err
		}
		n := s.files[r]
		switch {
		case n == nil:
			if d := s.files[path.Dir(r)]; d == nil || d.typ != sandbox.TypeDir {
				return fmt.Errorf("directory nonexistent: %w", sandbox.ErrNotFound)
			}
			n = &node{typ: sandbox.TypeFile, mode: 0o644, mtime: s.rt.now()}
			s.files[r] = n
		case n.typ == sandbox.TypeDir:
			return fmt.Errorf("is a directory: %w", sandbox.ErrInvalid)
		case !appendTo:
			n.data = nil // a fresh slice: readers keep the old bytes
			n.mtime = s.rt.now()
		}
		fw = &fileWriter{s: s, n: n}
		return nil
	})
	return fw, err
}

func (w *fileWriter) Write(b []byte) (int, error) {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	if err := w.s.live(); err != nil {
		return 0, err
	}
	if err := w.s.checkGrow(int64(len(b))); err != nil {
		return 0, err
	}
	w.n.data = append(w.n.data, b...)
	w.n.mtime = w.s.rt.now()
	return len(b), nil
}
