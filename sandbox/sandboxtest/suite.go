// Package sandboxtest helps test code that implements sandbox.Runtime.
// Run is the conformance suite: every real runtime (local, hostproc,
// remote) passes all of it, and the in-memory fake (sandboxtest/fake)
// passes the part that needs no program (Options.Scripted). The rest
// serves the runtimes' tests: Main for test binaries that double as a
// sandbox's daemon, SyncBuffer, SmallFS, and the escape tests' roles.
package sandboxtest

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cove-sandbox/cove/sandbox"
)

// hangBound is how long the suite waits for something that must happen
// "promptly" (a cancelled command returning, an EOF being seen) before it
// calls it a hang. It is deliberately generous: the suite never asserts
// timing, only that nothing hangs.
const hangBound = 10 * time.Second

// Options adjusts the suite for what a runtime legitimately cannot do. The
// zero value runs every test.
type Options struct {
	// Listen makes a TCP server listen on port on the sandbox's own
	// loopback, echoing back every byte it reads, and returns once it
	// accepts connections. stop ends it. Exec alone has no portable way to
	// start such a server, so when Listen is nil the echo test of DialPort
	// is skipped; DialPort to a port nothing listens on is always tested.
	Listen func(t *testing.T, s sandbox.Session, port int) (stop func())
	// HostPaths says processes see the sandbox's files at host paths, as
	// in a runtime without a mount namespace: pwd in the workspace prints
	// some host directory ending in the workspace path. The suite then
	// checks only that suffix where it would compare a process's working
	// directory with a sandbox path. The file API still uses sandbox paths.
	HostPaths bool
	// Scripted says the runtime runs no programs of its own: a test
	// scripts what its processes do (sandboxtest/fake). Then only the
	// tests listed in scriptedTests run, those that need no program
	// (lifecycle, files, paths, snapshots, ports, and the errors Exec,
	// Start and Attach give before anything runs); a check that would run
	// a program inside one of them is left out, and so is the probe of
	// files outside the workspace (such a runtime has nothing there). The
	// others are skipped. Every real runtime runs the whole suite.
	Scripted bool
	// Symlink makes link, a path in the workspace, a symbolic link to
	// target, as "ln -s target link" in the workspace root does. nil runs
	// ln -s in the sandbox; a Scripted runtime gives its own.
	Symlink func(ctx context.Context, s sandbox.Session, target, link string) error
}

// Run runs the conformance suite against fresh runtimes from newRuntime,
// with every test enabled. See RunWithOptions.
func Run(t *testing.T, newRuntime func(t *testing.T) sandbox.Runtime) {
	t.Helper()
	RunWithOptions(t, newRuntime, Options{})
}

// RunWithOptions runs the conformance suite: subtests that assert the
// documented semantics of sandbox.Runtime, sandbox.Session and
// sandbox.Process. Every subtest calls newRuntime once and creates its own
// sandboxes, deleting them in t.Cleanup, so subtests are independent and
// run in parallel: newRuntime must be safe to call concurrently (it may
// return a shared runtime). Commands run inside the sandboxes are the
// programs of a POSIX userland (sh, cat, sleep, yes, head, printenv, ln
// and the like), which the runtime must provide unless Options.Scripted.
func RunWithOptions(t *testing.T, newRuntime func(t *testing.T) sandbox.Runtime, opts Options) {
	t.Helper()
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			for _, tc := range g.tests {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					if opts.Scripted && !scriptedTests[g.name+"/"+tc.name] {
						t.Skip("Options.Scripted: this test runs programs, which the runtime does not have")
					}
					h := &harness{rt: newRuntime(t), opts: opts}
					tc.fn(t, h)
				})
			}
		})
	}
}

type suiteTest struct {
	name string
	fn   func(t *testing.T, h *harness)
}

var groups = []struct {
	name  string
	tests []suiteTest
}{
	{"Lifecycle", []suiteTest{
		{"Create", testCreate},
		{"CreateCustomRoot", testCreateCustomRoot},
		{"CreateInvalid", testCreateInvalid},
		{"ConcurrentCreate", testConcurrentCreate},
		{"ListOrder", testListOrder},
		{"StopResume", testStopResume},
		{"ResumeRunning", testResumeRunning},
		{"Delete", testDelete},
		{"DeleteStopped", testDeleteStopped},
		{"Unknown", testUnknown},
		{"TTL", testTTL},
	}},
	{"Files", []suiteTest{
		{"RoundTrip", testRoundTrip},
		{"Overwrite", testOverwrite},
		{"ParentDirs", testParentDirs},
		{"RelativeAndAbsolute", testRelativeAndAbsolute},
		{"ExecSeesFiles", testExecSeesFiles},
		{"Stat", testStat},
		{"List", testList},
		{"Mkdir", testMkdir},
		{"Move", testMove},
		{"Remove", testRemove},
		{"ReadFileErrors", testReadFileErrors},
		{"SymlinkInside", testSymlinkInside},
		{"WriteFileReaderError", testWriteFileReaderError},
		{"Concurrent", testFilesConcurrent},
	}},
	{"Paths", []suiteTest{
		{"Hostile", testHostilePaths},
	}},
	{"Exec", []suiteTest{
		{"Output", testExecOutput},
		{"StdoutStderr", testExecStdoutStderr},
		{"Shell", testExecShell},
		{"ExitCode", testExecExitCode},
		{"Stdin", testExecStdin},
		{"LargeIO", testExecLargeIO},
		{"Env", testExecEnv},
		{"Dir", testExecDir},
		{"NotFound", testExecNotFound},
		{"Empty", testExecEmpty},
		{"Cancel", testExecCancel},
		{"Deadline", testExecDeadline},
		{"CancelWhileWriting", testExecCancelWhileWriting},
		{"Concurrent", testExecConcurrent},
	}},
	{"Process", []suiteTest{
		{"Stdin", testProcessStdin},
		{"StdinReader", testProcessStdinReader},
		{"Output", testProcessOutput},
		{"StartErrors", testProcessStartErrors},
		{"Processes", testProcesses},
		{"Signal", testProcessSignal},
		{"SignalGroup", testProcessSignalGroup},
		{"AttachByTag", testAttachByTag},
		{"AttachByPIDAfterExit", testAttachByPIDAfterExit},
		{"AttachUnknown", testAttachUnknown},
		{"WriteAfterExit", testWriteAfterExit},
		{"WriteClosedStdin", testWriteClosedStdin},
		{"DuplicateTag", testDuplicateTag},
		{"OutlivesContext", testOutlivesContext},
		{"WaitContext", testWaitContext},
		{"ResizeWithoutPTY", testResizeWithoutPTY},
	}},
	{"ProcessBySelector", processBySelectorTests},
	{"Snapshot", []suiteTest{
		{"RoundTrip", testSnapshotRoundTrip},
		{"RestoreNames", testRestoreNames},
		{"RestoreHostile", testRestoreHostile},
	}},
	{"Port", []suiteTest{
		{"Unavailable", testDialUnavailable},
		{"Echo", testDialEcho},
	}},
}

// scriptedTests are the tests an Options.Scripted runtime runs: those
// that need no program (a test added to the suite is left out until it is
// listed here).
var scriptedTests = map[string]bool{
	"Lifecycle/Create": true, "Lifecycle/CreateCustomRoot": true, "Lifecycle/CreateInvalid": true,
	"Lifecycle/ConcurrentCreate": true, "Lifecycle/ListOrder": true, "Lifecycle/Delete": true,
	"Lifecycle/DeleteStopped": true, "Lifecycle/Unknown": true, "Lifecycle/TTL": true,

	"Files/RoundTrip": true, "Files/Overwrite": true, "Files/ParentDirs": true,
	"Files/RelativeAndAbsolute": true, "Files/Stat": true, "Files/List": true, "Files/Mkdir": true,
	"Files/Move": true, "Files/Remove": true, "Files/ReadFileErrors": true, "Files/SymlinkInside": true,
	"Files/WriteFileReaderError": true, "Files/Concurrent": true,

	"Paths/Hostile": true,

	"Exec/NotFound": true, "Exec/Empty": true,

	"Process/StartErrors": true, "Process/AttachUnknown": true,

	"Snapshot/RoundTrip": true, "Snapshot/RestoreNames": true, "Snapshot/RestoreHostile": true,

	"Port/Unavailable": true, "Port/Echo": true,
}

// harness is one subtest's runtime.
type harness struct {
	rt   sandbox.Runtime
	opts Options
}

// create makes a sandbox and deletes it when the test ends. The deletion
// runs under context.WithoutCancel: t.Context is already cancelled then.
func (h *harness) create(t *testing.T, spec sandbox.Spec) sandbox.Session {
	t.Helper()
	s, err := h.rt.Create(t.Context(), spec)
	if err != nil {
		t.Fatalf("Create(%+v): %v", spec, err)
	}
	h.cleanup(t, s.ID())
	return s
}

func (h *harness) cleanup(t *testing.T, id string) {
	ctx := context.WithoutCancel(t.Context())
	t.Cleanup(func() {
		if err := h.rt.Delete(ctx, id); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("cleanup: Delete(%q): %v", id, err)
		}
	})
}

// samePwd reports whether pwd's output names the sandbox directory dir,
// allowing for Options.HostPaths.
func (h *harness) samePwd(out, dir string) bool {
	if h.opts.HostPaths {
		return strings.HasPrefix(out, "/") && strings.HasSuffix(out, dir+"\n")
	}
	return out == dir+"\n"
}

// programs says whether commands run real programs: false for an
// Options.Scripted runtime, whose tests leave out what only a program
// could check.
func (h *harness) programs() bool { return !h.opts.Scripted }

// symlink makes link a symbolic link to target, with Options.Symlink or
// ln -s.
func (h *harness) symlink(t *testing.T, s sandbox.Session, target, link string) {
	t.Helper()
	if h.opts.Symlink == nil {
		mustRun(t, s, "ln", "-s", target, link)
		return
	}
	if err := h.opts.Symlink(t.Context(), s, target, link); err != nil {
		t.Fatalf("Symlink(%q, %q): %v", target, link, err)
	}
}

// root returns the session's workspace root as Info reports it.
func root(t *testing.T, s sandbox.Session) string {
	t.Helper()
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatalf("Info: %v", err)
	}
	return info.Spec.Root
}

// ---- helpers ----

// waitFor polls cond until it holds, failing the test if it still does not
// after hangBound.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(hangBound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: still not the case after %v", what, hangBound)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func describe(req sandbox.ExecRequest) string {
	var b strings.Builder
	b.WriteString(strconv.Quote(req.Cmd))
	for _, a := range req.Args {
		b.WriteByte(' ')
		b.WriteString(strconv.Quote(a))
	}
	if req.Shell {
		b.WriteString(" (shell)")
	}
	if req.Dir != "" {
		fmt.Fprintf(&b, " in %q", req.Dir)
	}
	return b.String()
}

type execResult struct {
	stdout, stderr string
	status         sandbox.ExitStatus
}

// execute runs req to completion, capturing its output, and fails the test
// if Exec returns an error.
func execute(t *testing.T, s sandbox.Session, req sandbox.ExecRequest) execResult {
	t.Helper()
	var stdout, stderr SyncBuffer
	req.Stdout, req.Stderr = &stdout, &stderr
	st, err := s.Exec(t.Context(), req)
	if err != nil {
		t.Fatalf("Exec(%s): %v", describe(req), err)
	}
	return execResult{stdout: stdout.String(), stderr: stderr.String(), status: st}
}

