package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/internal/cli/clibase"
	"github.com/cove-sandbox/cove/sandbox/sandboxtest"
)

// The runtime re-executes this binary as `<exe> guest ...` to start a
// sandbox's daemon; TestMain plays that role.
func TestMain(m *testing.M) {
	sandboxtest.Main(m, func(args []string) (bool, error) {
		switch args[0] {
		case "guest", "local-shim", "local-init":
			return true, Run(context.Background(), args, os.Stdout, os.Stderr)
		}
		return false, nil
	})
}

func run(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var o, e bytes.Buffer
	err = Run(t.Context(), args, &o, &e)
	return o.String(), e.String(), err
}

func TestDemo(t *testing.T) {
	home, err := os.MkdirTemp("", "ch") // short: unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	t.Setenv("COVE_HOME", home)

	out, errOut, err := run(t, "demo")
	if err != nil {
		t.Fatalf("cove demo: %v\n%s", err, errOut)
	}
	if !strings.Contains(out, "hello, workspace") || !strings.Contains(out, "/workspace") {
		t.Errorf("demo output %q lacks the file it wrote or the workspace path", out)
	}
	for _, step := range []string{"creating a sandbox", "writing hello.txt", "running", "exit code 0", "deleted sandbox"} {
		if !strings.Contains(errOut, step) {
			t.Errorf("progress %q lacks the step %q", errOut, step)
		}
	}
	if !strings.Contains(errOut, "to stderr") {
		t.Errorf("the command's stderr did not stream to ours: %q", errOut)
	}

	// The sandboxed command's exit code becomes cove's.
	_, _, err = run(t, "demo", "--", "sh", "-c", "echo partial; exit 3")
	if got := clibase.ExitCode(err); got != 3 {
		t.Errorf("exit code of a failing command: got %d (%v), want 3", got, err)
	}
	// Nothing is left behind (the local runtime as root, hostproc else).
	for _, d := range []string{"/sandboxes", "/hostproc"} {
		entries, _ := os.ReadDir(home + d)
		if len(entries) != 0 {
			t.Errorf("demo left %d sandboxes behind in %s", len(entries), d)
		}
	}
}

func TestUsage(t *testing.T) {
	tests := []struct {
		args     []string
		wantErr  error
		wantOut  string
		wantCode int
	}{
		{nil, clibase.ErrUsage, "", 2},
		{[]string{"frobnicate"}, clibase.ErrUsage, "", 2},
		{[]string{"help"}, nil, "cove demo", 0},
		{[]string{"version"}, nil, "cove dev", 0},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			out, errOut, err := run(t, tt.args...)
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("err = %v, want %v", err, tt.wantErr)
			}
			if clibase.ExitCode(err) != tt.wantCode {
				t.Errorf("exit code = %d, want %d", clibase.ExitCode(err), tt.wantCode)
			}
			if !strings.Contains(out, tt.wantOut) {
				t.Errorf("stdout %q lacks %q", out, tt.wantOut)
			}
			if tt.wantErr != nil && !strings.Contains(errOut, "Usage:") {
				t.Errorf("a usage error must print the usage; stderr %q", errOut)
			}
		})
	}
}

