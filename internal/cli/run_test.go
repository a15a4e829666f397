package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/agent"
	"github.com/cove-sandbox/cove/agent/model/fake"
	"github.com/cove-sandbox/cove/internal/app/runtimes"
	"github.com/cove-sandbox/cove/internal/cli/clibase"
	"github.com/creack/pty"
)

// With COVE_TEST_CLI=1 the test binary is cove itself, so a test can run
// a second cove process, as a user resuming a saved run does. (The hidden
// roles the runtime re-executes are left to TestMain.)
func init() {
	if os.Getenv("COVE_TEST_CLI") != "1" || len(os.Args) < 2 || isHiddenRole(os.Args[1]) {
		return
	}
	// As cmd/cove/main.go does.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if clibase.Reportable(err) {
		fmt.Fprintln(os.Stderr, "cove:", err)
	}
	os.Exit(clibase.ExitCode(err))
}

func isHiddenRole(arg string) bool {
	return arg == "guest" || arg == "local-shim" || arg == "local-init"
}

// coveProcess runs cove in a new process and returns its output and exit
// code.
func coveProcess(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, args...)
	// A race-enabled process sleeps a second at exit for late reports;
	// these need not.
	gorace := strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
	cmd.Env = append(os.Environ(), "COVE_TEST_CLI=1", "GORACE="+gorace)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("cove %s: %v", strings.Join(args, " "), err)
	}
	return o.String(), e.String(), cmd.ProcessState.ExitCode()
}

// runHome makes a Cove state directory for one test; the sandboxes left
// in it are deleted at the end.
func runHome(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the local runtime needs root (CI runs as root)")
	}
	home, err := os.MkdirTemp("", "cr") // short: unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, id := range sandboxesIn(t, home) {
			run(t, "sandbox", "rm", "-f", "--state-dir", home, id)
		}
		os.RemoveAll(home)
	})
	return home
}

// runEnv is runHome made COVE_HOME, with a dummy API key and none of the
// user's model or Cove server settings, for this test and the cove
// processes it starts.
func runEnv(t *testing.T) string {
	t.Helper()
	home := runHome(t)
	t.Setenv("COVE_HOME", home)
	t.Setenv("COVE_SERVER", "")
	t.Setenv("COVE_API_KEY", "")
	t.Setenv("OPENAI_API_KEY", "test-key")
	t.Setenv("OPENAI_BASE_URL", "")
	t.Setenv("COVE_MODEL", "")
	return home
}

// sandboxesIn lists the sandboxes of a state directory.
func sandboxesIn(t *testing.T, home string) []string {
	t.Helper()
	rt, err := runtimes.Local(home)
	if err != nil {
		t.Fatal(err)
	}
	infos, err := rt.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, in := range infos {
		ids = append(ids, in.ID)
	}
	return ids
}