// mustRun runs cmd args in the workspace root, fails the test unless it
// succeeds, and returns its standard output.
func mustRun(t *testing.T, s sandbox.Session, cmd string, args ...string) string {
	t.Helper()
	req := sandbox.ExecRequest{Cmd: cmd, Args: args}
	r := execute(t, s, req)
	if !r.status.Success() {
		t.Fatalf("Exec(%s): got status %+v (stderr %q), want success", describe(req), r.status, r.stderr)
	}
	return r.stdout
}

func writeFile(t *testing.T, s sandbox.Session, p string, content []byte, perm uint32) {
	t.Helper()
	if err := s.WriteFile(t.Context(), p, bytes.NewReader(content), perm); err != nil {
		t.Fatalf("WriteFile(%q): %v", p, err)
	}
}

func readFile(ctx context.Context, s sandbox.Session, p string) ([]byte, error) {
	rc, err := s.ReadFile(ctx, p)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return nil, fmt.Errorf("reading %q: %w", p, err)
	}
	if err := rc.Close(); err != nil {
		return nil, fmt.Errorf("closing %q: %w", p, err)
	}
	return b, nil
}

func mustRead(t *testing.T, s sandbox.Session, p string) string {
	t.Helper()
	b, err := readFile(t.Context(), s, p)
	if err != nil {
		t.Fatalf("ReadFile(%q): %v", p, err)
	}
	return string(b)
}

// checkContent compares file contents, reporting sizes and the first
// differing offset rather than dumping megabytes.
func checkContent(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if bytes.Equal(got, want) {
		return
	}
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	t.Errorf("%s: got %d bytes, want %d bytes; first difference at offset %d", what, len(got), len(want), i)
}

func wantErr(t *testing.T, op string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: got error %v, want %v", op, err, target)
	}
}

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func findInfo(infos []sandbox.Info, id string) (sandbox.Info, int) {
	for i, in := range infos {
		if in.ID == id {
			return in, i
		}
	}
	return sandbox.Info{}, -1
}

// entry is the portable part of a FileInfo, keyed by its path relative to
// the workspace root in a tree.
type entry struct {
	Type   sandbox.FileType
	Size   int64  // files only
	Mode   uint32 // permission bits, files only
	Target string // symlinks only
}

// tree lists the whole workspace. It also checks that listing never leaves
// the workspace (a recursive List must not follow a symlink out).
func tree(t *testing.T, s sandbox.Session) map[string]entry {
	t.Helper()
	r := root(t, s)
	fis, err := s.List(t.Context(), r, 64)
	if err != nil {
		t.Fatalf("List(%q, 64): %v", r, err)
	}
	m := make(map[string]entry, len(fis))
	for _, fi := range fis {
		if !sandbox.Within(r, fi.Path) || fi.Path == r {
			t.Errorf("List(%q, 64): got entry %q, want only entries below %s", r, fi.Path, r)
			continue
		}
		e := entry{Type: fi.Type, Target: fi.SymlinkTarget}
		if fi.Type == sandbox.TypeFile {
			e.Size, e.Mode = fi.Size, fi.Mode&0o777
		}
		m[strings.TrimPrefix(fi.Path, r+"/")] = e
	}
	return m
}

// probeOutside reads absolute paths with cat inside the sandbox, so a test
// can tell whether something outside the workspace changed. A Scripted
// runtime has nothing outside its workspace: it returns nil.
func (h *harness) probeOutside(t *testing.T, s sandbox.Session, paths []string) map[string]string {
	t.Helper()
	if !h.programs() {
		return nil
	}
	m := make(map[string]string, len(paths))
	for _, p := range paths {
		r := execute(t, s, sandbox.ExecRequest{Cmd: "cat", Args: []string{p}})
		m[p] = fmt.Sprintf("code %d: %q", r.status.Code, r.stdout)
	}
	return m
}

// fileInfoView is what the suite compares of a FileInfo: everything
// portable except sizes of non-files and modes of non-files.
type fileInfoView struct {
	Name, Path string
	Type       sandbox.FileType
	Size       int64
	Mode       uint32
	Target     string
}

func view(fi sandbox.FileInfo) fileInfoView {
	v := fileInfoView{Name: fi.Name, Path: fi.Path, Type: fi.Type, Target: fi.SymlinkTarget}
	if fi.Type == sandbox.TypeFile {
		v.Size, v.Mode = fi.Size, fi.Mode&0o777
	}
	return v
}

func views(fis []sandbox.FileInfo) []fileInfoView {
	vs := make([]fileInfoView, len(fis))
	for i, fi := range fis {
		vs[i] = view(fi)
	}
	slices.SortFunc(vs, func(a, b fileInfoView) int { return strings.Compare(a.Path, b.Path) })
	return vs
}

// ---- Lifecycle ----

func testCreate(t *testing.T, h *harness) {
	ctx := t.Context()
	spec := sandbox.Spec{
		Env:    map[string]string{"COVE_SUITE": "create", "COVE_EMPTY": ""},
		Labels: map[string]string{"suite": "conformance", "case": "create"},
	}
	s := h.create(t, spec)
	id := s.ID()
	if id == "" {
		t.Fatal("ID() is empty")
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatalf("Info: %v", err)
	}
	if info.ID != id {
		t.Errorf("Info().ID: got %q, want %q", info.ID, id)
	}
	if info.State != sandbox.StateRunning {
		t.Errorf("Info().State: got %q, want %q", info.State, sandbox.StateRunning)
	}
	if info.Spec.Root != sandbox.DefaultRoot {
		t.Errorf("Info().Spec.Root: got %q, want %q (the default)", info.Spec.Root, sandbox.DefaultRoot)
	}
	if diff := cmp.Diff(spec.Env, info.Spec.Env); diff != "" {
		t.Errorf("Info().Spec.Env mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(spec.Labels, info.Spec.Labels); diff != "" {
		t.Errorf("Info().Spec.Labels mismatch (-want +got):\n%s", diff)
	}
	if info.CreatedAt.IsZero() {
		t.Error("Info().CreatedAt is zero")
	}

	g, err := h.rt.Get(ctx, id)
	if err != nil {
		t.Fatalf("Get(%q): %v", id, err)
	}
	if g.ID() != id {
		t.Errorf("Get(%q).ID(): got %q", id, g.ID())
	}
	if h.programs() {
		if got := mustRun(t, g, "echo", "via-get"); got != "via-get\n" {
			t.Errorf("echo through Get's session: got %q, want %q", got, "via-get\n")
		}
	}

	infos, err := h.rt.List(ctx)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	li, i := findInfo(infos, id)
	if i < 0 {
		t.Fatalf("List: %q missing from %d sandboxes", id, len(infos))
	}
	if li.State != sandbox.StateRunning {
		t.Errorf("List entry State: got %q, want %q", li.State, sandbox.StateRunning)
	}
	if diff := cmp.Diff(spec.Labels, li.Spec.Labels); diff != "" {
		t.Errorf("List entry Spec.Labels mismatch (-want +got):\n%s", diff)
	}
}

func testCreateCustomRoot(t *testing.T, h *harness) {
	const r = "/srv/cove-suite/ws"
	s := h.create(t, sandbox.Spec{Root: r})
	if got := root(t, s); got != r {
		t.Errorf("Info().Spec.Root: got %q, want %q", got, r)
	}
	if h.programs() {
		if got := mustRun(t, s, "pwd"); !h.samePwd(got, r) {
			t.Errorf("pwd: got %q, want %q", got, r+"\n")
		}
	}
	writeFile(t, s, "f.txt", []byte("custom\n"), 0o644)
	fi, err := s.Stat(t.Context(), "f.txt")
	if err != nil {
		t.Fatalf("Stat(f.txt): %v", err)
	}
	if fi.Path != r+"/f.txt" {
		t.Errorf("Stat(f.txt).Path: got %q, want %q", fi.Path, r+"/f.txt")
	}
	if got := mustRead(t, s, r+"/f.txt"); got != "custom\n" {
		t.Errorf("ReadFile(%q): got %q, want %q", r+"/f.txt", got, "custom\n")
	}
	// The default root is outside this workspace.
	err = s.WriteFile(t.Context(), sandbox.DefaultRoot+"/x", strings.NewReader("x"), 0o644)
	wantErr(t, "WriteFile outside a custom root", err, sandbox.ErrInvalid)
}

func testCreateInvalid(t *testing.T, h *harness) {
	for _, tc := range []struct {
		name string
		spec sandbox.Spec
		want error
	}{
		{"relative root", sandbox.Spec{Root: "workspace"}, sandbox.ErrInvalid},
		{"root with NUL", sandbox.Spec{Root: "/work\x00space"}, sandbox.ErrInvalid},
		{"unknown template", sandbox.Spec{Template: "cove-suite-no-such-template"}, sandbox.ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := h.rt.Create(t.Context(), tc.spec)
			if err == nil {
				h.cleanup(t, s.ID())
			}
			wantErr(t, fmt.Sprintf("Create(%+v)", tc.spec), err, tc.want)
		})
	}
}

func testConcurrentCreate(t *testing.T, h *harness) {
	const n = 4
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			s, err := h.rt.Create(t.Context(), sandbox.Spec{Labels: map[string]string{"n": strconv.Itoa(i)}})
			if err != nil {
				t.Errorf("Create #%d: %v", i, err)
				return
			}
			h.cleanup(t, s.ID())
			ids[i] = s.ID()
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			t.Errorf("concurrent Create returned id %q twice: %q", id, ids)
		}
		seen[id] = true
	}
}

func testListOrder(t *testing.T, h *harness) {
	a := h.create(t, sandbox.Spec{Labels: map[string]string{"order": "first"}})
	b := h.create(t, sandbox.Spec{Labels: map[string]string{"order": "second"}})
	infos, err := h.rt.List(t.Context())
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	_, ia := findInfo(infos, a.ID())
	_, ib := findInfo(infos, b.ID())
	if ia < 0 || ib < 0 {
		t.Fatalf("List: got positions %d and %d for the two sandboxes, want both listed", ia, ib)
	}
	if ia > ib {
		t.Errorf("List: got the second sandbox at %d before the first at %d, want creation order", ib, ia)
	}
}

