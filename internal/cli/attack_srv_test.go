package cli

import (
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/agent/model/fake"
	"github.com/creack/pty"
)

// TestTermSafe: control characters are shown, not obeyed, also when a
// sequence is split across writes.
func TestTermSafe(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain text\twith tabs\n", "plain text\twith tabs\n"},
		{"\x1b[2J\x1b[H", "^[[2J^[[H"},
		{"\x1b]0;title\x07", "^[]0;title^G"},
		{"\x1b[8mhidden\x1b[0m", "^[[8mhidden^[[0m"},
		{"10%\r99%\r\n", "10%^M99%\n"},
		{"a\bb\x7f", "a^Hb^?"},
		{"\u009b2J", `\u009b2J`},
		{"\xff\xfe", `\xff\xfe`},
		{"rm -rf ~ \u202e# safe", `rm -rf ~ \u202e# safe`},
		{"héllo wörld ✓", "héllo wörld ✓"},
	} {
		if got := termSafe(tc.in); got != tc.want {
			t.Errorf("termSafe(%q) = %q, want %q", tc.in, got, tc.want)
		}
		// Byte by byte through a writer: the same.
		var sb strings.Builder
		w := newSafeWriter(&sb)
		for i := range len(tc.in) {
			w.Write([]byte{tc.in[i]})
		}
		w.Flush()
		if sb.String() != tc.want {
			t.Errorf("safeWriter byte by byte %q = %q, want %q", tc.in, sb.String(), tc.want)
		}
	}
	if got := oneLine("rm -r x\n\n\necho hi\r\n"); got != `rm -r x\n\n\necho hi\n` {
		t.Errorf("oneLine = %q", got)
	}
}

// TestRunTerminalInjection: a command whose output clears the screen,
// sets the title, hides text, overwrites lines with carriage returns and
// prints a fake approval prompt, then a risky call whose command hides
// its start behind newlines: at the terminal, nothing of it is obeyed,
// and the question cove asks is the real one, on one line after a
// terminal reset.
func TestRunTerminalInjection(t *testing.T) {
	runEnv(t)
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pty here: %v", err)
	}
	defer ptmx.Close()
	defer tty.Close()
	prev := Stdin
	Stdin = tty
	t.Cleanup(func() { Stdin = prev })

	hostile := `printf '\033[2J\033[H\033]0;pwned\007\033[8mhidden\033[0m\nprogress 10%%\rprogress 99%%\r? approve $ ls (reads a file)? [y/N] \033[1A\033[2K\302\233\342\200\256evil\n'`
	args := func(cmd string) string {
		b, _ := json.Marshal(map[string]string{"cmd": cmd})
		return string(b)
	}
	risky := "rm -r scratch" + strings.Repeat("\n", 40) + "echo harmless"
	ws := newWorkspace(t)
	srv := fake.NewServer(t, fake.Call("exec_command", args(hostile)), fake.Call("exec_command", args(risky)), fake.Text("done"))
	const real = `? approve $ rm -r scratch\n\n\n`
	stdout, done := startRun(t, t.Context(), `echo harmless (deletes recursively)? [y/N] `, "run", "--base-url", srv.URL, "--workspace", ws, "tidy")
	io.WriteString(ptmx, "n\n")
	if err := wait(t, done, stdout); err != nil {
		t.Fatalf("cove run: %v\n%s", err, stdout)
	}
	out := stdout.String()
	defer func() {
		if t.Failed() {
			t.Logf("stdout:\n%s", out)
		}
	}()

	// The resets before each question are cove's own; past them, no
	// control character reaches the terminal.
	if !strings.Contains(out, termReset+"\n"+real) {
		t.Errorf("the question does not follow a terminal reset on a line of its own:\n%q", out)
	}
	rest := strings.ReplaceAll(out, termReset, "")
	for _, c := range []string{"\x1b", "\x07", "\b", "\u009b", "\u202e"} {
		if strings.Contains(rest, c) {
			t.Errorf("%q reached the terminal:\n%q", c, rest)
		}
	}
	if strings.Contains(strings.ReplaceAll(rest, "\r\n", "\n"), "\r") {
		t.Errorf("a carriage return reached the terminal:\n%q", rest)
	}
	for _, visible := range []string{"^[[2J", "^[]0;pwned^G", "^[[8mhidden", "progress 10%^Mprogress 99%^M? approve $ ls", `\u009b\u202eevil`} {
		if !strings.Contains(out, visible) {
			t.Errorf("stdout lacks %q, the hostile output made visible:\n%s", visible, out)
		}
	}
	// The question is the last thing printed before the answer was
	// read, whole, and the call it names was rejected.
	const end = "echo harmless (deletes recursively)? [y/N] "
	before := out[:strings.Index(out, end)+len(end)]
	if i := strings.LastIndex(before, "\n"); !strings.HasPrefix(before[i+1:], real) {
		t.Errorf("the last line before the answer is %q, want the real question", before[i+1:])
	}
	if !strings.Contains(out, "✗ rejected: $ rm -r scratch") {
		t.Errorf("the call was not rejected:\n%s", out)
	}
}
