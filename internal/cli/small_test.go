package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/agent/model/fake"
	"github.com/cove-sandbox/cove/internal/cli/clibase"
	"github.com/cove-sandbox/cove/sandbox"
)

// TestHelpEverySubcommand: -h and --help on every command and subcommand
// print its usage on stdout and exit 0, touching no state (no store
// opened, no pool started, no server called).
func TestHelpEverySubcommand(t *testing.T) {
	home := t.TempDir()
	t.Setenv("COVE_HOME", home)
	t.Setenv("COVE_POOL", "2")
	t.Setenv("COVE_SERVER", "")
	t.Setenv("COVE_API_KEY", "")
	cmds := [][]string{
		{}, {"sandbox"}, {"template"}, {"key"}, {"run"}, {"serve"}, {"demo"}, {"bench"},
		{"sandbox", "create"}, {"sandbox", "ls"}, {"sandbox", "list"}, {"sandbox", "exec"}, {"sandbox", "exec", "sb-x"},
		{"sandbox", "cp"}, {"sandbox", "snapshot"}, {"sandbox", "snapshot", "sb-x"}, {"sandbox", "stop"},
		{"sandbox", "resume"}, {"sandbox", "fork"}, {"sandbox", "rm"}, {"sandbox", "drain"},
		{"template", "ls"}, {"template", "build"}, {"template", "import"}, {"template", "rm"},
		{"key", "create"}, {"key", "ls"}, {"key", "revoke"},
	}
	for _, cmd := range cmds {
		for _, h := range []string{"-h", "--help"} {
			args := append(append([]string(nil), cmd...), h)
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				out, errOut, err := run(t, args...)
				if err != nil || clibase.ExitCode(err) != 0 {
					t.Fatalf("exit %d (%v), want 0\nstderr: %s", clibase.ExitCode(err), err, errOut)
				}
				if !strings.Contains(out, "Usage") || errOut != "" {
					t.Errorf("stdout %.100q, stderr %q: want the usage on stdout and nothing on stderr", out, errOut)
				}
				if len(cmd) > 1 && cmd[0] == "sandbox" && !strings.Contains(out, "cove sandbox "+strings.TrimSuffix(cmd[1], "list")) {
					t.Errorf("the usage of %q does not name it:\n%s", args, out)
				}
			})
		}
	}
	if entries, _ := os.ReadDir(home); len(entries) != 0 {
		t.Errorf("help touched the state directory: %d entries", len(entries))
	}
}

// TestTTLTakesAUnit: a bare number is refused with the fix, both by
// cove sandbox create and cove run, before anything is made.
func TestTTLTakesAUnit(t *testing.T) {
	home := t.TempDir()
	t.Setenv("COVE_HOME", home)
	_, errOut, err := run(t, "sandbox", "create", "--ttl", "5")
	if !errors.Is(err, clibase.ErrUsage) || !strings.Contains(errOut, "--ttl takes a duration such as 5m or 5h") {
		t.Errorf("create --ttl 5: %v, stderr %q; want a usage error that says --ttl takes a duration such as 5m", err, errOut)
	}
	if strings.Contains(errOut, "-allow") {
		t.Errorf("the flag's error is buried under the whole usage:\n%s", errOut)
	}
	t.Setenv("OPENAI_API_KEY", "test-key")
	_, _, err = run(t, "run", "--ttl", "5", "--workspace", t.TempDir(), "task")
	if err == nil || !strings.Contains(err.Error(), "--ttl takes a duration such as 5m") {
		t.Errorf("run --ttl 5: %v, want the same hint", err)
	}
	for in, want := range map[string]string{"90s": "1m30s", "1h": "1h0m0s", "0": "0s"} {
		if d, err := clibase.ParseTTL(in); err != nil || d.String() != want {
			t.Errorf("clibase.ParseTTL(%q) = %v, %v; want %s", in, d, err, want)
		}
	}
	for _, in := range []string{"-5m", "soon", "1.5"} {
		if _, err := clibase.ParseTTL(in); err == nil {
			t.Errorf("clibase.ParseTTL(%q) accepted", in)
		}
	}
	if entries, _ := os.ReadDir(filepath.Join(home, "sandboxes")); len(entries) != 0 {
		t.Errorf("a refused --ttl made %d sandboxes", len(entries))
	}
}

