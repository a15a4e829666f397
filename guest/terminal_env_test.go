package guest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	pb "github.com/cove-sandbox/cove/guest/gen/process"
)

// TestTerminalEnv: a process on a PTY (the web terminal, cove sandbox
// exec -it, E2B's PTY) gets TERM=xterm-256color unless its caller sets
// TERM, and the environment of a login (USER, HOME, SHELL from the
// sandbox's /etc/passwd, PATH, LANG), so clear, colours and full-screen
// programs work; a process on pipes gets no TERM forced on it.
func TestTerminalEnv(t *testing.T) {
	for _, prog := range []string{"tput", "clear"} {
		if _, err := exec.LookPath(prog); err != nil {
			t.Skipf("needs %s (ncurses-bin)", prog)
		}
	}
	root := t.TempDir()
	uid := os.Geteuid()
	for _, d := range []string{"etc", "home/dev", "bin"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	os.WriteFile(filepath.Join(root, "etc/passwd"), fmt.Appendf(nil, "dev:x:%d:%d:dev:/home/dev:/bin/bash\n", uid, os.Getegid()), 0o644)
	os.WriteFile(filepath.Join(root, "bin/bash"), nil, 0o755)
	_, c := startTestServer(t, Config{Root: root})

	show := `echo "T=${TERM-unset} S=${SHELL-unset} U=${USER-unset} H=${HOME-unset} L=${LANG-unset} P=${PATH-unset}"`
	req := startReq("/bin/sh", "-c", show+`; tput colors; clear; echo "clear=$?"`)
	req.Msg.Pty = &pb.PTY{Size: &pb.PTY_Size{Cols: 80, Rows: 24}}
	got := runToEnd(t, c, req)
	out := got.pty.String()
	for _, want := range []string{"T=xterm-256color ", "S=/bin/bash ", "U=dev ", "H=/home/dev ", "L=C.UTF-8 ", "P=/usr/local/sbin:", "\n256\r\n", "\x1b[H\x1b[2J", "clear=0"} {
		if !strings.Contains(out, want) {
			t.Errorf("on a PTY the output lacks %q:\n%q", want, out)
		}
	}

	// The caller's TERM wins.
	req = startReq("/bin/sh", "-c", show)
	req.Msg.Pty = &pb.PTY{Size: &pb.PTY_Size{Cols: 80, Rows: 24}}
	req.Msg.Process.Envs = map[string]string{"TERM": "vt100"}
	if out := runToEnd(t, c, req).pty.String(); !strings.Contains(out, "T=vt100 ") {
		t.Errorf("a PTY process whose caller set TERM=vt100 sees:\n%q", out)
	}

	// Pipes are no terminal: no TERM, no SHELL.
	got = runToEnd(t, c, startReq("/bin/sh", "-c", show))
	if out := got.stdout.String(); !strings.Contains(out, "T=unset S=unset ") || !strings.Contains(out, "L=C.UTF-8 ") {
		t.Errorf("a process without a PTY sees:\n%q\nwant no TERM or SHELL set, LANG as ever", out)
	}
}
