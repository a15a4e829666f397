package sandboxtest

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
)

// The conformance tests of the Session calls that reach a process by pid
// or tag with no handle: StartDetached, Signal, WriteStdin, CloseStdin.
// Each drives the process from a second session (a fresh one from
// Runtime.Get, as a client that restarted would have), so they prove the
// process's state lives in the sandbox, not in the session that started
// it.
var processBySelectorTests = []suiteTest{
	{"DetachedStartFeedAttach", testDetachedStartFeedAttach},
	{"DetachedStartStdin", testDetachedStartStdin},
	{"SignalFromAnotherSession", testSignalFromAnotherSession},
	{"BySelectorErrors", testBySelectorErrors},
	{"Timeout", testProcessTimeout},
}

// reopen returns a new session of s's sandbox.
func (h *harness) reopen(t *testing.T, s sandbox.Session) sandbox.Session {
	t.Helper()
	s2, err := h.rt.Get(t.Context(), s.ID())
	if err != nil {
		t.Fatalf("Get(%q): %v", s.ID(), err)
	}
	return s2
}

func startDetached(t *testing.T, s sandbox.Session, req sandbox.ExecRequest) int {
	t.Helper()
	pid, err := s.StartDetached(t.Context(), req)
	if err != nil {
		t.Fatalf("StartDetached(%s): %v", describe(req), err)
	}
	if pid <= 0 {
		t.Fatalf("StartDetached(%s): pid %d, want a positive one", describe(req), pid)
	}
	sel := sandbox.ProcessSelector{PID: pid}
	ctx := t.Context()
	t.Cleanup(func() { _ = s.Signal(ctx, sel, sandbox.SIGKILL) })
	return pid
}

// attachOutput attaches to sel and waits for the end, returning the
// stdout it got.
func attachOutput(t *testing.T, s sandbox.Session, sel sandbox.ProcessSelector) (string, sandbox.ExitStatus) {
	t.Helper()
	var out SyncBuffer
	p, err := s.Attach(t.Context(), sel, &out, nil)
	if err != nil {
		t.Fatalf("Attach(%+v): %v", sel, err)
	}
	kill(t, p)
	st := wait(t, p)
	return out.String(), st
}

// testDetachedStartFeedAttach: output the process writes before anyone
// attaches waits for the first Attach; another session feeds its stdin by
// tag, closes it by pid, and attaches to read it all.
func testDetachedStartFeedAttach(t *testing.T, h *harness) {
	ctx := t.Context()
	s := h.create(t, sandbox.Spec{})
	pid := startDetached(t, s, sandbox.ExecRequest{Cmd: "echo early; cat", Shell: true, OpenStdin: true, Tag: "fed"})
	info, ok := processListed(t, s, pid)
	if !ok || info.Tag != "fed" {
		t.Errorf("Processes after StartDetached: pid %d listed %v with tag %q, want listed with tag %q", pid, ok, info.Tag, "fed")
	}

	s2 := h.reopen(t, s)
	if err := s2.WriteStdin(ctx, sandbox.ProcessSelector{Tag: "fed"}, []byte("fed\n")); err != nil {
		t.Fatalf("WriteStdin by tag from another session: %v", err)
	}
	if err := s2.CloseStdin(ctx, sandbox.ProcessSelector{PID: pid}); err != nil {
		t.Fatalf("CloseStdin by pid from another session: %v", err)
	}
	out, st := attachOutput(t, s2, sandbox.ProcessSelector{PID: pid})
	if out != "early\nfed\n" || !st.Success() {
		t.Errorf("attached from another session: output %q, status %+v; want %q and success", out, st, "early\nfed\n")
	}
	if err := s2.CloseStdin(ctx, sandbox.ProcessSelector{PID: pid}); err != nil && !errors.Is(err, sandbox.ErrState) {
		t.Errorf("CloseStdin of an ended process: %v, want nil or ErrState", err)
	}
}

// testDetachedStartStdin: ExecRequest.Stdin is fed to a detached process,
// then closed.
func testDetachedStartStdin(t *testing.T, h *harness) {
	s := h.create(t, sandbox.Spec{})
	pid := startDetached(t, s, sandbox.ExecRequest{Cmd: "cat", Stdin: strings.NewReader("from a reader\n")})
	out, st := attachOutput(t, h.reopen(t, s), sandbox.ProcessSelector{PID: pid})
	if out != "from a reader\n" || !st.Success() {
		t.Errorf("cat of a detached start's Stdin: output %q, status %+v; want %q and success", out, st, "from a reader\n")
	}
}