// newWorkspace is a host directory for a run to work on.
func newWorkspace(t *testing.T) string {
	t.Helper()
	ws := t.TempDir()
	for name, content := range map[string]string{
		"notes.txt":  "one\ntwo\n",
		"old.txt":    "bye\n",
		"scratch/xy": "scratch\n",
	} {
		os.MkdirAll(filepath.Dir(filepath.Join(ws, name)), 0o755)
		if err := os.WriteFile(filepath.Join(ws, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return ws
}

const editPatch = `*** Begin Patch
*** Update File: notes.txt
@@
 one
-two
+three
*** Delete File: old.txt
*** End Patch`

// editScript looks at the workspace, edits a file, deletes another and
// answers.
func editScript() []fake.Turn {
	return []fake.Turn{
		fake.Call("exec_command", `{"cmd":"ls"}`),
		fake.Call("exec_command", `{"cmd":"cat notes.txt"}`),
		fake.Custom("apply_patch", editPatch),
		fake.Text("Changed two to three and removed old.txt."),
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestRunShowsEachStep(t *testing.T) {
	runEnv(t)
	ws := newWorkspace(t)
	srv := fake.NewServer(t, editScript()...)
	out, errOut, err := run(t, "run", "--base-url", srv.URL, "--workspace", ws, "fix the notes")
	if err != nil {
		t.Fatalf("cove run: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	// The steps, in order.
	steps := []string{
		"$ ls\n", "notes.txt\nold.txt\nscratch\n", "exit 0",
		"$ cat notes.txt\n", "one\ntwo\n", "exit 0",
		"✎ updated notes.txt\n", "-two\n", "+three\n",
		"✎ deleted old.txt\n",
		"» Changed two to three and removed old.txt.\n",
		"· 4 model calls · tokens in ",
	}
	rest := out
	for _, s := range steps {
		i := strings.Index(rest, s)
		if i < 0 {
			t.Fatalf("stdout lacks %q after the steps before it:\n%s", s, out)
		}
		rest = rest[i+len(s):]
	}
	if !strings.Contains(out, "≈ $") {
		t.Errorf("stdout lacks the cost of a model in the price table:\n%s", out)
	}

	// Without --out the changes are printed as a patch of the workspace,
	// which applies to the original directory.
	i := strings.Index(out, "\ndiff ")
	if i < 0 {
		t.Fatalf("no patch printed:\n%s", out)
	}
	patch := out[i+1:]
	for _, s := range []string{"--- a/notes.txt", "+++ b/notes.txt", "-two\n+three\n", "--- a/old.txt", "-bye\n"} {
		if !strings.Contains(patch, s) {
			t.Errorf("patch lacks %q:\n%s", s, patch)
		}
	}
	if readFile(t, ws+"/notes.txt") != "one\ntwo\n" {
		t.Errorf("without --out the workspace directory changed")
	}
	if _, err := exec.LookPath("patch"); err == nil {
		cp := exec.Command("patch", "-p1", "--batch", "--quiet")
		cp.Dir, cp.Stdin = ws, strings.NewReader(patch)
		if b, err := cp.CombinedOutput(); err != nil {
			t.Errorf("patch -p1 does not apply the printed patch: %v\n%s", err, b)
		} else if got := readFile(t, ws+"/notes.txt"); got != "one\nthree\n" {
			t.Errorf("notes.txt after patch -p1 = %q", got)
		}
	}
	if left := sandboxesIn(t, os.Getenv("COVE_HOME")); len(left) > 0 {
		t.Errorf("sandboxes left after the run: %v", left)
	}
}

// jsonEvents parses --json output: every line must be a JSON object.
func jsonEvents(t *testing.T, out string) []agent.Event {
	t.Helper()
	var evs []agent.Event
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		var e agent.Event
		if err := json.Unmarshal([]byte(line), &e); err != nil || e.Type == "" {
			t.Fatalf("stdout line is not a JSON event (%v): %q\nstdout:\n%s", err, line, out)
		}
		evs = append(evs, e)
	}
	return evs
}

// output is what the command of a call printed, from its output events.
func output(evs []agent.Event, callID string) string {
	var b strings.Builder
	for _, e := range evs {
		if e.Type == agent.EventOutput && e.CallID == callID {
			b.WriteString(e.Data)
		}
	}
	return b.String()
}

// notes are the texts of the CLI's own lines in --json output.
func notes(evs []agent.Event) string {
	var b strings.Builder
	for _, e := range evs {
		if e.Type == "note" {
			b.WriteString(e.Text + "\n")
		}
	}
	return b.String()
}

// TestRunJSON: --json prints the run as JSON events, and --out (here the
// workspace itself) receives the final workspace.
func TestRunJSON(t *testing.T) {
	runEnv(t)
	ws := newWorkspace(t)
	os.Chmod(ws, 0o755)
	srv := fake.NewServer(t, editScript()...)
	out, errOut, err := run(t, "run", "--json", "--out", ws, "--base-url", srv.URL, "--workspace", ws, "fix the notes")
	if err != nil {
		t.Fatalf("cove run --json: %v\n%s", err, errOut)
	}
	evs := jsonEvents(t, out)
	if evs[0].Type != agent.EventRunStarted || evs[len(evs)-1].Type != "note" {
		t.Errorf("events run from %s to %s, want run_started to the note of --out", evs[0].Type, evs[len(evs)-1].Type)
	}
	want := []agent.EventType{agent.EventRunStarted, agent.EventToolCallStarted, agent.EventOutput, agent.EventToolCallFinished,
		agent.EventFileChanged, agent.EventMessage, agent.EventRunFinished}
	w := 0
	for _, e := range evs {
		if w < len(want) && e.Type == want[w] {
			w++
		}
	}
	if w < len(want) {
		var got []agent.EventType
		for _, e := range evs {
			got = append(got, e.Type)
		}
		t.Errorf("event types %v lack %v in order", got, want[w:])
	}
	if got := output(evs, "call_2"); got != "one\ntwo\n" {
		t.Errorf("output events of cat notes.txt carry %q", got)
	}
	for _, e := range evs {
		if e.Type == agent.EventRunFinished && (e.Usage == nil || e.Usage.Requests != 4 || e.Output != "Changed two to three and removed old.txt.") {
			t.Errorf("run_finished = %+v, want 4 requests and the final answer", e)
		}
	}

	if got := readFile(t, ws+"/notes.txt"); got != "one\nthree\n" {
		t.Errorf("notes.txt in --out = %q, want the agent's edit", got)
	}
	if _, err := os.Stat(ws + "/old.txt"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("old.txt, deleted by the agent, is still in --out: %v", err)
	}
	if got := readFile(t, ws+"/scratch/xy"); got != "scratch\n" {
		t.Errorf("an untouched file in --out = %q", got)
	}
	if fi, err := os.Stat(ws); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("--out directory mode = %v (%v), want it kept at 0755", fi.Mode(), err)
	}
}

// TestRunResume: a run that cannot ask saves its state and exits 3; a
// second cove process decides the calls and finishes the run in the same
// sandbox, or in one recreated from the saved workspace if it was deleted.
func TestRunResume(t *testing.T) {
	t.Run("approve", func(t *testing.T) {
		home := runEnv(t)
		ws := newWorkspace(t)
		state := filepath.Join(t.TempDir(), "state.json")
		srv := fake.NewServer(t,
			// /tmp/marker is outside the workspace: only the same
			// sandbox has it after a resume.
			fake.Call("exec_command", `{"cmd":"echo kept > /tmp/marker; echo new > made.txt"}`),
			fake.Call("exec_command", `{"cmd":"cat made.txt /tmp/marker"}`),
			fake.Text("done"),
		)
		out, errOut, err := run(t, "run", "--json", "--approve", "all", "--state", state, "--base-url", srv.URL, "--workspace", ws, "make a file")
		if clibase.ExitCode(err) != 3 {
			t.Fatalf("a run waiting for approval without a terminal: exit %d (%v), want 3\n%s\n%s", clibase.ExitCode(err), err, out, errOut)
		}
		id := savedSandbox(t, state)
		if left := sandboxesIn(t, home); !slices.Equal(left, []string{id}) {
			t.Fatalf("sandboxes while waiting = %v, want the saved one %s running", left, id)
		}
		if evs := jsonEvents(t, out); !strings.Contains(notes(evs), id) {
			t.Errorf("the notes do not name the sandbox %s:\n%s", id, out)
		}

		// The resumed run asks again for its next call, and saves its
		// state to the same file.
		out, errOut, code := coveProcess(t, "run", "--resume", state, "--approve-call", "all", "--json")
		if code != 3 {
			t.Fatalf("first resume: exit %d, want 3 (the next call waits too)\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
		}
		if got := savedSandbox(t, state); got != id {
			t.Errorf("the resumed run saved sandbox %s, want %s reattached", got, id)
		}
		out, errOut, code = coveProcess(t, "run", "--resume", state, "--approve-call", "call_2", "--json")
		if code != 0 {
			t.Fatalf("second resume: exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
		}
		evs := jsonEvents(t, out)
		if !strings.Contains(notes(evs), "resuming in sandbox "+id) {
			t.Errorf("the resumed run does not say it reattached %s:\n%s", id, out)
		}
		if got := output(evs, "call_2"); got != "new\nkept\n" {
			t.Errorf("the approved command printed %q, want the file and the marker of the same sandbox", got)
		}
		if got := evs[len(evs)-1]; got.Type != agent.EventRunFinished || got.Output != "done" {
			t.Errorf("last event %+v, want run_finished with the answer", got)
		}
		if _, err := os.Stat(state); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the state file of a finished run is still there: %v", err)
		}
		if left := sandboxesIn(t, home); len(left) > 0 {
			t.Errorf("sandboxes left after the run: %v", left)
		}
	})

	t.Run("reject", func(t *testing.T) {
		runEnv(t)
		ws := newWorkspace(t)
		state := filepath.Join(t.TempDir(), "state.json")
		srv := fake.NewServer(t,
			fake.Call("exec_command", `{"cmd":"rm notes.txt"}`),
			fake.Text("ok, I left it"),
		)
		out, _, err := run(t, "run", "--approve", "all", "--state", state, "--base-url", srv.URL, "--workspace", ws, "remove the notes")
		if clibase.ExitCode(err) != 3 || clibase.Reportable(err) {
			t.Fatalf("exit %d (%v), want 3", clibase.ExitCode(err), err)
		}
		// The user sees what waits, its id and how to go on.
		for _, s := range []string{"? call_1 needs your approval", ": $ rm notes.txt\n", "cove run --resume " + state} {
			if !strings.Contains(out, s) {
				t.Errorf("stdout of a run waiting for approval lacks %q:\n%s", s, out)
			}
		}
		out, errOut, code := coveProcess(t, "run", "--resume", state, "--reject-call", "all")
		if code != 0 {
			t.Fatalf("resume: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
		}
		reqs := srv.Requests()
		got, ok := reqs[len(reqs)-1].ToolOutput("call_1")
		if !ok || !strings.Contains(got, "rejected") {
			t.Errorf("the model got %q (%v) for the rejected call, want the rejection", got, ok)
		}
		if !strings.Contains(out, "✗ rejected: $ rm notes.txt\n") || !strings.Contains(out, "no files changed") {
			t.Errorf("stdout after a rejected rm:\n%s\nwant the rejection shown and no changes", out)
		}
	})

	t.Run("recreated", func(t *testing.T) {
		home := runEnv(t)
		ws := newWorkspace(t)
		state := filepath.Join(t.TempDir(), "state.json")
		srv := fake.NewServer(t,
			fake.Call("exec_command", `{"cmd":"echo kept > /tmp/marker; echo new > made.txt"}`),
			fake.Call("exec_command", `{"cmd":"rm -r scratch; cat made.txt; cat /tmp/marker"}`),
			fake.Text("done"),
		)
		_, _, err := run(t, "run", "--json", "--state", state, "--base-url", srv.URL, "--workspace", ws, "tidy up")
		if clibase.ExitCode(err) != 3 {
			t.Fatalf("exit %d (%v), want 3: rm -r waits for approval", clibase.ExitCode(err), err)
		}
		id := savedSandbox(t, state)
		if _, errOut, err := run(t, "sandbox", "rm", "-f", id); err != nil {
			t.Fatalf("sandbox rm: %v %s", err, errOut)
		}
		out, errOut, code := coveProcess(t, "run", "--resume", state, "--approve-call", "all")
		if code != 0 {
			t.Fatalf("resume: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
		}
		if !strings.Contains(out, "sandbox "+id+" is gone; recreating it") {
			t.Errorf("the resumed run does not say it recreated %s:\n%s", id, out)
		}
		if !strings.Contains(out, "new\n") || strings.Contains(out, "kept\n") {
			t.Errorf("the approved command, in a sandbox recreated from the snapshot, should see made.txt and not /tmp/marker:\n%s", out)
		}
		for _, s := range []string{"+++ b/made.txt", "+new", "--- a/scratch/xy"} {
			if !strings.Contains(out, s) {
				t.Errorf("the patch after the resume lacks %q:\n%s", s, out)
			}
		}
		if left := sandboxesIn(t, home); len(left) > 0 {
			t.Errorf("sandboxes left after the run: %v", left)
		}
	})
}

// savedSandbox is the id of the sandbox in a saved run state.
func savedSandbox(t *testing.T, path string) string {
	t.Helper()
	st, err := agent.ParseRunState([]byte(readFile(t, path)))
	if err != nil {
		t.Fatal(err)
	}
	if st.Sandbox == nil || st.Sandbox.ID == "" {
		t.Fatalf("the saved state names no sandbox")
	}
	return st.Sandbox.ID
}

func TestRunErrors(t *testing.T) {
	runEnv(t)
	ws := newWorkspace(t)
	t.Run("no key", func(t *testing.T) {
		t.Setenv("OPENAI_API_KEY", "")
		_, _, err := run(t, "run", "--workspace", ws, "task")
		if clibase.ExitCode(err) != 1 || !strings.HasPrefix(err.Error(), "OPENAI_API_KEY is not set: ") || strings.Contains(err.Error(), "\n") {
			t.Errorf("without a key: exit %d, %q; want 1 and one line that starts with OPENAI_API_KEY is not set", clibase.ExitCode(err), err)
		}
	})
	for _, tt := range []struct {
		name string
		args []string
	}{
		{"no task", []string{"run", "--workspace", ws}},
		{"blank task", []string{"run", "--workspace", ws, "  "}},
		{"bad approve", []string{"run", "--approve", "sometimes", "task"}},
		{"approve-call without resume", []string{"run", "--approve-call", "all", "task"}},
		{"resume with a task", []string{"run", "--resume", "state.json", "another task"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, errOut, err := run(t, tt.args...)
			if !errors.Is(err, clibase.ErrUsage) || clibase.ExitCode(err) != 2 || !strings.Contains(errOut, "Usage: cove run") {
				t.Errorf("exit %d (%v), stderr:\n%s\nwant 2 and the usage", clibase.ExitCode(err), err, errOut)
			}
		})
	}
}

// TestRunUnreachable: a model server that is not there fails the run
// with a line that says so, and the sandbox made for it goes. (Parallel:
// the failing calls are retried with backoff first.)
func TestRunUnreachable(t *testing.T) {
	t.Parallel()
	home := runHome(t)
	ws := newWorkspace(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String() + "/v1"
	l.Close()
	out, _, err := run(t, "run", "--state-dir", home, "--base-url", url, "--workspace", ws, "task")
	if clibase.ExitCode(err) != 1 || !clibase.Reportable(err) || !strings.Contains(err.Error(), "cannot reach the model at "+url) || strings.Contains(err.Error(), "\n") {
		t.Errorf("a closed port: exit %d, %v; want 1 and one line: cannot reach the model at %s", clibase.ExitCode(err), err, url)
	}
	if !strings.Contains(out, "✗ run failed") || strings.Contains(out, "model calls") {
		t.Errorf("stdout:\n%s\nwant the failure and no token line (no call got through)", out)
	}
	if left := sandboxesIn(t, home); len(left) > 0 {
		t.Errorf("sandboxes left after the failed run: %v", left)
	}
}

// lineWriter collects output and tells when want appears in it.
type lineWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
}

func newLineWriter(want string) *lineWriter {
	return &lineWriter{want: want, seen: make(chan struct{})}
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if w.want != "" && strings.Contains(w.buf.String(), w.want) {
		close(w.seen)
		w.want = ""
	}
	return len(p), nil
}

func (w *lineWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// startRun runs cove in the background with ctx and waits until its
// stdout shows want.
func startRun(t *testing.T, ctx context.Context, want string, args ...string) (stdout *lineWriter, done <-chan error) {
	t.Helper()
	stdout = newLineWriter(want)
	ch := make(chan error, 1)
	go func() { ch <- Run(ctx, args, stdout, io.Discard) }()
	select {
	case <-stdout.seen:
	case err := <-ch:
		t.Fatalf("the run ended (%v) before printing %q:\n%s", err, want, stdout)
	case <-time.After(10 * time.Second):
		t.Fatalf("the run did not print %q:\n%s", want, stdout)
	}
	return stdout, ch
}

// wait is the error of a run that must end within a few seconds.
func wait(t *testing.T, done <-chan error, stdout *lineWriter) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(5 * time.Second):
		t.Fatalf("Run did not return:\n%s", stdout)
	}
	return nil
}

// TestRunInterrupt: Ctrl-C (the ctx main passes) while a command runs
// stops the run at once and deletes its sandbox.
func TestRunInterrupt(t *testing.T) {
	t.Parallel()
	home := runHome(t)
	ws := newWorkspace(t)
	srv := fake.NewServer(t, fake.Call("exec_command", `{"cmd":"echo started; sleep 30","yield_time_ms":30000}`))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stdout, done := startRun(t, ctx, "started\n", "run", "--state-dir", home, "--base-url", srv.URL, "--workspace", ws, "wait")
	cancel()
	err := wait(t, done, stdout)
	if clibase.ExitCode(err) != 130 || clibase.Reportable(err) {
		t.Errorf("an interrupted run: exit %d (%v), want 130 and nothing more to print", clibase.ExitCode(err), err)
	}
	if out := stdout.String(); !strings.Contains(out, "stopped; the sandbox was torn down") || strings.Contains(out, "run failed") {
		t.Errorf("stdout:\n%s\nwant the stop noted, not a failure", out)
	}
	if left := sandboxesIn(t, home); len(left) > 0 {
		t.Errorf("sandboxes left after Ctrl-C: %v", left)
	}
}

// TestRunAsks: at a terminal the run asks y/N for each call that needs
// approval; Ctrl-C at the question stops the run and deletes the sandbox
// it kept for the answer.
func TestRunAsks(t *testing.T) {
	home := runEnv(t)
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pty here: %v", err)
	}
	defer ptmx.Close()
	defer tty.Close()
	prev := Stdin
	Stdin = tty
	t.Cleanup(func() { Stdin = prev })
	const question = "? approve $ rm -r scratch (deletes recursively)? [y/N] "
	asked := "[y/N] "

	t.Run("yes", func(t *testing.T) {
		ws := newWorkspace(t)
		srv := fake.NewServer(t, fake.Call("exec_command", `{"cmd":"rm -r scratch"}`), fake.Text("removed"))
		stdout, done := startRun(t, t.Context(), asked, "run", "--base-url", srv.URL, "--workspace", ws, "tidy")
		io.WriteString(ptmx, "y\n")
		if err := wait(t, done, stdout); err != nil {
			t.Fatalf("cove run: %v\n%s", err, stdout)
		}
		if out := stdout.String(); !strings.Contains(out, question) {
			t.Errorf("stdout:\n%s\nwant the question %q", out, question)
		}
		if out := stdout.String(); !strings.Contains(out, "$ rm -r scratch\n✎ deleted scratch/xy\n  ✓ exit 0") || !strings.Contains(out, "--- a/scratch/xy") {
			t.Errorf("stdout after yes:\n%s\nwant the command run and scratch/xy deleted in the patch", out)
		}
	})
	t.Run("ctrl-c", func(t *testing.T) {
		ws := newWorkspace(t)
		srv := fake.NewServer(t, fake.Call("exec_command", `{"cmd":"rm -r scratch"}`))
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		stdout, done := startRun(t, ctx, asked, "run", "--base-url", srv.URL, "--workspace", ws, "tidy")
		cancel()
		if err := wait(t, done, stdout); clibase.ExitCode(err) != 130 {
			t.Errorf("Ctrl-C at the question: exit %d (%v), want 130", clibase.ExitCode(err), err)
		}
		if left := sandboxesIn(t, home); len(left) > 0 {
			t.Errorf("sandboxes left after Ctrl-C at the question: %v", left)
		}
	})
}

// TestRunRetry: a 429 with Retry-After is waited out; the user sees only
// the run. (Parallel: the wait is a second.)
func TestRunRetry(t *testing.T) {
	t.Parallel()
	home := runHome(t)
	ws := newWorkspace(t)
	srv := fake.NewServer(t,
		fake.Error(429, "Rate limit reached").RetryAfter(time.Second),
		fake.Call("exec_command", `{"cmd":"cat notes.txt"}`),
		fake.Text("two is there"),
	)
	out, errOut, err := run(t, "run", "--state-dir", home, "--base-url", srv.URL, "--workspace", ws, "look")
	if err != nil {
		t.Fatalf("cove run: %v\n%s\n%s", err, out, errOut)
	}
	if !strings.Contains(out, "one\ntwo\n") || !strings.Contains(out, "» two is there") ||
		strings.Contains(out+errOut, "HTTP 429") || strings.Contains(out+errOut, "ate limit") {
		t.Errorf("stdout:\n%s\nstderr:\n%s\nwant the run and no trace of the retry", out, errOut)
	}
	if n := len(srv.Requests()); n != 3 {
		t.Errorf("%d requests, want 3 (one retried)", n)
	}
}
