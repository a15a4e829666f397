package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
)

// The runtime re-executes this binary as `<exe> guest ...` to start a
// sandbox's daemon; TestMain plays that role.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "guest" {
		if err := Run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
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
	if got := ExitCode(err); got != 3 {
		t.Errorf("exit code of a failing command: got %d (%v), want 3", got, err)
	}
	// Nothing is left behind.
	entries, _ := os.ReadDir(home + "/hostproc")
	if len(entries) != 0 {
		t.Errorf("demo left %d sandboxes behind", len(entries))
	}
}

func TestUsage(t *testing.T) {
	tests := []struct {
		args     []string
		wantErr  error
		wantOut  string
		wantCode int
	}{
		{nil, ErrUsage, "", 2},
		{[]string{"frobnicate"}, ErrUsage, "", 2},
		{[]string{"help"}, nil, "cove demo", 0},
		{[]string{"version"}, nil, "cove dev", 0},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			out, errOut, err := run(t, tt.args...)
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("err = %v, want %v", err, tt.wantErr)
			}
			if ExitCode(err) != tt.wantCode {
				t.Errorf("exit code = %d, want %d", ExitCode(err), tt.wantCode)
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