func testStopResume(t *testing.T, h *harness) {
	ctx := t.Context()
	s := h.create(t, sandbox.Spec{Env: map[string]string{"COVE_KEEP": "env"}})
	id := s.ID()
	writeFile(t, s, "keep/me.txt", []byte("kept\n"), 0o644)
	p, err := s.Start(ctx, sandbox.ExecRequest{Cmd: "sleep", Args: []string{"30"}, Tag: "before-stop"})
	if err != nil {
		t.Fatalf("Start(sleep 30): %v", err)
	}
	pid := p.PID()

	if err := h.rt.Stop(ctx, id); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	// Stop ended the process: Wait returns, with a status or an error.
	wctx, cancel := context.WithTimeout(ctx, hangBound)
	defer cancel()
	if _, err := p.Wait(wctx); errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait for a process of a stopped sandbox: still blocked after %v, want Stop to have ended it", hangBound)
	}
	g, err := h.rt.Get(ctx, id)
	if err != nil {
		t.Fatalf("Get of a stopped sandbox: %v", err)
	}
	info, err := g.Info(ctx)
	if err != nil {
		t.Fatalf("Info of a stopped sandbox: %v", err)
	}
	if info.State != sandbox.StateStopped {
		t.Errorf("Info().State after Stop: got %q, want %q", info.State, sandbox.StateStopped)
	}
	infos, err := h.rt.List(ctx)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if li, i := findInfo(infos, id); i < 0 {
		t.Errorf("List after Stop: %q missing", id)
	} else if li.State != sandbox.StateStopped {
		t.Errorf("List entry State after Stop: got %q, want %q", li.State, sandbox.StateStopped)
	}

	for name, sess := range map[string]sandbox.Session{"Create's session": s, "Get's session": g} {
		_, err := sess.Exec(ctx, sandbox.ExecRequest{Cmd: "true"})
		wantErr(t, "Exec in a stopped sandbox through "+name, err, sandbox.ErrState)
	}
	_, err = g.Start(ctx, sandbox.ExecRequest{Cmd: "true"})
	wantErr(t, "Start in a stopped sandbox", err, sandbox.ErrState)
	_, err = readFile(ctx, g, "keep/me.txt")
	wantErr(t, "ReadFile in a stopped sandbox", err, sandbox.ErrState)
	err = g.WriteFile(ctx, "new.txt", strings.NewReader("x"), 0o644)
	wantErr(t, "WriteFile in a stopped sandbox", err, sandbox.ErrState)

	if err := h.rt.Stop(ctx, id); err != nil {
		t.Errorf("Stop of a stopped sandbox: got %v, want no error", err)
	}

	r, err := h.rt.Resume(ctx, id)
	if err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if r.ID() != id {
		t.Errorf("Resume().ID(): got %q, want %q", r.ID(), id)
	}
	info, err = r.Info(ctx)
	if err != nil {
		t.Fatalf("Info after Resume: %v", err)
	}
	if info.State != sandbox.StateRunning {
		t.Errorf("Info().State after Resume: got %q, want %q", info.State, sandbox.StateRunning)
	}
	if got := mustRead(t, r, "keep/me.txt"); got != "kept\n" {
		t.Errorf("ReadFile(keep/me.txt) after Resume: got %q, want %q", got, "kept\n")
	}
	if got := mustRun(t, r, "cat", "keep/me.txt"); got != "kept\n" {
		t.Errorf("cat keep/me.txt after Resume: got %q, want %q", got, "kept\n")
	}
	if got := mustRun(t, r, "printenv", "COVE_KEEP"); got != "env\n" {
		t.Errorf("printenv COVE_KEEP after Resume: got %q, want %q", got, "env\n")
	}
	procs, err := r.Processes(ctx)
	if err != nil {
		t.Fatalf("Processes after Resume: %v", err)
	}
	for _, pi := range procs {
		if pi.Tag == "before-stop" {
			t.Errorf("Processes after Stop and Resume: got %+v (pid %d before stop), want it ended by Stop", pi, pid)
		}
	}
	g2, err := h.rt.Get(ctx, id)
	if err != nil {
		t.Fatalf("Get after Resume: %v", err)
	}
	if got := mustRun(t, g2, "echo", "back"); got != "back\n" {
		t.Errorf("echo through Get after Resume: got %q, want %q", got, "back\n")
	}
}

func testResumeRunning(t *testing.T, h *harness) {
	s := h.create(t, sandbox.Spec{})
	writeFile(t, s, "f.txt", []byte("still\n"), 0o644)
	r, err := h.rt.Resume(t.Context(), s.ID())
	if err != nil {
		t.Fatalf("Resume of a running sandbox: %v", err)
	}
	if r.ID() != s.ID() {
		t.Errorf("Resume().ID(): got %q, want %q", r.ID(), s.ID())
	}
	if got := mustRun(t, r, "cat", "f.txt"); got != "still\n" {
		t.Errorf("cat f.txt through Resume's session: got %q, want %q", got, "still\n")
	}
	if got := mustRun(t, s, "echo", "same"); got != "same\n" {
		t.Errorf("echo through the original session after Resume: got %q, want %q", got, "same\n")
	}
}

func checkGone(t *testing.T, h *harness, id string) {
	t.Helper()
	ctx := t.Context()
	_, err := h.rt.Get(ctx, id)
	wantErr(t, "Get after Delete", err, sandbox.ErrNotFound)
	infos, err := h.rt.List(ctx)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if _, i := findInfo(infos, id); i >= 0 {
		t.Errorf("List after Delete: got %q listed, want it gone", id)
	}
	wantErr(t, "Stop after Delete", h.rt.Stop(ctx, id), sandbox.ErrNotFound)
	_, err = h.rt.Resume(ctx, id)
	wantErr(t, "Resume after Delete", err, sandbox.ErrNotFound)
	wantErr(t, "Delete after Delete", h.rt.Delete(ctx, id), sandbox.ErrNotFound)
}

func testDelete(t *testing.T, h *harness) {
	ctx := t.Context()
	s := h.create(t, sandbox.Spec{})
	writeFile(t, s, "f.txt", []byte("doomed"), 0o644)
	if err := h.rt.Delete(ctx, s.ID()); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	checkGone(t, h, s.ID())
	if _, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "true"}); err == nil {
		t.Error("Exec through a deleted sandbox's session: got no error")
	}
}

