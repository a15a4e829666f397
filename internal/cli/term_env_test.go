package cli

import (
	"os"
	"strings"
	"testing"
)

// TestSandboxExecTTYTerm: cove sandbox exec -t gives the sandbox's
// terminal our terminal's type, as ssh does; -e TERM=... wins.
func TestSandboxExecTTYTerm(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the local runtime needs root (CI runs as root)")
	}
	home, err := os.MkdirTemp("", "ct")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	t.Setenv("COVE_HOME", home)
	out, errOut, err := run(t, "sandbox", "create", "--ttl", "10m")
	if err != nil {
		t.Fatalf("create: %v %s", err, errOut)
	}
	id := strings.TrimSpace(out)
	t.Cleanup(func() { run(t, "sandbox", "rm", "-f", id) })

	t.Setenv("TERM", "screen-256color")
	if out, errOut, code := coveProcess(t, "sandbox", "exec", "-t", id, "--", "sh", "-c", `echo "T=$TERM"`); code != 0 || !strings.Contains(out, "T=screen-256color") {
		t.Errorf("exec -t with TERM=screen-256color: exit %d, %q %q", code, out, errOut)
	}
	if out, errOut, code := coveProcess(t, "sandbox", "exec", "-t", "-e", "TERM=vt100", id, "--", "sh", "-c", `echo "T=$TERM"`); code != 0 || !strings.Contains(out, "T=vt100") {
		t.Errorf("exec -t -e TERM=vt100: exit %d, %q %q", code, out, errOut)
	}
	t.Setenv("TERM", "dumb")
	if out, errOut, code := coveProcess(t, "sandbox", "exec", "-t", id, "--", "sh", "-c", `echo "T=$TERM"`); code != 0 || !strings.Contains(out, "T=xterm-256color") {
		t.Errorf("exec -t with TERM=dumb: exit %d, %q %q, want the daemon's xterm-256color", code, out, errOut)
	}
}