// TestSandboxCLI drives `cove sandbox` through a sandbox's life.
func TestSandboxCLI(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the local runtime needs root (CI runs as root)")
	}
	home, err := os.MkdirTemp("", "cs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	t.Setenv("COVE_HOME", home)
	must := func(args ...string) string {
		t.Helper()
		out, errOut, err := run(t, args...)
		if err != nil {
			t.Fatalf("cove %s: %v\n%s", strings.Join(args, " "), err, errOut)
		}
		return out
	}
	id := strings.TrimSpace(must("sandbox", "create", "--ttl", "10m", "--env", "GREETING=hi"))
	t.Cleanup(func() { run(t, "sandbox", "rm", "-f", id) })
	if !strings.HasPrefix(id, "sb-") {
		t.Fatalf("create printed %q, want a sandbox id", id)
	}
	if out := must("sandbox", "ls"); !strings.Contains(out, id) || !strings.Contains(out, "running") {
		t.Errorf("ls = %q, want %s running", out, id)
	}
	if out := must("sandbox", "exec", id, "--", "sh", "-c", "echo $GREETING; pwd; id -u"); out != "hi\n/workspace\n1000\n" {
		t.Errorf("exec output %q", out)
	}
	must("sandbox", "exec", id, "--", "mkdir", "sub")
	// Flags before the id, as with docker exec.
	if out := must("sandbox", "exec", "-e", "X=flag-first", "-w", "sub", id, "--", "sh", "-c", "echo $X; pwd"); out != "flag-first\n/workspace/sub\n" {
		t.Errorf("exec with flags before the id: %q", out)
	}
	_, _, err = run(t, "sandbox", "exec", id, "--", "sh", "-c", "exit 7")
	if clibase.ExitCode(err) != 7 || clibase.Reportable(err) {
		t.Errorf("exec exit 7: code %d (%v), want 7 and nothing printed", clibase.ExitCode(err), err)
	}

	src := t.TempDir()
	os.MkdirAll(src+"/d/e", 0o755)
	os.WriteFile(src+"/d/e/f.txt", []byte("folder file"), 0o644)
	os.WriteFile(src+"/one.txt", []byte("one"), 0o644)
	must("sandbox", "cp", src+"/one.txt", id+":/workspace/one.txt")
	must("sandbox", "cp", src+"/d", id+":/workspace/")
	if out := must("sandbox", "exec", id, "--", "cat", "one.txt", "d/e/f.txt"); out != "onefolder file" {
		t.Errorf("files copied in: %q", out)
	}
	dst := t.TempDir()
	must("sandbox", "cp", id+":/workspace/d", dst+"/back")
	if data, _ := os.ReadFile(dst + "/back/e/f.txt"); string(data) != "folder file" {
		t.Errorf("folder copied out: %q", data)
	}
	snap := filepath.Join(dst, "snap.tar")
	must("sandbox", "snapshot", id, "-o", snap)
	if fi, err := os.Stat(snap); err != nil || fi.Size() == 0 {
		t.Errorf("snapshot file: %v", err)
	}

	fork := strings.TrimSpace(must("sandbox", "fork", id))
	t.Cleanup(func() { run(t, "sandbox", "rm", "-f", fork) })
	if out := must("sandbox", "exec", fork, "--", "cat", "one.txt"); out != "one" {
		t.Errorf("fork sees %q, want the original's file", out)
	}

	must("sandbox", "stop", id)
	_, errOut, err := run(t, "sandbox", "exec", id, "--", "true")
	if err == nil || !strings.Contains(err.Error(), "resume") {
		t.Errorf("exec in a stopped sandbox: %v %s, want an error that says to resume", err, errOut)
	}
	_, _, err = run(t, "sandbox", "rm", id)
	if err != nil {
		t.Errorf("rm of a stopped sandbox: %v", err)
	}
	_, _, err = run(t, "sandbox", "rm", fork)
	if err == nil || !strings.Contains(err.Error(), "rm -f") {
		t.Errorf("rm of a running sandbox without -f: %v, want a refusal naming rm -f", err)
	}
	must("sandbox", "rm", "-f", fork)
	if out := must("sandbox", "ls"); strings.Contains(out, id) || strings.Contains(out, fork) {
		t.Errorf("ls after rm: %q", out)
	}
	// A manifest builds the workspace at create.
	mdir := t.TempDir()
	os.MkdirAll(mdir+"/src", 0o755)
	os.WriteFile(mdir+"/src/main.py", []byte("print(1)\n"), 0o644)
	os.WriteFile(mdir+"/manifest.json", []byte(`{"entries": {"README.md": {"type": "file", "content": "hi\n"}, "code": {"type": "local_dir", "src": "src"}}, "environment": {"value": {"STAGE": "test"}}}`), 0o644)
	mid := strings.TrimSpace(must("sandbox", "create", "--manifest", mdir+"/manifest.json"))
	t.Cleanup(func() { run(t, "sandbox", "rm", "-f", mid) })
	if out := must("sandbox", "exec", mid, "--", "sh", "-c", "cat README.md code/main.py; echo $STAGE"); out != "hi\nprint(1)\ntest\n" {
		t.Errorf("workspace from the manifest: %q", out)
	}
	os.WriteFile(mdir+"/bad.json", []byte(`{"entries": {"../x": {"type": "file", "content": "x"}}}`), 0o644)
	_, _, err = run(t, "sandbox", "create", "--manifest", mdir+"/bad.json")
	if err == nil || !strings.Contains(err.Error(), "../x") {
		t.Errorf("a manifest with ../x: %v, want an error naming the entry", err)
	}

	_, _, err = run(t, "sandbox", "exec", "sb-nope", "--", "true")
	if err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("exec in an unknown sandbox: %v", err)
	}
}

// TestSandboxPoolCLI: with COVE_POOL, create leaves a sandbox ready that
// the next create hands out; drain deletes it.
func TestSandboxPoolCLI(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the local runtime needs root (CI runs as root)")
	}
	home, err := os.MkdirTemp("", "cq")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	t.Setenv("COVE_HOME", home)
	t.Setenv("COVE_POOL", "1")
	t.Cleanup(func() { run(t, "sandbox", "drain") })
	ids := map[string]bool{}
	for range 2 {
		out, errOut, err := run(t, "sandbox", "create", "--env", "K=v")
		if err != nil {
			t.Fatalf("create: %v %s", err, errOut)
		}
		id := strings.TrimSpace(out)
		ids[id] = true
		t.Cleanup(func() { run(t, "sandbox", "rm", "-f", id) })
		if o, _, err := run(t, "sandbox", "exec", id, "--", "printenv", "K"); err != nil || o != "v\n" {
			t.Errorf("exec in %s: %q %v", id, o, err)
		}
	}
	entries, _ := os.ReadDir(home + "/sandboxes")
	if len(entries) != 3 {
		t.Errorf("%d sandbox directories, want 2 handed out + 1 ready", len(entries))
	}
	if _, _, err := run(t, "sandbox", "drain"); err != nil {
		t.Fatal(err)
	}
	entries, _ = os.ReadDir(home + "/sandboxes")
	if len(entries) != 2 {
		t.Errorf("after drain: %d sandbox directories, want the 2 handed out", len(entries))
	}
	out, _, _ := run(t, "sandbox", "ls")
	for id := range ids {
		if !strings.Contains(out, id) {
			t.Errorf("ls lacks %s", id)
		}
	}
}