func testDeleteStopped(t *testing.T, h *harness) {
	ctx := t.Context()
	s := h.create(t, sandbox.Spec{})
	if err := h.rt.Stop(ctx, s.ID()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := h.rt.Delete(ctx, s.ID()); err != nil {
		t.Fatalf("Delete of a stopped sandbox: %v", err)
	}
	checkGone(t, h, s.ID())
}

func testUnknown(t *testing.T, h *harness) {
	ctx := t.Context()
	const id = "cove-suite-no-such-sandbox"
	_, err := h.rt.Get(ctx, id)
	wantErr(t, "Get(unknown)", err, sandbox.ErrNotFound)
	wantErr(t, "Stop(unknown)", h.rt.Stop(ctx, id), sandbox.ErrNotFound)
	_, err = h.rt.Resume(ctx, id)
	wantErr(t, "Resume(unknown)", err, sandbox.ErrNotFound)
	wantErr(t, "Delete(unknown)", h.rt.Delete(ctx, id), sandbox.ErrNotFound)
}

func testTTL(t *testing.T, h *harness) {
	// The TTL counts from the create, so it must outlast the start: a
	// gVisor sandbox on a loaded machine, or a pod, takes over a second.
	s := h.create(t, sandbox.Spec{TTL: 5 * time.Second})
	// Not a timing assertion: only that the TTL stops it eventually.
	deadline := time.Now().Add(3 * hangBound)
	for {
		g, err := h.rt.Get(t.Context(), s.ID())
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		info, err := g.Info(t.Context())
		if err != nil {
			t.Fatalf("Info: %v", err)
		}
		if info.State == sandbox.StateStopped {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a sandbox with a 5s TTL: got state %q after %v, want %q", info.State, 3*hangBound, sandbox.StateStopped)
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, err := s.Exec(t.Context(), sandbox.ExecRequest{Cmd: "true"})
	wantErr(t, "Exec after the TTL stopped the sandbox", err, sandbox.ErrState)
}

// ---- Files ----

func testRoundTrip(t *testing.T, h *harness) {
	s := h.create(t, sandbox.Spec{})
	all := make([]byte, 4*256)
	for i := range all {
		all[i] = byte(i)
	}
	for _, tc := range []struct {
		name    string
		content []byte
	}{
		{"empty", nil},
		{"text", []byte("hello, sandbox\n")},
		{"zero bytes", []byte("\x00\x00a\x00b\x00\x00")},
		{"every byte value", all},
		{"1 MiB random", randomBytes(1<<20, 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := strings.ReplaceAll(tc.name, " ", "-") + ".bin"
			writeFile(t, s, p, tc.content, 0o644)
			got, err := readFile(t.Context(), s, p)
			if err != nil {
				t.Fatalf("ReadFile(%q): %v", p, err)
			}
			checkContent(t, "ReadFile("+p+")", got, tc.content)
			fi, err := s.Stat(t.Context(), p)
			if err != nil {
				t.Fatalf("Stat(%q): %v", p, err)
			}
			if fi.Size != int64(len(tc.content)) {
				t.Errorf("Stat(%q).Size: got %d, want %d", p, fi.Size, len(tc.content))
			}
		})
	}
}

func testOverwrite(t *testing.T, h *harness) {
	s := h.create(t, sandbox.Spec{})
	writeFile(t, s, "f.txt", []byte("a much longer first version\n"), 0o644)
	writeFile(t, s, "f.txt", []byte("short\n"), 0o644)
	if got := mustRead(t, s, "f.txt"); got != "short\n" {
		t.Errorf("ReadFile after replacing: got %q, want %q", got, "short\n")
	}
	fi, err := s.Stat(t.Context(), "f.txt")
	if err != nil {
		t.Fatalf("Stat: %v", err)
	}
	if fi.Size != 6 {
		t.Errorf("Stat().Size after replacing: got %d, want 6", fi.Size)
	}
}

func testParentDirs(t *testing.T, h *harness) {
	s := h.create(t, sandbox.Spec{})
	writeFile(t, s, "a/b/c/f.txt", []byte("deep"), 0o644)
	for _, d := range []string{"a", "a/b", "a/b/c"} {
		fi, err := s.Stat(t.Context(), d)
		if err != nil {
			t.Errorf("Stat(%q): %v", d, err)
			continue
		}
		if fi.Type != sandbox.TypeDir {
			t.Errorf("Stat(%q).Type: got %q, want %q", d, fi.Type, sandbox.TypeDir)
		}
	}
	if got := mustRead(t, s, "a/b/c/f.txt"); got != "deep" {
		t.Errorf("ReadFile: got %q, want %q", got, "deep")
	}
}

func testRelativeAndAbsolute(t *testing.T, h *harness) {
	s := h.create(t, sandbox.Spec{})
	r := root(t, s)
	if err := s.Mkdir(t.Context(), "sub"); err != nil {
		t.Fatalf("Mkdir(sub): %v", err)
	}
	for _, tc := range []struct{ write, read, abs string }{
		{"rel.txt", r + "/rel.txt", r + "/rel.txt"},
		{r + "/abs.txt", "abs.txt", r + "/abs.txt"},
		{"./dot.txt", "dot.txt", r + "/dot.txt"},
		{"sub/../up.txt", "up.txt", r + "/up.txt"},
		{"sub//double.txt", r + "/sub/double.txt", r + "/sub/double.txt"},
		{r + "/sub/../abs-up.txt", "abs-up.txt", r + "/abs-up.txt"},
	} {
		content := "written as " + tc.write
		writeFile(t, s, tc.write, []byte(content), 0o644)
		if got := mustRead(t, s, tc.read); got != content {
			t.Errorf("wrote %q, ReadFile(%q): got %q, want %q", tc.write, tc.read, got, content)
		}
		fi, err := s.Stat(t.Context(), tc.write)
		if err != nil {
			t.Errorf("Stat(%q): %v", tc.write, err)
		} else if fi.Path != tc.abs {
			t.Errorf("Stat(%q).Path: got %q, want %q", tc.write, fi.Path, tc.abs)
		}
	}
}

func testExecSeesFiles(t *testing.T, h *harness) {
	s := h.create(t, sandbox.Spec{})
	writeFile(t, s, "sub/from-api.txt", []byte("from the file API\n"), 0o644)
	if got := mustRun(t, s, "cat", "sub/from-api.txt"); got != "from the file API\n" {
		t.Errorf("cat of a written file: got %q, want %q", got, "from the file API\n")
	}
	mustRun(t, s, "sh", "-c", "echo from exec > sub/from-exec.txt; echo again >> sub/from-exec.txt")
	if got := mustRead(t, s, "sub/from-exec.txt"); got != "from exec\nagain\n" {
		t.Errorf("ReadFile of a file a command wrote: got %q, want %q", got, "from exec\nagain\n")
	}
}

func testStat(t *testing.T, h *harness) {
	ctx := t.Context()
	s := h.create(t, sandbox.Spec{})
	r := root(t, s)
	writeFile(t, s, "dir/f.txt", []byte("hello"), 0o600)
	writeFile(t, s, "dir/run", []byte("#!/bin/sh\n"), 0o755)
	h.symlink(t, s, "f.txt", "dir/link")
	for _, tc := range []struct {
		path string
		want fileInfoView
	}{
		{"dir/f.txt", fileInfoView{Name: "f.txt", Path: r + "/dir/f.txt", Type: sandbox.TypeFile, Size: 5, Mode: 0o600}},
		{r + "/dir/run", fileInfoView{Name: "run", Path: r + "/dir/run", Type: sandbox.TypeFile, Size: 10, Mode: 0o755}},
		{"dir", fileInfoView{Name: "dir", Path: r + "/dir", Type: sandbox.TypeDir}},
		{"dir/link", fileInfoView{Name: "link", Path: r + "/dir/link", Type: sandbox.TypeSymlink, Target: "f.txt"}},
		{r, fileInfoView{Name: path.Base(r), Path: r, Type: sandbox.TypeDir}},
	} {
		fi, err := s.Stat(ctx, tc.path)
		if err != nil {
			t.Errorf("Stat(%q): %v", tc.path, err)
			continue
		}
		if diff := cmp.Diff(tc.want, view(fi)); diff != "" {
			t.Errorf("Stat(%q) mismatch (-want +got):\n%s", tc.path, diff)
		}
		if fi.Type == sandbox.TypeFile && fi.ModTime.IsZero() {
			t.Errorf("Stat(%q).ModTime is zero", tc.path)
		}
	}
	_, err := s.Stat(ctx, "dir/missing")
	wantErr(t, "Stat(missing)", err, sandbox.ErrNotFound)
}

func testList(t *testing.T, h *harness) {
	ctx := t.Context()
	s := h.create(t, sandbox.Spec{})
	r := root(t, s)
	writeFile(t, s, "top/a.txt", []byte("a"), 0o644)
	writeFile(t, s, "top/d1/b.txt", []byte("bb"), 0o644)
	writeFile(t, s, "top/d1/d2/c.txt", []byte("ccc"), 0o644)
	if err := s.Mkdir(ctx, "top/empty"); err != nil {
		t.Fatalf("Mkdir: %v", err)
	}
	file := func(rel string, size int64) fileInfoView {
		return fileInfoView{Name: path.Base(rel), Path: r + "/" + rel, Type: sandbox.TypeFile, Size: size, Mode: 0o644}
	}
	dir := func(rel string) fileInfoView {
		return fileInfoView{Name: path.Base(rel), Path: r + "/" + rel, Type: sandbox.TypeDir}
	}
	depth1 := []fileInfoView{file("top/a.txt", 1), dir("top/d1"), dir("top/empty")}
	depth2 := []fileInfoView{file("top/a.txt", 1), dir("top/d1"), file("top/d1/b.txt", 2), dir("top/d1/d2"), dir("top/empty")}
	depth3 := []fileInfoView{file("top/a.txt", 1), dir("top/d1"), file("top/d1/b.txt", 2), dir("top/d1/d2"), file("top/d1/d2/c.txt", 3), dir("top/empty")}
	for _, tc := range []struct {
		path  string
		depth int
		want  []fileInfoView
	}{
		{"top", 0, depth1},
		{"top", 1, depth1},
		{r + "/top", 1, depth1},
		{"top", 2, depth2},
		{"top", 3, depth3},
		{"top", 10, depth3},
		{"top/empty", 1, []fileInfoView{}},
	} {
		fis, err := s.List(ctx, tc.path, tc.depth)
		if err != nil {
			t.Errorf("List(%q, %d): %v", tc.path, tc.depth, err)
			continue
		}
		if diff := cmp.Diff(tc.want, views(fis)); diff != "" {
			t.Errorf("List(%q, %d) mismatch (-want +got):\n%s", tc.path, tc.depth, diff)
		}
	}
	fis, err := s.List(ctx, ".", 1)
	if err != nil {
		t.Fatalf("List(., 1): %v", err)
	}
	if got := views(fis); !slices.Contains(got, dir("top")) {
		t.Errorf("List(., 1): got %+v, want it to contain %+v", got, dir("top"))
	}
	_, err = s.List(ctx, "missing", 1)
	wantErr(t, "List(missing)", err, sandbox.ErrNotFound)
}

func testMkdir(t *testing.T, h *harness) {
	ctx := t.Context()
	s := h.create(t, sandbox.Spec{})
	r := root(t, s)
	if err := s.Mkdir(ctx, "m/n/o"); err != nil {
		t.Fatalf("Mkdir(m/n/o): %v", err)
	}
	for _, p := range []string{"m", "m/n", "m/n/o"} {
		if fi, err := s.Stat(ctx, p); err != nil || fi.Type != sandbox.TypeDir {
			t.Errorf("Stat(%q) after Mkdir: got %+v, %v; want a directory", p, fi, err)
		}
	}
	for _, p := range []string{"m/n/o", "m", ".", r} {
		if err := s.Mkdir(ctx, p); err != nil {
			t.Errorf("Mkdir(%q) of an existing directory: got %v, want no error", p, err)
		}
	}
	writeFile(t, s, "file.txt", []byte("not a dir"), 0o644)
	wantErr(t, "Mkdir of an existing file", s.Mkdir(ctx, "file.txt"), sandbox.ErrExist)
	if got := mustRead(t, s, "file.txt"); got != "not a dir" {
		t.Errorf("ReadFile after a failed Mkdir: got %q, want %q", got, "not a dir")
	}
	// The directory is usable by commands.
	if h.programs() {
		mustRun(t, s, "sh", "-c", "echo in-dir > m/n/o/x.txt")
		if got := mustRead(t, s, "m/n/o/x.txt"); got != "in-dir\n" {
			t.Errorf("ReadFile(m/n/o/x.txt): got %q, want %q", got, "in-dir\n")
		}
	}
}

func testMove(t *testing.T, h *harness) {
	ctx := t.Context()
	s := h.create(t, sandbox.Spec{})
	r := root(t, s)

	writeFile(t, s, "src.txt", []byte("moving"), 0o600)
	if err := s.Move(ctx, "src.txt", "moved/deep/dst.txt"); err != nil {
		t.Fatalf("Move(src.txt, moved/deep/dst.txt): %v", err)
	}
	if got := mustRead(t, s, "moved/deep/dst.txt"); got != "moving" {
		t.Errorf("ReadFile after Move: got %q, want %q", got, "moving")
	}
	if fi, err := s.Stat(ctx, "moved/deep/dst.txt"); err != nil || fi.Mode&0o777 != 0o600 {
		t.Errorf("Stat after Move: got mode %o, %v; want mode 600", fi.Mode&0o777, err)
	}
	_, err := s.Stat(ctx, "src.txt")
	wantErr(t, "Stat of a moved file's old path", err, sandbox.ErrNotFound)

	writeFile(t, s, "tree/x", []byte("x"), 0o644)
	writeFile(t, s, "tree/sub/y", []byte("y"), 0o644)
	if err := s.Move(ctx, "tree", r+"/tree2"); err != nil {
		t.Fatalf("Move(tree, tree2): %v", err)
	}
	for p, want := range map[string]string{"tree2/x": "x", "tree2/sub/y": "y"} {
		if got := mustRead(t, s, p); got != want {
			t.Errorf("ReadFile(%q) after moving the directory: got %q, want %q", p, got, want)
		}
	}
	_, err = s.Stat(ctx, "tree")
	wantErr(t, "Stat of a moved directory's old path", err, sandbox.ErrNotFound)

	wantErr(t, "Move(missing)", s.Move(ctx, "missing", "anywhere"), sandbox.ErrNotFound)
	_, err = s.Stat(ctx, "anywhere")
	wantErr(t, "Stat of a failed Move's destination", err, sandbox.ErrNotFound)

	writeFile(t, s, "a.txt", []byte("a"), 0o644)
	writeFile(t, s, "b.txt", []byte("b"), 0o644)
	wantErr(t, "Move onto an existing file", s.Move(ctx, "a.txt", "b.txt"), sandbox.ErrExist)
	for p, want := range map[string]string{"a.txt": "a", "b.txt": "b"} {
		if got := mustRead(t, s, p); got != want {
			t.Errorf("ReadFile(%q) after a refused Move: got %q, want %q", p, got, want)
		}
	}
}

func testRemove(t *testing.T, h *harness) {
	ctx := t.Context()
	s := h.create(t, sandbox.Spec{})
	r := root(t, s)
	writeFile(t, s, "keep.txt", []byte("keep"), 0o644)

	writeFile(t, s, "f.txt", []byte("f"), 0o644)
	if err := s.Remove(ctx, "f.txt"); err != nil {
		t.Fatalf("Remove(f.txt): %v", err)
	}
	_, err := s.Stat(ctx, "f.txt")
	wantErr(t, "Stat after Remove", err, sandbox.ErrNotFound)

	writeFile(t, s, "t/a/b/c.txt", []byte("c"), 0o644)
	writeFile(t, s, "t/d.txt", []byte("d"), 0o644)
	if err := s.Remove(ctx, "t"); err != nil {
		t.Fatalf("Remove(t): %v", err)
	}
	_, err = s.Stat(ctx, "t")
	wantErr(t, "Stat of a removed tree", err, sandbox.ErrNotFound)

	wantErr(t, "Remove(missing)", s.Remove(ctx, "missing"), sandbox.ErrNotFound)

	// Removing a symlink removes the link, not its target.
	writeFile(t, s, "target.txt", []byte("target"), 0o644)
	h.symlink(t, s, "target.txt", "link")
	if err := s.Remove(ctx, "link"); err != nil {
		t.Fatalf("Remove(link): %v", err)
	}
	if got := mustRead(t, s, "target.txt"); got != "target" {
		t.Errorf("ReadFile(target.txt) after removing a link to it: got %q, want %q", got, "target")
	}

	for _, p := range []string{"", ".", r, r + "/", "sub/.."} {
		wantErr(t, fmt.Sprintf("Remove(%q) of the workspace root", p), s.Remove(ctx, p), sandbox.ErrInvalid)
	}
	if got := mustRead(t, s, "keep.txt"); got != "keep" {
		t.Errorf("ReadFile(keep.txt) after refused removals: got %q, want %q", got, "keep")
	}
}

func testReadFileErrors(t *testing.T, h *harness) {
	ctx := t.Context()
	s := h.create(t, sandbox.Spec{})
	if err := s.Mkdir(ctx, "dir"); err != nil {
		t.Fatalf("Mkdir: %v", err)
	}
	_, err := readFile(ctx, s, "dir")
	wantErr(t, "ReadFile of a directory", err, sandbox.ErrInvalid)
	_, err = readFile(ctx, s, ".")
	wantErr(t, "ReadFile of the workspace root", err, sandbox.ErrInvalid)
	_, err = readFile(ctx, s, "missing.txt")
	wantErr(t, "ReadFile of a missing file", err, sandbox.ErrNotFound)
	_, err = readFile(ctx, s, "missing-dir/f.txt")
	wantErr(t, "ReadFile in a missing directory", err, sandbox.ErrNotFound)
}

func testSymlinkInside(t *testing.T, h *harness) {
	s := h.create(t, sandbox.Spec{})
	writeFile(t, s, "real/sub/f.txt", []byte("through a link"), 0o644)
	writeFile(t, s, "top.txt", []byte("top"), 0o644)
	h.symlink(t, s, "real", "alias")
	h.symlink(t, s, "../top.txt", "real/up")
	if got := mustRead(t, s, "alias/sub/f.txt"); got != "through a link" {
		t.Errorf("ReadFile(alias/sub/f.txt): got %q, want %q", got, "through a link")
	}
	if got := mustRead(t, s, "real/up"); got != "top" {
		t.Errorf("ReadFile(real/up), a link to ../top.txt: got %q, want %q", got, "top")
	}
	writeFile(t, s, "alias/new.txt", []byte("new"), 0o644)
	if got := mustRead(t, s, "real/new.txt"); got != "new" {
		t.Errorf("ReadFile(real/new.txt) after WriteFile(alias/new.txt): got %q, want %q", got, "new")
	}
}

func testWriteFileReaderError(t *testing.T, h *harness) {
	s := h.create(t, sandbox.Spec{})
	boom := errors.New("reader broke")
	r := io.MultiReader(strings.NewReader("partial"), iotestErrReader{boom})
	if err := s.WriteFile(t.Context(), "f.txt", r, 0o644); err == nil {
		t.Error("WriteFile from a failing reader: got no error")
	}
}

type iotestErrReader struct{ err error }

func (r iotestErrReader) Read([]byte) (int, error) { return 0, r.err }

func testFilesConcurrent(t *testing.T, h *harness) {
	s := h.create(t, sandbox.Spec{})
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			p := fmt.Sprintf("c/%d/f.txt", i)
			want := bytes.Repeat([]byte{byte('a' + i)}, 1000+i)
			if err := s.WriteFile(t.Context(), p, bytes.NewReader(want), 0o644); err != nil {
				t.Errorf("WriteFile(%q): %v", p, err)
				return
			}
			got, err := readFile(t.Context(), s, p)
			if err != nil {
				t.Errorf("ReadFile(%q): %v", p, err)
				return
			}
			checkContent(t, "ReadFile("+p+")", got, want)
		})
	}
	wg.Wait()
}

