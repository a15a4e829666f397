package cli

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestSandboxCreateDefaultPids: `cove sandbox create` without --pids makes
// a sandbox with a finite pids limit (1024), so a tenant's fork bomb or
// runaway loop of background jobs takes at most that many of the host's
// pids.
func TestSandboxCreateDefaultPids(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the local runtime needs root (CI runs as root)")
	}
	home, err := os.MkdirTemp("", "cp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	t.Setenv("COVE_HOME", home)
	out, errOut, err := run(t, "sandbox", "create")
	if err != nil {
		t.Fatalf("cove sandbox create: %v\n%s", err, errOut)
	}
	id := strings.TrimSpace(out)
	t.Cleanup(func() { run(t, "sandbox", "rm", "-f", id) })
	// 1100 background sleeps from a subshell (which ends at the first
	// fork that fails), then a count of the sandbox's processes made with
	// the shell's builtins alone (no fork is left by then).
	out, errOut, err = run(t, "sandbox", "exec", id, "--", "sh", "-c",
		`(i=0; while [ $i -lt 1100 ]; do sleep 60 >/dev/null 2>&1 & i=$((i+1)); done) 2>/dev/null
		n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; echo $n`)
	if err != nil {
		t.Fatalf("cove sandbox exec: %v\n%s", err, errOut)
	}
	n, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("the count printed %q (%s)", out, errOut)
	}
	if n > 1024 {
		t.Errorf("the sandbox runs %d processes; the default pids limit is 1024", n)
	}
	if n < 512 {
		t.Errorf("the sandbox runs only %d processes; want the loop to reach the limit of 1024", n)
	}
}
