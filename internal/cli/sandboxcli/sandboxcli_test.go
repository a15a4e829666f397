package sandboxcli

import (
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/cli/clibase"
	"github.com/cove-sandbox/cove/sandbox"
)

// TestHelpIsNotACommandsFlag: after the id, a command's own --help is
// the command's (ls --help runs ls), and after "--" always.
func TestHelpIsNotACommandsFlag(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want bool
	}{
		{[]string{"-h"}, true},
		{[]string{"sb-1", "--help"}, true},
		{[]string{"-e", "--help", "sb-1", "ls"}, false}, // a value of -e
		{[]string{"sb-1", "-w", "/tmp", "-h"}, true},
		{[]string{"sb-1", "ls", "--help"}, false},
		{[]string{"sb-1", "--", "ls", "--help"}, false},
	} {
		if got := execHelpAsked(tt.args); got != tt.want {
			t.Errorf("execHelpAsked(%q) = %v, want %v", tt.args, got, tt.want)
		}
	}
	if clibase.HelpAsked([]string{"sb-1", "--", "--help"}) {
		t.Errorf("clibase.HelpAsked took the --help after -- as its own")
	}
}

// TestTTLLeft: ls shows how long each sandbox has left, not the TTL it
// was made with.
func TestTTLLeft(t *testing.T) {
	now := time.Now()
	for _, tt := range []struct {
		in   sandbox.Info
		want string
	}{
		{sandbox.Info{}, "-"},
		{sandbox.Info{Spec: sandbox.Spec{TTL: time.Hour}}, "1h0m (from start)"},
		{sandbox.Info{Spec: sandbox.Spec{TTL: time.Hour}, Deadline: now.Add(12*time.Minute + 3*time.Second)}, "12m3s"},
		{sandbox.Info{Spec: sandbox.Spec{TTL: time.Hour}, Deadline: now.Add(-time.Second)}, "expired"},
		{sandbox.Info{Deadline: now.Add(50 * time.Hour)}, "2d2h"},
	} {
		if got := ttlLeft(tt.in, now); got != tt.want {
			t.Errorf("ttlLeft(%+v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestPlainTerm: cove sandbox exec -t passes on a terminal type, never
// "dumb" (the daemon's xterm-256color is better) or anything that is not
// a terminfo name.
func TestPlainTerm(t *testing.T) {
	for term, want := range map[string]bool{
		"xterm-256color": true, "screen.xterm-256color": true, "tmux-256color": true, "rxvt-unicode+x": true,
		"": false, "dumb": false, "xterm\n": false, "x y": false, "$(id)": false, string(make([]byte, 65)): false,
	} {
		if got := plainTerm(term); got != want {
			t.Errorf("plainTerm(%q) = %v, want %v", term, got, want)
		}
	}
}