// ---- Paths ----

// fileOps are the Session's file methods, each driven with one path.
var fileOps = []struct {
	name string
	do   func(ctx context.Context, s sandbox.Session, p string) error
}{
	{"Stat", func(ctx context.Context, s sandbox.Session, p string) error {
		_, err := s.Stat(ctx, p)
		return err
	}},
	{"ReadFile", func(ctx context.Context, s sandbox.Session, p string) error {
		_, err := readFile(ctx, s, p)
		return err
	}},
	{"WriteFile", func(ctx context.Context, s sandbox.Session, p string) error {
		return s.WriteFile(ctx, p, strings.NewReader("pwned\n"), 0o644)
	}},
	{"List", func(ctx context.Context, s sandbox.Session, p string) error {
		_, err := s.List(ctx, p, 1)
		return err
	}},
	{"Mkdir", func(ctx context.Context, s sandbox.Session, p string) error {
		return s.Mkdir(ctx, p)
	}},
	{"Remove", func(ctx context.Context, s sandbox.Session, p string) error {
		return s.Remove(ctx, p)
	}},
	{"MoveFrom", func(ctx context.Context, s sandbox.Session, p string) error {
		return s.Move(ctx, p, "moved")
	}},
	{"MoveTo", func(ctx context.Context, s sandbox.Session, p string) error {
		return s.Move(ctx, "bait.txt", p)
	}},
}

// outsideProbes are paths outside the workspace that the hostile cases
// aim at; none may change.
var outsideProbes = []string{"/x", "/etc/x", "/etc/passwd", "/moved"}

func testHostilePaths(t *testing.T, h *harness) {
	s := h.create(t, sandbox.Spec{})
	r := root(t, s)
	writeFile(t, s, "bait.txt", []byte("bait\n"), 0o644)
	if err := s.Mkdir(t.Context(), "okdir"); err != nil {
		t.Fatalf("Mkdir: %v", err)
	}
	h.symlink(t, s, "/etc", "esc")
	h.symlink(t, s, "..", "up")

	all := []string(nil) // every file op
	for _, tc := range []struct {
		name string
		path string
		ops  []string
	}{
		{"dotdot", "../x", all},
		{"nested dotdot", "a/../../x", all},
		{"absolute outside the workspace", "/etc/passwd", all},
		{"absolute climbing out", r + "/../x", all},
		{"absolute above /", "/../../x", all},
		{"NUL byte", "a\x00b", all},
		{"10k-character name", strings.Repeat("n", 10000), all},
		{"over-long path", strings.Repeat("d/", 2100) + "x", all},
		{"through symlink to /etc", "esc/passwd", all},
		{"new file through symlink to /etc", "esc/x", all},
		{"through symlink to the parent", "up/x", all},
		// Stat and Remove do not follow a final symlink: they are fine on
		// "esc" itself. Following it is not.
		{"symlink to /etc itself", "esc", []string{"ReadFile", "List"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A baseline per case, so one case's damage is reported
			// once, not again by every later case.
			writeFile(t, s, "bait.txt", []byte("bait\n"), 0o644)
			before := tree(t, s)
			outside := h.probeOutside(t, s, outsideProbes)
			for _, op := range fileOps {
				if tc.ops != nil && !slices.Contains(tc.ops, op.name) {
					continue
				}
				err := op.do(t.Context(), s, tc.path)
				wantErr(t, fmt.Sprintf("%s(%.60q)", op.name, tc.path), err, sandbox.ErrInvalid)
			}
			if diff := cmp.Diff(before, tree(t, s)); diff != "" {
				t.Errorf("workspace changed (-before +after):\n%s", diff)
			}
			if got := mustRead(t, s, "bait.txt"); got != "bait\n" {
				t.Errorf("ReadFile(bait.txt): got %q, want %q", got, "bait\n")
			}
			if diff := cmp.Diff(outside, h.probeOutside(t, s, outsideProbes)); diff != "" {
				t.Errorf("files outside the workspace changed (-before +after):\n%s", diff)
			}
		})
	}
}

// ---- Exec ----

func testExecOutput(t *testing.T, h *harness) {
	s := h.create(t, sandbox.Spec{})
	for _, tc := range []struct {
		req  sandbox.ExecRequest
		want string
	}{
		{sandbox.ExecRequest{Cmd: "echo", Args: []string{"hello"}}, "hello\n"},
		{sandbox.ExecRequest{Cmd: "echo", Args: []string{"a b", "c"}}, "a b c\n"},
		{sandbox.ExecRequest{Cmd: "printf", Args: []string{"%s-%s\\n", "x", "y z"}}, "x-y z\n"},
		{sandbox.ExecRequest{Cmd: "printf", Args: []string{"no newline"}}, "no newline"},
		{sandbox.ExecRequest{Cmd: "true"}, ""},
	} {
		got := execute(t, s, tc.req)
		want := execResult{stdout: tc.want}
		if diff := cmp.Diff(want, got, cmp.AllowUnexported(execResult{})); diff != "" {
			t.Errorf("Exec(%s) mismatch (-want +got):\n%s", describe(tc.req), diff)
		}
	}
}

func testExecStdoutStderr(t *testing.T, h *harness) {
	s := h.create(t, sandbox.Spec{})
	req := sandbox.ExecRequest{Cmd: "sh", Args: []string{"-c", "echo out; echo err >&2"}}
	got := execute(t, s, req)
	want := execResult{stdout: "out\n", stderr: "err\n"}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(execResult{})); diff != "" {
		t.Errorf("Exec(%s) mismatch (-want +got):\n%s", describe(req), diff)
	}
	// Nil writers discard.
	st, err := s.Exec(t.Context(), req)
	if err != nil || !st.Success() {
		t.Errorf("Exec(%s) with nil writers: got %+v, %v; want success", describe(req), st, err)
	}
}

func testExecShell(t *testing.T, h *harness) {
	s := h.create(t, sandbox.Spec{})
	for _, tc := range []struct {
		line           string
		stdout, stderr string
		code           int
	}{
		{"echo out; echo err >&2", "out\n", "err\n", 0},
		{"true && echo yes", "yes\n", "", 0},
		{"false && echo no", "", "", 1},
		{"echo 'single quoted;' \"double quoted\"", "single quoted; double quoted\n", "", 0},
		{"exit 4", "", "", 4},
	} {
		req := sandbox.ExecRequest{Cmd: tc.line, Shell: true}
		got := execute(t, s, req)
		want := execResult{stdout: tc.stdout, stderr: tc.stderr, status: sandbox.ExitStatus{Code: tc.code}}
		if diff := cmp.Diff(want, got, cmp.AllowUnexported(execResult{})); diff != "" {
			t.Errorf("Exec(%s) mismatch (-want +got):\n%s", describe(req), diff)
		}
	}
}

func testExecExitCode(t *testing.T, h *harness) {
	s := h.create(t, sandbox.Spec{})
	for _, tc := range []struct {
		req        sandbox.ExecRequest
		code       int
		anyFailure bool // any non-zero code will do
	}{
		{req: sandbox.ExecRequest{Cmd: "sh", Args: []string{"-c", "exit 3"}}, code: 3},
		{req: sandbox.ExecRequest{Cmd: "false"}, code: 1},
		{req: sandbox.ExecRequest{Cmd: "true"}, code: 0},
		{req: sandbox.ExecRequest{Cmd: "sh", Args: []string{"-c", "echo partial; exit 7"}}, code: 7},
		// A program the shell cannot find is the shell's failure, not
		// Exec's.
		{req: sandbox.ExecRequest{Cmd: "sh", Args: []string{"-c", "cove-suite-no-such-program"}}, anyFailure: true},
	} {
		st, err := s.Exec(t.Context(), tc.req)
		if err != nil {
			t.Errorf("Exec(%s): got error %v, want none", describe(tc.req), err)
			continue
		}
		if tc.anyFailure {
			if st.Code == 0 || st.Success() {
				t.Errorf("Exec(%s): got %+v, want a failure code", describe(tc.req), st)
			}
			continue
		}
		want := sandbox.ExitStatus{Code: tc.code}
		if diff := cmp.Diff(want, st); diff != "" {
			t.Errorf("Exec(%s) status mismatch (-want +got):\n%s", describe(tc.req), diff)
		}
		if st.Success() != (tc.code == 0) {
			t.Errorf("Exec(%s).Success(): got %v, want %v", describe(tc.req), st.Success(), tc.code == 0)
		}
	}
}

func testExecStdin(t *testing.T, h *harness) {
	s := h.create(t, sandbox.Spec{})
	in := "line one\nbin\x00ary\nno newline"
	req := sandbox.ExecRequest{Cmd: "cat", Stdin: strings.NewReader(in)}
	if got := execute(t, s, req); got.stdout != in || !got.status.Success() {
		t.Errorf("cat with Stdin: got %q, %+v; want %q, success", got.stdout, got.status, in)
	}

	// With no Stdin and no OpenStdin the process reads EOF at once.
	ctx, cancel := context.WithTimeout(t.Context(), hangBound)
	defer cancel()
	var out SyncBuffer
	st, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "cat", Stdout: &out})
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cat with nil Stdin: still running after %v, want it to read EOF", hangBound)
	}
	if err != nil || !st.Success() || out.String() != "" {
		t.Errorf("cat with nil Stdin: got %q, %+v, %v; want \"\", success", out.String(), st, err)
	}
}

