package local

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/sandboxtest"
)

// TestTerminal: in a real sandbox a shell on a PTY (what the web
// terminal, cove sandbox exec -it and E2B's PTY start) has a terminal it
// can use: TERM=xterm-256color with its terminfo, so tput sees 256
// colours and clear clears, and a login's USER, HOME and SHELL; a
// command on pipes has no TERM forced on it.
func TestTerminal(t *testing.T) { onTiers(t, testTerminal) }

func testTerminal(t *testing.T, iso string) {
	rt := newRuntime(t)
	ctx := context.Background()
	s, err := rt.Create(ctx, sandbox.Spec{Isolation: iso})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Delete(context.Background(), s.ID()) })

	out := &sandboxtest.SyncBuffer{}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	p, err := s.Start(wctx, sandbox.ExecRequest{Cmd: "sh", Args: []string{"-c",
		`echo "T=$TERM U=${USER-unset} S=${SHELL-unset}"; test -d "$HOME" && echo home-ok; tput colors; clear; echo "clear=$?"`},
		PTY: &sandbox.PTYSize{Cols: 80, Rows: 24}, Stdout: out})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := p.Wait(wctx); err != nil || !st.Success() {
		t.Fatalf("the shell on a PTY: %+v %v\n%q", st, err, out.String())
	}
	got := out.String()
	for _, want := range []string{"T=xterm-256color ", "home-ok", "\n256\r\n", "\x1b[H\x1b[2J", "clear=0"} {
		if !strings.Contains(got, want) {
			t.Errorf("on a PTY the output lacks %q:\n%q", want, got)
		}
	}
	if strings.Contains(got, "U=unset") || strings.Contains(got, "S=unset") {
		t.Errorf("on a PTY USER or SHELL is unset:\n%q", got)
	}

	if got, _ := run(t, s, `echo "T=${TERM-unset}"`); got != "T=unset\n" {
		t.Errorf("a command on pipes sees %q, want no TERM", got)
	}
}
