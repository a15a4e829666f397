package sandboxtool_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/cove-sandbox/cove/agent"
	"github.com/cove-sandbox/cove/agent/tool/sandboxtool"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/hostproc/hostproctest"
	"github.com/cove-sandbox/cove/sandbox/sandboxtest/fake"
)

// newFakeTools returns tools over a fresh fake sandbox, closed at the end
// of the test. Its shell runs only "pwd", printing the directory it runs
// in: the tests over the fake check where commands run (hostproc's pwd
// would print a host path) and what is refused before anything runs;
// those that need a real shell use newHostTools.
func newFakeTools(t *testing.T, opts sandboxtool.Options) (*sandboxtool.Tools, sandbox.Session) {
	t.Helper()
	rt := fake.New()
	pwd := func(_ context.Context, p *fake.Proc) int {
		if p.Args[len(p.Args)-1] != "pwd" {
			fmt.Fprintf(p.Stderr, "%s: the fake's shell runs only pwd\n", p.Args[0])
			return 127
		}
		fmt.Fprintln(p.Stdout, p.Dir)
		return 0
	}
	rt.Handle("bash", pwd)
	rt.Handle("sh", pwd)
	sess, err := rt.Create(t.Context(), sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	tools := sandboxtool.New(sess, opts)
	t.Cleanup(func() {
		if err := tools.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return tools, sess
}

// result is one tool call's outcome as a test looks at it.
type result struct {
	text   string // the output's text, Chunk ID and Wall time masked
	raw    agent.ToolResult
	events []agent.Event
	err    error
}

var (
	chunkRe = regexp.MustCompile(`(?m)^Chunk ID: [0-9a-f]{6}$`)
	wallRe  = regexp.MustCompile(`(?m)^Wall time: \d+\.\d{4} seconds$`)
	idRe    = regexp.MustCompile(`(?m)^Process running with session ID (\d+)$`)
)

func call(t *testing.T, tool agent.Tool, args string) result {
	t.Helper()
	var mu sync.Mutex
	var r result
	done := false
	emit := func(ev agent.Event) {
		mu.Lock()
		defer mu.Unlock()
		if done {
			t.Errorf("%s emitted %+v after its call returned", tool.Spec().Name, ev)
		}
		r.events = append(r.events, ev)
	}
	r.raw, r.err = tool.Call(t.Context(), agent.ToolCall{ID: "call-1", Name: tool.Spec().Name, Arguments: args, Emit: emit})
	mu.Lock()
	done = true
	mu.Unlock()
	r.text = agent.Text(r.raw.Output)
	if r.err == nil && tool.Spec().Name != "view_image" {
		// Only the header varies; the output may be large.
		header, output, ok := strings.Cut(r.text, "\nOutput:\n")
		if !ok || !chunkRe.MatchString(header) || !wallRe.MatchString(header) {
			t.Errorf("%s %s: no Chunk ID, Wall time or Output line in %.300q", tool.Spec().Name, args, r.text)
		}
		header = chunkRe.ReplaceAllString(header, "Chunk ID: X")
		header = wallRe.ReplaceAllString(header, "Wall time: W seconds")
		r.text = header + "\nOutput:\n" + output
	}
	return r
}

// sessionID returns the session ID a running command's answer names.
func sessionID(t *testing.T, r result) int {
	t.Helper()
	m := idRe.FindStringSubmatch(r.text)
	if m == nil {
		t.Fatalf("no session ID in %q (err %v)", r.text, r.err)
	}
	id, _ := strconv.Atoi(m[1])
	return id
}

func exited(code int, output string) string {
	return fmt.Sprintf("Chunk ID: X\nWall time: W seconds\nProcess exited with code %d\nOutput:\n%s", code, output)
}

// execCase is one exec_command call and its answer.
type execCase struct {
	args string
	want string
	code int
}

func checkExec(t *testing.T, tools *sandboxtool.Tools, cases []execCase) {
	for _, tc := range cases {
		t.Run(tc.args, func(t *testing.T) {
			r := call(t, tools.ExecCommand(), tc.args)
			if r.err != nil {
				t.Fatal(r.err)
			}
			if r.text != tc.want {
				t.Errorf("got %q, want %q", r.text, tc.want)
			}
			if r.raw.ExitCode == nil || *r.raw.ExitCode != tc.code {
				t.Errorf("ToolResult.ExitCode = %v, want %d", r.raw.ExitCode, tc.code)
			}
		})
	}
}

func TestExecCommand(t *testing.T) {
	t.Parallel()
	tools, _ := newHostTools(t, sandboxtool.Options{})
	checkExec(t, tools, []execCase{
		{`{"cmd": "echo hello"}`, exited(0, "hello\n"), 0},
		{`{"cmd": "false"}`, exited(1, ""), 1},
		{`{"cmd": "echo bye; exit 3"}`, exited(3, "bye\n"), 3},
		{`{"cmd": "echo plain", "login": false, "tty": false}`, exited(0, "plain\n"), 0},
		// Out-of-range waits are clamped, not refused; numbers and
		// booleans sent as strings are taken, as pydantic does.
		{`{"cmd": "echo clamped", "yield_time_ms": -5}`, exited(0, "clamped\n"), 0},
		{`{"cmd": "echo lax", "yield_time_ms": "99999", "login": "false", "workdir": null}`, exited(0, "lax\n"), 0},
	})
}

// TestExecBothStreams: the answer holds what the command wrote to stdout
// and to stderr. They are two pipes, so a real process's two writes reach
// the sandbox in either order; only that both arrive whole is compared.
func TestExecBothStreams(t *testing.T) {
	t.Parallel()
	tools, _ := newHostTools(t, sandboxtool.Options{})
	r := call(t, tools.ExecCommand(), `{"cmd": "echo out; echo err >&2"}`)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.text != exited(0, "out\nerr\n") && r.text != exited(0, "err\nout\n") {
		t.Errorf("got %q, want both lines once after the header", r.text)
	}
}

// TestExecWorkdir: a command runs in its workdir, relative to the
// workspace or absolute.
func TestExecWorkdir(t *testing.T) {
	t.Parallel()
	tools, sess := newFakeTools(t, sandboxtool.Options{})
	if err := sess.Mkdir(t.Context(), "sub/dir"); err != nil {
		t.Fatal(err)
	}
	checkExec(t, tools, []execCase{
		{`{"cmd": "pwd", "workdir": "sub/dir"}`, exited(0, "/workspace/sub/dir\n"), 0},
		{`{"cmd": "pwd", "workdir": "/workspace/sub"}`, exited(0, "/workspace/sub\n"), 0},
	})
}

// TestExecEvents: output streams to the run's events as it comes, labelled
// with its stream and the command.
func TestExecEvents(t *testing.T) {
	t.Parallel()
	tools, _ := newHostTools(t, sandboxtool.Options{})
	r := call(t, tools.ExecCommand(), `{"cmd": "echo out; echo err >&2"}`)
	if r.err != nil {
		t.Fatal(r.err)
	}
	var got []agent.Event
	for _, ev := range r.events {
		if ev.Time.IsZero() {
			t.Errorf("event %+v has no time", ev)
		}
		ev.Time = time.Time{}
		got = append(got, ev)
	}
	base := agent.Event{Type: agent.EventOutput, CallID: "call-1", Tool: "exec_command", CallView: agent.CallView{Command: "echo out; echo err >&2"}}
	out, errEv := base, base
	out.Stream, out.Data = "stdout", "out\n"
	errEv.Stream, errEv.Data = "stderr", "err\n"
	// stdout and stderr are two pipes: a real process's two streams
	// reach the sandbox in either order, so the order between them is
	// not compared.
	byStream := cmpopts.SortSlices(func(a, b agent.Event) bool { return a.Stream < b.Stream })
	if diff := cmp.Diff([]agent.Event{out, errEv}, got, byStream); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// TestYieldAndPoll: a command still running at its yield gets a session ID;
// write_stdin polls it until it ends, and afterwards says it has ended.
func TestYieldAndPoll(t *testing.T) {
	t.Parallel()
	tools, _ := newHostTools(t, sandboxtool.Options{})
	r := call(t, tools.ExecCommand(), `{"cmd": "echo start; sleep 0.8; echo done", "yield_time_ms": 250}`)
	if r.err != nil {
		t.Fatal(r.err)
	}
	id := sessionID(t, r)
	if id < 1000 || id >= 100000 {
		t.Errorf("session ID %d, want one in [1000, 100000) as the SDK allocates", id)
	}
	want := fmt.Sprintf("Chunk ID: X\nWall time: W seconds\nProcess running with session ID %d\nOutput:\nstart\n", id)
	if r.text != want || r.raw.ExitCode != nil {
		t.Errorf("at the yield: got %q (exit code %v), want %q and no exit code", r.text, r.raw.ExitCode, want)
	}

	// An empty write only polls: it waits (up to 5 s) for the end.
	start := time.Now()
	r = call(t, tools.WriteStdin(), fmt.Sprintf(`{"session_id": %d}`, id))
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.text != exited(0, "done\n") {
		t.Errorf("poll: got %q, want %q", r.text, exited(0, "done\n"))
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("the poll returned after %v: it should return when the process ends", d)
	}
	if len(r.events) != 1 || r.events[0].SessionID != id || r.events[0].Command != "echo start; sleep 0.8; echo done" {
		t.Errorf("poll events %+v, want one naming session %d and its command", r.events, id)
	}

	r = call(t, tools.WriteStdin(), fmt.Sprintf(`{"session_id": %d}`, id))
	if !errors.Is(r.err, sandbox.ErrNotFound) || !strings.Contains(r.err.Error(), "has exited (code 0)") {
		t.Errorf("poll after the end: %v, want ErrNotFound saying it has exited", r.err)
	}
}

// TestFloodBounded: a command that writes without end gets a bounded
// answer with head, marker and tail, and the token count of everything.
func TestFloodBounded(t *testing.T) {
	t.Parallel()
	tools, _ := newHostTools(t, sandboxtool.Options{})
	// A TTY lets write_stdin send a key and wait only its yield (a bare
	// poll waits 5 s).
	r := call(t, tools.ExecCommand(), `{"cmd": "yes", "tty": true, "yield_time_ms": 300}`)
	if r.err != nil {
		t.Fatal(r.err)
	}
	id := sessionID(t, r)
	out := r.text[strings.Index(r.text, "Output:\n")+len("Output:\n"):]
	if max := sandboxtool.DefaultMaxOutputTokens * 4; len(out) > max {
		t.Errorf("output of %d bytes, want at most %d", len(out), max)
	}
	if !regexp.MustCompile(`^Total output lines: \d+\n\n(y\r?\n)+y?\r?…\d+ tokens truncated…\r?\n?(y\r?\n)+(y\r?)?$`).MatchString(out) {
		t.Errorf("output is not head, marker and tail of y lines: %.200q...%q", out, out[max(0, len(out)-200):])
	}
	m := regexp.MustCompile(`(?m)^Original token count: (\d+)$`).FindStringSubmatch(r.text)
	if m == nil {
		t.Fatalf("no Original token count in %.300q", r.text)
	}
	if n, _ := strconv.Atoi(m[1]); n <= sandboxtool.DefaultMaxOutputTokens {
		t.Errorf("Original token count %d, want more than the %d shown", n, sandboxtool.DefaultMaxOutputTokens)
	}
	// Asking for more than a process buffers gives what it buffers.
	r = call(t, tools.WriteStdin(), fmt.Sprintf(`{"session_id": %d, "chars": "\\n", "yield_time_ms": 250, "max_output_tokens": 100000000}`, id))
	if r.err != nil {
		t.Fatal(r.err)
	}
	if n := len(r.text); n > sandboxtool.DefaultOutputBufferBytes+200 {
		t.Errorf("answer of %d bytes, want at most the %d-byte buffer", n, sandboxtool.DefaultOutputBufferBytes)
	}
}

// TestTruncation: max_output_tokens cuts as the SDK does (the wanted text
// is its formatted_truncate_text_with_token_count's).
func TestTruncation(t *testing.T) {
	t.Parallel()
	tools, _ := newHostTools(t, sandboxtool.Options{})
	r := call(t, tools.ExecCommand(), `{"cmd": "yes abcdefgh | head -n 1000", "max_output_tokens": 100}`)
	if r.err != nil {
		t.Fatal(r.err)
	}
	line := "abcdefgh\n"
	want := "Chunk ID: X\nWall time: W seconds\nProcess exited with code 0\nOriginal token count: 2250\nOutput:\n" +
		"Total output lines: 1000\n\n" + strings.Repeat(line, 19) + "ab…2164 tokens truncated…gh\n" + strings.Repeat(line, 19)
	if r.text != want {
		t.Errorf("got %q\nwant %q", r.text, want)
	}

	// Without max_output_tokens the default bounds it.
	tools, _ = newHostTools(t, sandboxtool.Options{DefaultMaxOutputTokens: 10})
	r = call(t, tools.ExecCommand(), `{"cmd": "yes abcdefgh | head -n 1000"}`)
	if !strings.Contains(r.text, "Original token count: 2250\n") || !strings.Contains(r.text, "tokens truncated") {
		t.Errorf("with a default of 10 tokens: got %q, want it truncated", r.text)
	}
}

func TestBadArguments(t *testing.T) {
	t.Parallel()
	tools, _ := newFakeTools(t, sandboxtool.Options{})
	for _, tc := range []struct {
		tool agent.Tool
		args string
		want error
		says string
	}{
		{tools.ExecCommand(), `not json`, sandbox.ErrInvalid, "not a JSON object"},
		{tools.ExecCommand(), `null`, sandbox.ErrInvalid, "not a JSON object"},
		{tools.ExecCommand(), `{}`, sandbox.ErrInvalid, `"cmd" is required`},
		{tools.ExecCommand(), `{"cmd": ""}`, sandbox.ErrInvalid, `"cmd" is required`},
		{tools.ExecCommand(), `{"cmd": 5}`, sandbox.ErrInvalid, `"cmd" must be a string`},
		{tools.ExecCommand(), `{"cmd": "true", "tty": "maybe"}`, sandbox.ErrInvalid, `"tty" must be true or false`},
		{tools.ExecCommand(), `{"cmd": "true", "yield_time_ms": 1.5}`, sandbox.ErrInvalid, `"yield_time_ms" must be an integer`},
		{tools.ExecCommand(), `{"cmd": "true", "max_output_tokens": 0}`, sandbox.ErrInvalid, `"max_output_tokens" must be at least 1`},
		{tools.ExecCommand(), `{"cmd": "pwd", "workdir": "../outside"}`, sandbox.ErrInvalid, `workdir "../outside" must be an existing directory inside the workspace`},
		{tools.ExecCommand(), `{"cmd": "pwd", "workdir": "missing"}`, sandbox.ErrInvalid, `workdir "missing"`},
		{tools.ExecCommand(), `{"cmd": "true", "shell": "zsh"}`, sandbox.ErrNotFound, `shell "zsh" is not installed`},
		{tools.WriteStdin(), `{}`, sandbox.ErrInvalid, `"session_id" is required`},
		{tools.WriteStdin(), `{"session_id": "abc"}`, sandbox.ErrInvalid, `"session_id" must be an integer`},
		{tools.WriteStdin(), `{"session_id": 4321}`, sandbox.ErrNotFound, "no session with ID 4321"},
		{tools.ViewImage(), `{}`, sandbox.ErrInvalid, `"path" is required`},
	} {
		t.Run(tc.tool.Spec().Name+" "+tc.args, func(t *testing.T) {
			r := call(t, tc.tool, tc.args)
			if !errors.Is(r.err, tc.want) || !strings.Contains(fmt.Sprint(r.err), tc.says) {
				t.Errorf("got %v, want %v saying %q", r.err, tc.want, tc.says)
			}
		})
	}
}

// TestStdinNeedsTTY: a command without a TTY reads an empty stdin, and
// write_stdin says how to get one, in the SDK's words.
func TestStdinNeedsTTY(t *testing.T) {
	t.Parallel()
	tools, _ := newHostTools(t, sandboxtool.Options{})
	r := call(t, tools.ExecCommand(), `{"cmd": "cat; sleep 5", "yield_time_ms": 250}`)
	id := sessionID(t, r)
	r = call(t, tools.WriteStdin(), fmt.Sprintf(`{"session_id": %d, "chars": "hi\n"}`, id))
	if !errors.Is(r.err, sandbox.ErrState) || !strings.Contains(fmt.Sprint(r.err), "Start the command with `tty=true`") {
		t.Errorf("got %v, want ErrState telling to use tty=true", r.err)
	}
}

// TestLifetime: a process running past MaxLifetime is killed, and the next
// poll says so with the code a shell reports for SIGKILL.
func TestLifetime(t *testing.T) {
	t.Parallel()
	tools, sess := newHostTools(t, sandboxtool.Options{MaxLifetime: 300 * time.Millisecond})
	r := call(t, tools.ExecCommand(), `{"cmd": "sleep 1000", "yield_time_ms": 250}`)
	id := sessionID(t, r)
	r = call(t, tools.WriteStdin(), fmt.Sprintf(`{"session_id": %d}`, id))
	want := exited(137, "Process killed: it ran longer than the maximum lifetime of 300ms.")
	if r.err != nil || r.text != want {
		t.Errorf("got %q (%v), want %q", r.text, r.err, want)
	}
	if ps, _ := sess.Processes(t.Context()); len(ps) != 0 {
		t.Errorf("processes still running: %+v", ps)
	}
}

// TestMaxProcesses: starting one more process than the cap kills the least
// recently used running one, and a later write_stdin to it says why.
func TestMaxProcesses(t *testing.T) {
	t.Parallel()
	tools, _ := newHostTools(t, sandboxtool.Options{MaxProcesses: 2})
	var ids []int
	for range 3 {
		r := call(t, tools.ExecCommand(), `{"cmd": "sleep 100", "tty": true, "yield_time_ms": 250}`)
		ids = append(ids, sessionID(t, r))
	}
	r := call(t, tools.WriteStdin(), fmt.Sprintf(`{"session_id": %d}`, ids[0]))
	if !errors.Is(r.err, sandbox.ErrNotFound) || !strings.Contains(fmt.Sprint(r.err), "was killed to make room: at most 2 processes are kept") {
		t.Errorf("write_stdin to the pruned session: %v, want ErrNotFound saying it was killed to make room", r.err)
	}
	r = call(t, tools.WriteStdin(), fmt.Sprintf(`{"session_id": %d, "chars": "x", "yield_time_ms": 250}`, ids[2]))
	if r.err != nil || !strings.Contains(r.text, fmt.Sprintf("Process running with session ID %d", ids[2])) {
		t.Errorf("the newest session: %q (%v), want it still running", r.text, r.err)
	}
}

// TestClose: Close kills what still runs, and the tools refuse work after.
func TestClose(t *testing.T) {
	t.Parallel()
	sess, err := hostproctest.New(t).Create(t.Context(), sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	tools := sandboxtool.New(sess, sandboxtool.Options{})
	r := call(t, tools.ExecCommand(), `{"cmd": "sleep 100", "yield_time_ms": 250}`)
	id := sessionID(t, r)
	if err := tools.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if ps, _ := sess.Processes(t.Context()); len(ps) != 0 {
		t.Errorf("processes running after Close: %+v", ps)
	}
	if err := tools.Close(t.Context()); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if r := call(t, tools.ExecCommand(), `{"cmd": "true"}`); !errors.Is(r.err, sandbox.ErrState) {
		t.Errorf("exec_command after Close: %v, want ErrState", r.err)
	}
	if r := call(t, tools.WriteStdin(), fmt.Sprintf(`{"session_id": %d}`, id)); !errors.Is(r.err, sandbox.ErrState) {
		t.Errorf("write_stdin after Close: %v, want ErrState", r.err)
	}
}

func TestCommand(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ args, want string }{
		{`{"cmd": "ls -la", "workdir": "src"}`, "ls -la"},
		{`{"workdir": "src"}`, ""},
		{`not json`, ""},
	} {
		if got := sandboxtool.Command(tc.args); got != tc.want {
			t.Errorf("Command(%s) = %q, want %q", tc.args, got, tc.want)
		}
	}
	tools, _ := newFakeTools(t, sandboxtool.Options{})
	c, ok := tools.ExecCommand().(interface{ Command(string) string })
	if !ok || c.Command(`{"cmd": "make"}`) != "make" {
		t.Errorf("exec_command's tool has no Command method giving its command line")
	}
}

// TestSpecs: the schemas are those the SDK's pydantic argument models
// produce (model_json_schema, printed with sorted keys).
func TestSpecs(t *testing.T) {
	t.Parallel()
	tools, _ := newFakeTools(t, sandboxtool.Options{})
	want := map[string]string{
		"exec_command": `{"properties":{"cmd":{"description":"Shell command to execute.","minLength":1,"title":"Cmd","type":"string"},"login":{"default":true,"description":"Whether to run the shell with -l/-i semantics. Defaults to true.","title":"Login","type":"boolean"},"max_output_tokens":{"anyOf":[{"minimum":1,"type":"integer"},{"type":"null"}],"default":null,"description":"Maximum number of tokens to return. Excess output will be truncated.","title":"Max Output Tokens"},"shell":{"anyOf":[{"type":"string"},{"type":"null"}],"default":null,"description":"Shell binary to launch. Defaults to the user's default shell.","title":"Shell"},"tty":{"default":false,"description":"Whether to allocate a TTY for the command. Defaults to false (plain pipes); set to true to open a PTY and access TTY process.","title":"Tty","type":"boolean"},"workdir":{"anyOf":[{"type":"string"},{"type":"null"}],"default":null,"description":"Optional working directory to run the command in; defaults to the turn cwd.","title":"Workdir"},"yield_time_ms":{"default":10000,"description":"How long to wait (in milliseconds) for output before yielding.","minimum":0,"title":"Yield Time Ms","type":"integer"}},"required":["cmd"],"title":"ExecCommandArgs","type":"object"}`,
		"write_stdin":  `{"properties":{"chars":{"default":"","description":"Bytes to write to stdin (may be empty to poll).","title":"Chars","type":"string"},"max_output_tokens":{"anyOf":[{"minimum":1,"type":"integer"},{"type":"null"}],"default":null,"description":"Maximum number of tokens to return. Excess output will be truncated.","title":"Max Output Tokens"},"session_id":{"description":"Identifier of the running unified exec session.","title":"Session Id","type":"integer"},"yield_time_ms":{"default":250,"description":"How long to wait (in milliseconds) for output before yielding.","minimum":0,"title":"Yield Time Ms","type":"integer"}},"required":["session_id"],"title":"WriteStdinArgs","type":"object"}`,
		"view_image":   `{"properties":{"path":{"description":"Path to the image file. Workspace paths and explicitly granted sandbox paths are supported.","minLength":1,"title":"Path","type":"string"}},"required":["path"],"title":"ViewImageArgs","type":"object"}`,
	}
	var names []string
	for _, tool := range tools.All() {
		spec := tool.Spec()
		names = append(names, spec.Name)
		got, err := json.Marshal(spec.Parameters)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want[spec.Name] {
			t.Errorf("%s schema:\ngot  %s\nwant %s", spec.Name, got, want[spec.Name])
		}
		if spec.Description == "" || spec.Strict || spec.Grammar != "" {
			t.Errorf("%s: spec %+v, want a described, non-strict function tool", spec.Name, spec)
		}
	}
	if diff := cmp.Diff([]string{"exec_command", "write_stdin", "view_image"}, names); diff != "" {
		t.Errorf("tool names (-want +got):\n%s", diff)
	}
}

// TestWorkdirOption: commands run in Options.Workdir by default, and
// relative workdirs and image paths resolve against it.
func TestWorkdirOption(t *testing.T) {
	t.Parallel()
	tools, sess := newFakeTools(t, sandboxtool.Options{Workdir: "/workspace/proj"})
	if err := sess.Mkdir(t.Context(), "proj/src"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ args, want string }{
		{`{"cmd": "pwd"}`, exited(0, "/workspace/proj\n")},
		{`{"cmd": "pwd", "workdir": "src"}`, exited(0, "/workspace/proj/src\n")},
		{`{"cmd": "pwd", "workdir": ".."}`, exited(0, "/workspace\n")},
		{`{"cmd": "pwd", "workdir": "/workspace"}`, exited(0, "/workspace\n")},
	} {
		r := call(t, tools.ExecCommand(), tc.args)
		if r.err != nil || r.text != tc.want {
			t.Errorf("%s: got %q (%v), want %q", tc.args, r.text, r.err, tc.want)
		}
	}
	if r := call(t, tools.ExecCommand(), `{"cmd": "pwd", "workdir": "../.."}`); !errors.Is(r.err, sandbox.ErrInvalid) {
		t.Errorf("workdir above the workspace: %v, want ErrInvalid", r.err)
	}
	gif := "GIF89a\x01\x00\x01\x00\x00\x00\x00;"
	if err := sess.WriteFile(t.Context(), "proj/src/pixel.gif", strings.NewReader(gif), 0o644); err != nil {
		t.Fatal(err)
	}
	r := call(t, tools.ViewImage(), `{"path": "src/pixel.gif"}`)
	if r.err != nil || len(r.raw.Output) != 1 || !strings.HasPrefix(r.raw.Output[0].ImageURL, "data:image/gif;base64,") {
		t.Errorf("view_image of a GIF below Workdir: %+v (%v), want a GIF data URL", r.raw.Output, r.err)
	}
}