func testExecLargeIO(t *testing.T, h *harness) {
	s := h.create(t, sandbox.Spec{})
	data := randomBytes(2<<20, 2)
	for _, tc := range []struct {
		name string
		req  sandbox.ExecRequest
		want []byte
	}{
		{"cat 1 MiB", sandbox.ExecRequest{Cmd: "cat", Stdin: bytes.NewReader(data[:1<<20])}, data[:1<<20]},
		// head stops reading half way: Exec must not fail because the
		// rest of Stdin had nowhere to go.
		{"head of 2 MiB", sandbox.ExecRequest{Cmd: "head", Args: []string{"-c", "1048576"}, Stdin: bytes.NewReader(data)}, data[:1<<20]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			tc.req.Stdout = &lockedWriter{w: &out}
			st, err := s.Exec(t.Context(), tc.req)
			if err != nil {
				t.Fatalf("Exec(%s): %v", describe(tc.req), err)
			}
			if !st.Success() {
				t.Errorf("Exec(%s): got status %+v, want success", describe(tc.req), st)
			}
			checkContent(t, "stdout", out.Bytes(), tc.want)
		})
	}
}

// lockedWriter serializes writes so a racy implementation shows up under
// -race as a data race on the caller's writer rather than as corruption.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func testExecEnv(t *testing.T, h *harness) {
	s := h.create(t, sandbox.Spec{Env: map[string]string{"COVE_SPEC": "from-spec", "COVE_BOTH": "spec"}})
	reqEnv := map[string]string{"COVE_REQ": "from-req", "COVE_BOTH": "req"}
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string // "" means unset: printenv fails
	}{
		{"COVE_SPEC", nil, "from-spec"},
		{"COVE_SPEC", reqEnv, "from-spec"},
		{"COVE_REQ", reqEnv, "from-req"},
		{"COVE_BOTH", reqEnv, "req"},
		{"COVE_BOTH", nil, "spec"},
		{"COVE_REQ", nil, ""},
	} {
		req := sandbox.ExecRequest{Cmd: "printenv", Args: []string{tc.name}, Env: tc.env}
		got := execute(t, s, req)
		if tc.want == "" {
			if got.status.Success() || got.stdout != "" {
				t.Errorf("Exec(%s) with Env %v: got %q, %+v; want nothing and a failure", describe(req), tc.env, got.stdout, got.status)
			}
			continue
		}
		if got.stdout != tc.want+"\n" || !got.status.Success() {
			t.Errorf("Exec(%s) with Env %v: got %q, %+v; want %q, success", describe(req), tc.env, got.stdout, got.status, tc.want+"\n")
		}
	}
}

func testExecDir(t *testing.T, h *harness) {
	ctx := t.Context()
	s := h.create(t, sandbox.Spec{})
	r := root(t, s)
	if err := s.Mkdir(ctx, "sub/deeper"); err != nil {
		t.Fatalf("Mkdir: %v", err)
	}
	writeFile(t, s, "sub/deeper/f.txt", []byte("found\n"), 0o644)
	writeFile(t, s, "plain.txt", []byte("x"), 0o644)
	for _, tc := range []struct{ dir, want string }{
		{"", r},
		{"sub", r + "/sub"},
		{r + "/sub/deeper", r + "/sub/deeper"},
		{"./sub/../sub", r + "/sub"},
	} {
		req := sandbox.ExecRequest{Cmd: "pwd", Dir: tc.dir}
		if got := execute(t, s, req); !h.samePwd(got.stdout, tc.want) {
			t.Errorf("Exec(%s): got %q, want %q", describe(req), got.stdout, tc.want+"\n")
		}
	}
	req := sandbox.ExecRequest{Cmd: "cat", Args: []string{"f.txt"}, Dir: "sub/deeper"}
	if got := execute(t, s, req); got.stdout != "found\n" {
		t.Errorf("Exec(%s): got %q, want %q", describe(req), got.stdout, "found\n")
	}
	for _, dir := range []string{"../x", "no-such-dir", "plain.txt", "a\x00b"} {
		_, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "pwd", Dir: dir})
		wantErr(t, fmt.Sprintf("Exec in Dir %q", dir), err, sandbox.ErrInvalid)
	}
}

func testExecNotFound(t *testing.T, h *harness) {
	s := h.create(t, sandbox.Spec{})
	for _, cmd := range []string{"cove-suite-no-such-program", "/cove-suite/no/such/program"} {
		_, err := s.Exec(t.Context(), sandbox.ExecRequest{Cmd: cmd})
		wantErr(t, fmt.Sprintf("Exec(%q)", cmd), err, sandbox.ErrNotFound)
	}
}

func testExecEmpty(t *testing.T, h *harness) {
	s := h.create(t, sandbox.Spec{})
	for _, req := range []sandbox.ExecRequest{
		{},
		{Args: []string{"hello"}},
		{Shell: true},
	} {
		_, err := s.Exec(t.Context(), req)
		wantErr(t, fmt.Sprintf("Exec(%s)", describe(req)), err, sandbox.ErrInvalid)
	}
}

// execAsync runs req in the background and returns its result on a channel.
type execOutcome struct {
	st  sandbox.ExitStatus
	err error
}

func execAsync(ctx context.Context, s sandbox.Session, req sandbox.ExecRequest) <-chan execOutcome {
	ch := make(chan execOutcome, 1)
	go func() {
		st, err := s.Exec(ctx, req)
		ch <- execOutcome{st, err}
	}()
	return ch
}

func awaitExec(t *testing.T, what string, ch <-chan execOutcome) execOutcome {
	t.Helper()
	select {
	case o := <-ch:
		return o
	case <-time.After(hangBound):
		t.Fatalf("%s: Exec still running %v after its context ended", what, hangBound)
		return execOutcome{}
	}
}

func testExecCancel(t *testing.T, h *harness) {
	s := h.create(t, sandbox.Spec{})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var out SyncBuffer
	req := sandbox.ExecRequest{Cmd: "sh", Args: []string{"-c", "echo ready; sleep 30"}, Stdout: &out}
	ch := execAsync(ctx, s, req)
	// Output streams while the command runs.
	waitFor(t, "Exec streaming \"ready\" before the command ends", func() bool { return out.String() == "ready\n" })
	cancel()
	o := awaitExec(t, "cancelled sleep", ch)
	wantErr(t, "Exec(sleep 30) after cancel", o.err, context.Canceled)
}

func testExecDeadline(t *testing.T, h *harness) {
	s := h.create(t, sandbox.Spec{})
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	o := awaitExec(t, "sleep past its deadline", execAsync(ctx, s, sandbox.ExecRequest{Cmd: "sleep", Args: []string{"30"}}))
	wantErr(t, "Exec(sleep 30) past its deadline", o.err, context.DeadlineExceeded)
}

func testExecCancelWhileWriting(t *testing.T, h *harness) {
	s := h.create(t, sandbox.Spec{})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var out SyncBuffer
	ch := execAsync(ctx, s, sandbox.ExecRequest{Cmd: "yes", Stdout: &out})
	waitFor(t, "yes producing output", func() bool { return out.Len() >= 64<<10 })
	cancel()
	o := awaitExec(t, "cancelled yes", ch)
	wantErr(t, "Exec(yes) after cancel", o.err, context.Canceled)
}

func testExecConcurrent(t *testing.T, h *harness) {
	s := h.create(t, sandbox.Spec{})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			var out SyncBuffer
			want := fmt.Sprintf("run %d\n", i)
			st, err := s.Exec(t.Context(), sandbox.ExecRequest{Cmd: "echo", Args: []string{"run", strconv.Itoa(i)}, Stdout: &out})
			if err != nil || !st.Success() || out.String() != want {
				t.Errorf("concurrent Exec #%d: got %q, %+v, %v; want %q, success", i, out.String(), st, err, want)
			}
		})
	}
	wg.Wait()
}

// ---- Process ----

func start(t *testing.T, s sandbox.Session, req sandbox.ExecRequest) sandbox.Process {
	t.Helper()
	p, err := s.Start(t.Context(), req)
	if err != nil {
		t.Fatalf("Start(%s): %v", describe(req), err)
	}
	return p
}

// wait waits for p with the hang bound.
func wait(t *testing.T, p sandbox.Process) sandbox.ExitStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), hangBound)
	defer cancel()
	st, err := p.Wait(ctx)
	if err != nil {
		t.Fatalf("Wait (pid %d): %v", p.PID(), err)
	}
	return st
}

// kill ends a process at the end of the test if it is still running.
func kill(t *testing.T, p sandbox.Process) {
	ctx := context.WithoutCancel(t.Context())
	t.Cleanup(func() { _ = p.Signal(ctx, sandbox.SIGKILL) })
}

func processListed(t *testing.T, s sandbox.Session, pid int) (sandbox.ProcessInfo, bool) {
	t.Helper()
	procs, err := s.Processes(t.Context())
	if err != nil {
		t.Fatalf("Processes: %v", err)
	}
	for _, pi := range procs {
		if pi.PID == pid {
			return pi, true
		}
	}
	return sandbox.ProcessInfo{}, false
}

func testProcessStdin(t *testing.T, h *harness) {
	ctx := t.Context()
	s := h.create(t, sandbox.Spec{})
	var out SyncBuffer
	p := start(t, s, sandbox.ExecRequest{Cmd: "cat", OpenStdin: true, Tag: "catter", Stdout: &out})
	kill(t, p)
	if p.PID() <= 0 {
		t.Errorf("PID(): got %d, want > 0", p.PID())
	}
	if p.Tag() != "catter" {
		t.Errorf("Tag(): got %q, want %q", p.Tag(), "catter")
	}
	for _, chunk := range []string{"hello\n", "bin\x00ary\n"} {
		if err := p.Write(ctx, []byte(chunk)); err != nil {
			t.Fatalf("Write(%q): %v", chunk, err)
		}
	}
	if err := p.CloseStdin(ctx); err != nil {
		t.Fatalf("CloseStdin: %v", err)
	}
	st := wait(t, p)
	if diff := cmp.Diff(sandbox.ExitStatus{}, st); diff != "" {
		t.Errorf("Wait status mismatch (-want +got):\n%s", diff)
	}
	if got, want := out.String(), "hello\nbin\x00ary\n"; got != want {
		t.Errorf("output: got %q, want %q", got, want)
	}
}

func testProcessStdinReader(t *testing.T, h *harness) {
	s := h.create(t, sandbox.Spec{})
	var out SyncBuffer
	in := randomBytes(64<<10, 3)
	p := start(t, s, sandbox.ExecRequest{Cmd: "cat", Stdin: bytes.NewReader(in), Stdout: &out})
	kill(t, p)
	if st := wait(t, p); !st.Success() {
		t.Errorf("Wait: got %+v, want success", st)
	}
	checkContent(t, "output of cat with a Stdin reader", []byte(out.String()), in)
}

func testProcessOutput(t *testing.T, h *harness) {
	s := h.create(t, sandbox.Spec{})
	var out, errb SyncBuffer
	p := start(t, s, sandbox.ExecRequest{Cmd: "sh", Args: []string{"-c", "echo out; echo err >&2; exit 5"}, Stdout: &out, Stderr: &errb})
	kill(t, p)
	st := wait(t, p)
	if diff := cmp.Diff(sandbox.ExitStatus{Code: 5}, st); diff != "" {
		t.Errorf("Wait status mismatch (-want +got):\n%s", diff)
	}
	// Wait returns only once the output has been delivered.
	if out.String() != "out\n" || errb.String() != "err\n" {
		t.Errorf("output after Wait: got stdout %q, stderr %q; want %q, %q", out.String(), errb.String(), "out\n", "err\n")
	}
}