// TestSandboxCLISmall: on a real local sandbox, ls counts the TTL down,
// errors name their sandbox once, and --cpus above the machine's count
// is refused with the count.
func TestSandboxCLISmall(t *testing.T) {
	home := runHome(t)
	t.Setenv("COVE_HOME", home)
	id := strings.TrimSpace(mustRun(t, "sandbox", "create", "--ttl", "10m"))
	out := mustRun(t, "sandbox", "ls")
	line := ""
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, id) {
			line = l
		}
	}
	if !strings.Contains(out, "TTL LEFT") || !regexp.MustCompile(`\b[0-9]m[0-9]+s$`).MatchString(strings.TrimSpace(line)) || strings.Contains(line, "10m0s") {
		t.Errorf("ls:\n%s\nwant the time left of %s (under 10m)", out, id)
	}

	once := func(what string, err error, id string) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: no error", what)
			return
		}
		if n := strings.Count(err.Error(), id); n != 1 {
			t.Errorf("%s: %q names %s %d times, want once", what, err, id, n)
		}
	}
	for _, args := range [][]string{
		{"exec", "sb-nope", "--", "true"}, {"stop", "sb-nope"}, {"resume", "sb-nope"}, {"fork", "sb-nope"},
		{"rm", "sb-nope"}, {"snapshot", "sb-nope", "-o", filepath.Join(t.TempDir(), "x.tar")},
	} {
		_, _, err := run(t, append([]string{"sandbox"}, args...)...)
		once(strings.Join(args, " "), err, "sb-nope")
	}
	_, _, err := run(t, "sandbox", "rm", id)
	once("rm of a running sandbox", err, id)
	mustRun(t, "sandbox", "stop", id)
	_, _, err = run(t, "sandbox", "exec", id, "--", "true")
	once("exec in a stopped sandbox", err, id)
	if err == nil || !strings.Contains(err.Error(), "resume") {
		t.Errorf("exec in a stopped sandbox: %v, want a hint to resume", err)
	}

	before := len(sandboxesIn(t, home))
	n := runtime.NumCPU()
	_, _, err = run(t, "sandbox", "create", "--cpus", fmt.Sprint(n+1))
	if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), fmt.Sprintf("at most %d", n)) {
		t.Errorf("--cpus %d on a %d-CPU machine: %v, want a refusal that names the count", n+1, n, err)
	}
	if after := len(sandboxesIn(t, home)); after != before {
		t.Errorf("a refused --cpus left a sandbox: %d before, %d after", before, after)
	}
}

func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, err := run(t, args...)
	if err != nil {
		t.Fatalf("cove %s: %v\n%s", strings.Join(args, " "), err, errOut)
	}
	return out
}

// TestRunStateOutOfWorkspace: a run waiting for approval saves its state
// under Cove's state directory, not in the workspace; a state file named
// inside the workspace is never uploaded to the sandbox, and the patch at
// the end does not show it.
func TestRunStateOutOfWorkspace(t *testing.T) {
	home := runEnv(t)
	ws := newWorkspace(t)
	srv := fake.NewServer(t,
		fake.Call("exec_command", `{"cmd":"ls -a"}`),
		fake.Text("done"),
		fake.Call("exec_command", `{"cmd":"ls -a; echo new > made.txt"}`),
		fake.Text("done"),
	)
	_, _, err := run(t, "run", "--json", "--approve", "all", "--base-url", srv.URL, "--workspace", ws, "look")
	if clibase.ExitCode(err) != 3 {
		t.Fatalf("exit %d (%v), want 3 (waiting)", clibase.ExitCode(err), err)
	}
	saved, _ := filepath.Glob(filepath.Join(home, "runs", "run-*.json"))
	if len(saved) != 1 {
		t.Fatalf("state files under %s/runs: %v, want one", home, saved)
	}
	if entries, _ := filepath.Glob(filepath.Join(ws, "*.json")); len(entries) != 0 {
		t.Errorf("the run wrote %v into the workspace", entries)
	}
	if fi, err := os.Stat(saved[0]); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("state file mode: %v %v, want 0600", fi.Mode(), err)
	}
	if _, errOut, code := coveProcess(t, "run", "--resume", saved[0], "--reject-call", "all"); code != 0 {
		t.Fatalf("resume: exit %d\n%s", code, errOut)
	}

	// Named inside the workspace (a stale one there already): kept out
	// of the sandbox and of the patch.
	state := filepath.Join(ws, "run-state.json")
	os.WriteFile(state, []byte("{}"), 0o600)
	_, _, err = run(t, "run", "--json", "--approve", "all", "--state", state, "--base-url", srv.URL, "--workspace", ws, "look again")
	if clibase.ExitCode(err) != 3 {
		t.Fatalf("exit %d (%v), want 3 (waiting)", clibase.ExitCode(err), err)
	}
	out, errOut, code := coveProcess(t, "run", "--resume", state, "--approve-call", "all")
	if code != 0 {
		t.Fatalf("resume: exit %d\n%s\n%s", code, out, errOut)
	}
	if strings.Contains(out, "run-state.json") {
		t.Errorf("the state file reached the sandbox or the patch:\n%s", out)
	}
	if !strings.Contains(out, "notes.txt") || !strings.Contains(out, "+++ b/made.txt") {
		t.Errorf("the resumed run's output lacks the listing or the patch:\n%s", out)
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Errorf("the finished run's state file is still there: %v", err)
	}
}