// testSignalFromAnotherSession: a session that did not start a process
// ends it by tag, and a signal to it once it has ended is ErrState.
func testSignalFromAnotherSession(t *testing.T, h *harness) {
	ctx := t.Context()
	s := h.create(t, sandbox.Spec{})
	pid := startDetached(t, s, sandbox.ExecRequest{Cmd: "sleep", Args: []string{"30"}, Tag: "sleeper"})
	s2 := h.reopen(t, s)
	if err := s2.Signal(ctx, sandbox.ProcessSelector{Tag: "sleeper"}, sandbox.SIGTERM); err != nil {
		t.Fatalf("Signal by tag from another session: %v", err)
	}
	_, st := attachOutput(t, s2, sandbox.ProcessSelector{PID: pid})
	if st.Code != -1 || st.Signal == "" {
		t.Errorf("status after SIGTERM: %+v, want code -1 and the signal's name", st)
	}
	wantErr(t, "Signal to an ended process", s2.Signal(ctx, sandbox.ProcessSelector{PID: pid}, sandbox.SIGTERM), sandbox.ErrState)
	wantErr(t, "WriteStdin to an ended process", s2.WriteStdin(ctx, sandbox.ProcessSelector{PID: pid}, []byte("x")), sandbox.ErrState)
}

func testBySelectorErrors(t *testing.T, h *harness) {
	ctx := t.Context()
	s := h.create(t, sandbox.Spec{})
	for _, sel := range []sandbox.ProcessSelector{{Tag: "cove-suite-no-such-tag"}, {PID: 1 << 30}} {
		wantErr(t, fmt.Sprintf("Signal(%+v)", sel), s.Signal(ctx, sel, sandbox.SIGTERM), sandbox.ErrNotFound)
		wantErr(t, fmt.Sprintf("WriteStdin(%+v)", sel), s.WriteStdin(ctx, sel, []byte("x")), sandbox.ErrNotFound)
		wantErr(t, fmt.Sprintf("CloseStdin(%+v)", sel), s.CloseStdin(ctx, sel), sandbox.ErrNotFound)
	}
	_, err := s.StartDetached(ctx, sandbox.ExecRequest{Cmd: "true", Stdout: &bytes.Buffer{}})
	wantErr(t, "StartDetached with a Stdout", err, sandbox.ErrInvalid)
	_, err = s.StartDetached(ctx, sandbox.ExecRequest{})
	wantErr(t, "StartDetached of an empty command", err, sandbox.ErrInvalid)

	startDetached(t, s, sandbox.ExecRequest{Cmd: "sleep", Args: []string{"30"}, Tag: "dup"})
	_, err = s.StartDetached(ctx, sandbox.ExecRequest{Cmd: "sleep", Args: []string{"30"}, Tag: "dup"})
	wantErr(t, "StartDetached with a running process's tag", err, sandbox.ErrExist)

	pid := startDetached(t, s, sandbox.ExecRequest{Cmd: "sleep", Args: []string{"30"}})
	wantErr(t, "WriteStdin without OpenStdin", s.WriteStdin(ctx, sandbox.ProcessSelector{PID: pid}, []byte("x")), sandbox.ErrState)
}

// testProcessTimeout: ExecRequest.Timeout kills a detached process that
// nobody holds, and an Exec's; a negative one, or one over MaxTimeout,
// is ErrInvalid.
func testProcessTimeout(t *testing.T, h *harness) {
	ctx := t.Context()
	s := h.create(t, sandbox.Spec{})
	pid := startDetached(t, s, sandbox.ExecRequest{Cmd: "sleep", Args: []string{"30"}, Timeout: 100 * time.Millisecond})
	_, st := attachOutput(t, h.reopen(t, s), sandbox.ProcessSelector{PID: pid})
	if st.Code != -1 || st.Signal == "" {
		t.Errorf("detached sleep 30 with a timeout: status %+v, want killed by a signal", st)
	}
	r := execute(t, s, sandbox.ExecRequest{Cmd: "sleep", Args: []string{"30"}, Timeout: 100 * time.Millisecond})
	if r.status.Code != -1 || r.status.Signal == "" {
		t.Errorf("Exec of sleep 30 with a timeout: status %+v, want killed by a signal", r.status)
	}
	_, err := s.StartDetached(ctx, sandbox.ExecRequest{Cmd: "true", Timeout: -time.Second})
	wantErr(t, "StartDetached with a negative timeout", err, sandbox.ErrInvalid)
	_, err = s.Exec(ctx, sandbox.ExecRequest{Cmd: "true", Timeout: -time.Second})
	wantErr(t, "Exec with a negative timeout", err, sandbox.ErrInvalid)
	_, err = s.StartDetached(ctx, sandbox.ExecRequest{Cmd: "true", Timeout: sandbox.MaxTimeout + time.Millisecond})
	wantErr(t, "StartDetached with a timeout over MaxTimeout", err, sandbox.ErrInvalid)
	_, err = s.Exec(ctx, sandbox.ExecRequest{Cmd: "true", Timeout: time.Duration(math.MaxInt64)})
	wantErr(t, "Exec with the largest Duration as its timeout", err, sandbox.ErrInvalid)
}