func testProcessStartErrors(t *testing.T, h *harness) {
	s := h.create(t, sandbox.Spec{})
	for _, tc := range []struct {
		req  sandbox.ExecRequest
		want error
	}{
		{sandbox.ExecRequest{}, sandbox.ErrInvalid},
		{sandbox.ExecRequest{Cmd: "cove-suite-no-such-program"}, sandbox.ErrNotFound},
		{sandbox.ExecRequest{Cmd: "pwd", Dir: "../x"}, sandbox.ErrInvalid},
	} {
		p, err := s.Start(t.Context(), tc.req)
		if err == nil {
			kill(t, p)
		}
		wantErr(t, fmt.Sprintf("Start(%s)", describe(tc.req)), err, tc.want)
	}
}

func testProcesses(t *testing.T, h *harness) {
	s := h.create(t, sandbox.Spec{})
	p := start(t, s, sandbox.ExecRequest{Cmd: "sleep", Args: []string{"30"}, Tag: "sleeper"})
	kill(t, p)
	pi, ok := processListed(t, s, p.PID())
	if !ok {
		t.Fatalf("Processes: pid %d (sleep 30) not listed", p.PID())
	}
	want := sandbox.ProcessInfo{PID: p.PID(), Tag: "sleeper", Cmd: "sleep", Args: []string{"30"}}
	got := sandbox.ProcessInfo{PID: pi.PID, Tag: pi.Tag, Cmd: pi.Cmd, Args: pi.Args}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Processes entry mismatch (-want +got):\n%s", diff)
	}
	if err := p.Signal(t.Context(), sandbox.SIGTERM); err != nil {
		t.Fatalf("Signal(SIGTERM): %v", err)
	}
	st := wait(t, p)
	if diff := cmp.Diff(sandbox.ExitStatus{Code: -1, Signal: "terminated"}, st); diff != "" {
		t.Errorf("Wait after SIGTERM mismatch (-want +got):\n%s", diff)
	}
	if st.Success() {
		t.Error("Success() after SIGTERM: got true")
	}
	if pi, ok := processListed(t, s, p.PID()); ok {
		t.Errorf("Processes after the process ended: got %+v listed, want only running processes", pi)
	}
}

func testProcessSignal(t *testing.T, h *harness) {
	s := h.create(t, sandbox.Spec{})
	for _, tc := range []struct {
		sig  sandbox.Signal
		want string // "" means any non-empty name
	}{
		{sandbox.SIGKILL, "killed"},
		{sandbox.SIGTERM, "terminated"},
		{sandbox.SIGINT, ""},
	} {
		p := start(t, s, sandbox.ExecRequest{Cmd: "sleep", Args: []string{"30"}})
		kill(t, p)
		if err := p.Signal(t.Context(), tc.sig); err != nil {
			t.Fatalf("Signal(%d): %v", tc.sig, err)
		}
		st := wait(t, p)
		if st.Code != -1 || st.Signal == "" || (tc.want != "" && st.Signal != tc.want) || st.Success() {
			t.Errorf("Wait after Signal(%d): got %+v, want Code -1 and Signal %q", tc.sig, st, tc.want)
		}
	}
}

func testProcessSignalGroup(t *testing.T, h *harness) {
	s := h.create(t, sandbox.Spec{})
	var out SyncBuffer
	// If only sh got the signal, its sleep would keep the output open and
	// Wait (which waits for output) would hang for 30s.
	p := start(t, s, sandbox.ExecRequest{Cmd: "sh", Args: []string{"-c", "echo started; sleep 30; echo after"}, Stdout: &out})
	kill(t, p)
	waitFor(t, "sh printing \"started\"", func() bool { return out.String() == "started\n" })
	if err := p.Signal(t.Context(), sandbox.SIGTERM); err != nil {
		t.Fatalf("Signal(SIGTERM): %v", err)
	}
	st := wait(t, p)
	if st.Success() || st.Signal == "" {
		t.Errorf("Wait after SIGTERM to sh and its group: got %+v, want killed by a signal", st)
	}
	if got := out.String(); got != "started\n" {
		t.Errorf("output: got %q, want %q", got, "started\n")
	}
}

func testAttachByTag(t *testing.T, h *harness) {
	ctx := t.Context()
	s := h.create(t, sandbox.Spec{})
	var first, second SyncBuffer
	p := start(t, s, sandbox.ExecRequest{Cmd: "cat", OpenStdin: true, Tag: "reattach", Stdout: &first})
	kill(t, p)
	if err := p.Write(ctx, []byte("a\n")); err != nil {
		t.Fatalf("Write: %v", err)
	}
	waitFor(t, "first reader getting \"a\\n\"", func() bool { return first.String() == "a\n" })
	if err := p.Detach(); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	// Produced while no reader is attached: buffered for the next Attach.
	if err := p.Write(ctx, []byte("x\n")); err != nil {
		t.Fatalf("Write while detached: %v", err)
	}
	// Tag wins over PID when both are set.
	q, err := s.Attach(ctx, sandbox.ProcessSelector{Tag: "reattach", PID: 1 << 30}, &second, nil)
	if err != nil {
		t.Fatalf("Attach by tag: %v", err)
	}
	kill(t, q)
	if q.PID() != p.PID() || q.Tag() != "reattach" {
		t.Errorf("Attach: got pid %d tag %q, want pid %d tag %q", q.PID(), q.Tag(), p.PID(), "reattach")
	}
	if err := q.CloseStdin(ctx); err != nil {
		t.Fatalf("CloseStdin through the new handle: %v", err)
	}
	if st := wait(t, q); !st.Success() {
		t.Errorf("Wait: got %+v, want success", st)
	}
	if got := second.String(); got != "x\n" {
		t.Errorf("output to the reattached reader: got %q, want %q", got, "x\n")
	}
	if got := first.String(); got != "a\n" {
		t.Errorf("output to the detached reader: got %q, want %q", got, "a\n")
	}
}

func testAttachByPIDAfterExit(t *testing.T, h *harness) {
	ctx := t.Context()
	s := h.create(t, sandbox.Spec{})
	var first, second SyncBuffer
	p := start(t, s, sandbox.ExecRequest{Cmd: "cat", OpenStdin: true, Stdout: &first})
	kill(t, p)
	pid := p.PID()
	if err := p.Write(ctx, []byte("a\n")); err != nil {
		t.Fatalf("Write: %v", err)
	}
	waitFor(t, "first reader getting \"a\\n\"", func() bool { return first.String() == "a\n" })
	if err := p.Detach(); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	if err := p.Write(ctx, []byte("late\n")); err != nil {
		t.Fatalf("Write while detached: %v", err)
	}
	if err := p.CloseStdin(ctx); err != nil {
		t.Fatalf("CloseStdin while detached: %v", err)
	}
	waitFor(t, "cat ending after its stdin closed", func() bool {
		_, ok := processListed(t, s, pid)
		return !ok
	})
	// Recently ended: still attachable, with the output nobody read.
	q, err := s.Attach(ctx, sandbox.ProcessSelector{PID: pid}, &second, nil)
	if err != nil {
		t.Fatalf("Attach by pid to a recently ended process: %v", err)
	}
	if q.PID() != pid {
		t.Errorf("Attach: got pid %d, want %d", q.PID(), pid)
	}
	if st := wait(t, q); !st.Success() {
		t.Errorf("Wait: got %+v, want success", st)
	}
	if got := second.String(); got != "late\n" {
		t.Errorf("output to the reattached reader: got %q, want %q", got, "late\n")
	}
}

func testAttachUnknown(t *testing.T, h *harness) {
	s := h.create(t, sandbox.Spec{})
	for _, sel := range []sandbox.ProcessSelector{{Tag: "cove-suite-no-such-tag"}, {PID: 1 << 30}} {
		_, err := s.Attach(t.Context(), sel, nil, nil)
		wantErr(t, fmt.Sprintf("Attach(%+v)", sel), err, sandbox.ErrNotFound)
	}
}

func testWriteAfterExit(t *testing.T, h *harness) {
	ctx := t.Context()
	s := h.create(t, sandbox.Spec{})
	p := start(t, s, sandbox.ExecRequest{Cmd: "cat", OpenStdin: true})
	kill(t, p)
	if err := p.CloseStdin(ctx); err != nil {
		t.Fatalf("CloseStdin: %v", err)
	}
	wait(t, p)
	wantErr(t, "Write after exit", p.Write(ctx, []byte("late\n")), sandbox.ErrState)

	q := start(t, s, sandbox.ExecRequest{Cmd: "true", OpenStdin: true})
	kill(t, q)
	wait(t, q)
	wantErr(t, "Write to an exited process with open stdin", q.Write(ctx, []byte("late\n")), sandbox.ErrState)
}

func testWriteClosedStdin(t *testing.T, h *harness) {
	ctx := t.Context()
	s := h.create(t, sandbox.Spec{})
	p := start(t, s, sandbox.ExecRequest{Cmd: "sleep", Args: []string{"30"}, OpenStdin: true})
	kill(t, p)
	if err := p.CloseStdin(ctx); err != nil {
		t.Fatalf("CloseStdin: %v", err)
	}
	wantErr(t, "Write after CloseStdin", p.Write(ctx, []byte("x")), sandbox.ErrState)

	q := start(t, s, sandbox.ExecRequest{Cmd: "sleep", Args: []string{"30"}})
	kill(t, q)
	wantErr(t, "Write without OpenStdin", q.Write(ctx, []byte("x")), sandbox.ErrState)
}

func testDuplicateTag(t *testing.T, h *harness) {
	s := h.create(t, sandbox.Spec{})
	p := start(t, s, sandbox.ExecRequest{Cmd: "sleep", Args: []string{"30"}, Tag: "dup"})
	kill(t, p)
	q, err := s.Start(t.Context(), sandbox.ExecRequest{Cmd: "sleep", Args: []string{"30"}, Tag: "dup"})
	if err == nil {
		kill(t, q)
	}
	wantErr(t, "Start with a running process's tag", err, sandbox.ErrExist)
}

func testOutlivesContext(t *testing.T, h *harness) {
	s := h.create(t, sandbox.Spec{})
	var out SyncBuffer
	sctx, cancel := context.WithCancel(t.Context())
	p, err := s.Start(sctx, sandbox.ExecRequest{Cmd: "cat", OpenStdin: true, Stdout: &out})
	cancel()
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	kill(t, p)
	if err := p.Write(t.Context(), []byte("still here\n")); err != nil {
		t.Fatalf("Write after Start's context ended: %v", err)
	}
	if err := p.CloseStdin(t.Context()); err != nil {
		t.Fatalf("CloseStdin: %v", err)
	}
	if st := wait(t, p); !st.Success() {
		t.Errorf("Wait: got %+v, want success", st)
	}
	if got := out.String(); got != "still here\n" {
		t.Errorf("output: got %q, want %q", got, "still here\n")
	}
}

func testWaitContext(t *testing.T, h *harness) {
	s := h.create(t, sandbox.Spec{})
	p := start(t, s, sandbox.ExecRequest{Cmd: "sleep", Args: []string{"30"}})
	kill(t, p)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := p.Wait(ctx)
		done <- err
	}()
	select {
	case err := <-done:
		wantErr(t, "Wait past its deadline", err, context.DeadlineExceeded)
	case <-time.After(hangBound):
		t.Fatalf("Wait still blocked %v after its context ended", hangBound)
	}
	if _, ok := processListed(t, s, p.PID()); !ok {
		t.Errorf("Processes after Wait's context ended: pid %d not listed, want it still running", p.PID())
	}
	if err := p.Signal(t.Context(), sandbox.SIGKILL); err != nil {
		t.Fatalf("Signal(SIGKILL): %v", err)
	}
	if st := wait(t, p); st.Signal != "killed" {
		t.Errorf("Wait after SIGKILL: got %+v, want Signal %q", st, "killed")
	}
}

func testResizeWithoutPTY(t *testing.T, h *harness) {
	s := h.create(t, sandbox.Spec{})
	p := start(t, s, sandbox.ExecRequest{Cmd: "cat", OpenStdin: true})
	kill(t, p)
	wantErr(t, "Resize without a PTY", p.Resize(t.Context(), sandbox.PTYSize{Cols: 80, Rows: 24}), sandbox.ErrInvalid)
	if err := p.CloseStdin(t.Context()); err != nil {
		t.Fatalf("CloseStdin: %v", err)
	}
	wait(t, p)
}

// ---- Snapshot ----

// tarMember is one member of a tar stream the suite builds.
type tarMember struct {
	hdr  tar.Header
	body string
}

func makeTar(t *testing.T, members ...tarMember) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, m := range members {
		hdr := m.hdr
		if hdr.Typeflag == tar.TypeReg {
			hdr.Size = int64(len(m.body))
		}
		if hdr.Mode == 0 {
			hdr.Mode = 0o644
		}
		if err := tw.WriteHeader(&hdr); err != nil {
			t.Fatalf("tar header %q: %v", hdr.Name, err)
		}
		if _, err := io.WriteString(tw, m.body); err != nil {
			t.Fatalf("tar body %q: %v", hdr.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatalf("closing tar: %v", err)
	}
	return buf.Bytes()
}

func testSnapshotRoundTrip(t *testing.T, h *harness) {
	ctx := t.Context()
	src := h.create(t, sandbox.Spec{})
	files := map[string][]byte{
		"a.txt":         []byte("alpha\n"),
		"dir/b.bin":     randomBytes(256<<10, 4),
		"dir/sub/c.txt": []byte("gamma\n"),
		"run.sh":        []byte("#!/bin/sh\necho run\n"),
		"zero.txt":      nil,
	}
	perms := map[string]uint32{"dir/b.bin": 0o600, "run.sh": 0o755}
	for p, b := range files {
		perm := perms[p]
		if perm == 0 {
			perm = 0o644
		}
		writeFile(t, src, p, b, perm)
	}
	if err := src.Mkdir(ctx, "empty/inner"); err != nil {
		t.Fatalf("Mkdir: %v", err)
	}
	h.symlink(t, src, "a.txt", "link")
	h.symlink(t, src, "../a.txt", "dir/up")

	var buf bytes.Buffer
	if err := src.SnapshotWorkspace(ctx, &buf); err != nil {
		t.Fatalf("SnapshotWorkspace: %v", err)
	}

	// The stream's members are relative to the workspace root.
	names := map[string]byte{}
	links := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(buf.Bytes()))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("reading the snapshot as tar: %v", err)
		}
		if strings.HasPrefix(hdr.Name, "/") || slices.Contains(strings.Split(hdr.Name, "/"), "..") {
			t.Errorf("snapshot member %q: want a relative name without \"..\"", hdr.Name)
		}
		name := strings.TrimSuffix(strings.TrimPrefix(hdr.Name, "./"), "/")
		if name == "" || name == "." {
			continue
		}
		names[name] = hdr.Typeflag
		if hdr.Typeflag == tar.TypeSymlink {
			links[name] = hdr.Linkname
		}
	}
	for _, want := range []struct {
		name string
		typ  byte
	}{
		{"a.txt", tar.TypeReg}, {"dir", tar.TypeDir}, {"dir/b.bin", tar.TypeReg},
		{"dir/sub", tar.TypeDir}, {"dir/sub/c.txt", tar.TypeReg}, {"run.sh", tar.TypeReg},
		{"zero.txt", tar.TypeReg}, {"empty", tar.TypeDir}, {"empty/inner", tar.TypeDir},
		{"link", tar.TypeSymlink}, {"dir/up", tar.TypeSymlink},
	} {
		got, ok := names[want.name]
		if !ok {
			t.Errorf("snapshot: member %q missing (members: %v)", want.name, names)
		} else if got != want.typ {
			t.Errorf("snapshot member %q: got type %q, want %q", want.name, got, want.typ)
		}
	}
	if diff := cmp.Diff(map[string]string{"link": "a.txt", "dir/up": "../a.txt"}, links); diff != "" {
		t.Errorf("snapshot symlink targets mismatch (-want +got):\n%s", diff)
	}

	dst := h.create(t, sandbox.Spec{})
	if err := dst.RestoreWorkspace(ctx, bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatalf("RestoreWorkspace: %v", err)
	}
	if diff := cmp.Diff(tree(t, src), tree(t, dst)); diff != "" {
		t.Errorf("restored workspace mismatch (-snapshotted +restored):\n%s", diff)
	}
	for p, want := range files {
		got, err := readFile(ctx, dst, p)
		if err != nil {
			t.Errorf("ReadFile(%q) after restore: %v", p, err)
			continue
		}
		checkContent(t, "restored "+p, got, want)
	}
	if got := mustRead(t, dst, "dir/up"); got != "alpha\n" {
		t.Errorf("ReadFile(dir/up) through a restored link: got %q, want %q", got, "alpha\n")
	}
	if h.programs() {
		if got := mustRun(t, dst, "cat", "link"); got != "alpha\n" {
			t.Errorf("cat link after restore: got %q, want %q", got, "alpha\n")
		}
	}
}

func testRestoreNames(t *testing.T, h *harness) {
	s := h.create(t, sandbox.Spec{})
	data := makeTar(t,
		tarMember{hdr: tar.Header{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755}},
		tarMember{hdr: tar.Header{Name: "./dot.txt", Typeflag: tar.TypeReg}, body: "dot\n"},
		tarMember{hdr: tar.Header{Name: "sub/", Typeflag: tar.TypeDir, Mode: 0o755}},
		tarMember{hdr: tar.Header{Name: "sub/f.txt", Typeflag: tar.TypeReg, Mode: 0o600}, body: "f\n"},
		// No directory member for its parent.
		tarMember{hdr: tar.Header{Name: "implied/deep/g.txt", Typeflag: tar.TypeReg}, body: "g\n"},
	)
	if err := s.RestoreWorkspace(t.Context(), bytes.NewReader(data)); err != nil {
		t.Fatalf("RestoreWorkspace: %v", err)
	}
	for p, want := range map[string]string{"dot.txt": "dot\n", "sub/f.txt": "f\n", "implied/deep/g.txt": "g\n"} {
		if got := mustRead(t, s, p); got != want {
			t.Errorf("ReadFile(%q) after restore: got %q, want %q", p, got, want)
		}
	}
	if fi, err := s.Stat(t.Context(), "sub/f.txt"); err != nil || fi.Mode&0o777 != 0o600 {
		t.Errorf("Stat(sub/f.txt) after restore: got mode %o, %v; want mode 600", fi.Mode&0o777, err)
	}
}

func testRestoreHostile(t *testing.T, h *harness) {
	s := h.create(t, sandbox.Spec{})
	writeFile(t, s, "bait.txt", []byte("bait\n"), 0o644)
	h.symlink(t, s, "/etc", "esc")
	for _, tc := range []struct {
		name   string
		member tarMember
	}{
		{"absolute name", tarMember{hdr: tar.Header{Name: "/x", Typeflag: tar.TypeReg}, body: "pwned\n"}},
		{"absolute name in /etc", tarMember{hdr: tar.Header{Name: "/etc/x", Typeflag: tar.TypeReg}, body: "pwned\n"}},
		{"dotdot", tarMember{hdr: tar.Header{Name: "../x", Typeflag: tar.TypeReg}, body: "pwned\n"}},
		{"nested dotdot", tarMember{hdr: tar.Header{Name: "a/../../x", Typeflag: tar.TypeReg}, body: "pwned\n"}},
		{"char device", tarMember{hdr: tar.Header{Name: "devnull", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}}},
		{"block device", tarMember{hdr: tar.Header{Name: "devsda", Typeflag: tar.TypeBlock, Devmajor: 8, Devminor: 0}}},
		{"symlink to /etc", tarMember{hdr: tar.Header{Name: "etclink", Typeflag: tar.TypeSymlink, Linkname: "/etc"}}},
		{"symlink to the parent", tarMember{hdr: tar.Header{Name: "uplink", Typeflag: tar.TypeSymlink, Linkname: ".."}}},
		{"nested symlink climbing out", tarMember{hdr: tar.Header{Name: "d/uplink", Typeflag: tar.TypeSymlink, Linkname: "../../etc"}}},
		{"hardlink to ../x", tarMember{hdr: tar.Header{Name: "hardlink", Typeflag: tar.TypeLink, Linkname: "../x"}}},
		{"hardlink to /etc/passwd", tarMember{hdr: tar.Header{Name: "hardpasswd", Typeflag: tar.TypeLink, Linkname: "/etc/passwd"}}},
		{"through a symlink to /etc", tarMember{hdr: tar.Header{Name: "esc/x", Typeflag: tar.TypeReg}, body: "pwned\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tree(t, s)
			outside := h.probeOutside(t, s, outsideProbes)
			data := makeTar(t, tc.member)
			err := s.RestoreWorkspace(t.Context(), bytes.NewReader(data))
			wantErr(t, fmt.Sprintf("RestoreWorkspace of member %q", tc.member.hdr.Name), err, sandbox.ErrInvalid)
			if err != nil && !strings.Contains(err.Error(), tc.member.hdr.Name) {
				t.Errorf("RestoreWorkspace error %q does not name the member %q", err, tc.member.hdr.Name)
			}
			if diff := cmp.Diff(before, tree(t, s)); diff != "" {
				t.Errorf("workspace changed (-before +after):\n%s", diff)
			}
			if diff := cmp.Diff(outside, h.probeOutside(t, s, outsideProbes)); diff != "" {
				t.Errorf("files outside the workspace changed (-before +after):\n%s", diff)
			}
		})
	}
}

// ---- Port ----

func testDialUnavailable(t *testing.T, h *harness) {
	s := h.create(t, sandbox.Spec{})
	ctx, cancel := context.WithTimeout(t.Context(), hangBound)
	defer cancel()
	conn, err := s.DialPort(ctx, 1)
	if err == nil {
		conn.Close()
	}
	wantErr(t, "DialPort(1) with nothing listening", err, sandbox.ErrUnavailable)
}

func testDialEcho(t *testing.T, h *harness) {
	if h.opts.Listen == nil {
		t.Skip("Options.Listen is nil: no portable way to listen inside the sandbox")
	}
	const port = 7357
	s := h.create(t, sandbox.Spec{})
	stop := h.opts.Listen(t, s, port)
	defer stop()
	ctx, cancel := context.WithTimeout(t.Context(), hangBound)
	defer cancel()
	conn, err := s.DialPort(ctx, port)
	if err != nil {
		t.Fatalf("DialPort(%d): %v", port, err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(hangBound)); err != nil {
		t.Fatalf("SetDeadline: %v", err)
	}
	if _, err := io.WriteString(conn, "ping\n"); err != nil {
		t.Fatalf("writing to the port: %v", err)
	}
	got := make([]byte, 5)
	if _, err := io.ReadFull(conn, got); err != nil {
		t.Fatalf("reading the echo: %v", err)
	}
	if string(got) != "ping\n" {
		t.Errorf("echo: got %q, want %q", got, "ping\n")
	}
}
