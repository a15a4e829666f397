package procs

import (
	"strings"
	"testing"

	pb "github.com/cove-sandbox/cove/guest/gen/process"
	"github.com/cove-sandbox/cove/guest/internal/journal"
)

// TestCommandLineBounded: a command with megabytes of arguments gives a
// line only a little over what the journal keeps, with its start intact.
func TestCommandLineBounded(t *testing.T) {
	big := strings.Repeat("x", 4<<20)
	got := commandLine(&pb.ProcessConfig{Cmd: "sh", Args: []string{"-c", big, big}})
	if len(got) > 2*journal.MaxField+10 || !strings.HasPrefix(got, "sh -c xxx") {
		t.Errorf("command line of %d bytes starting %q", len(got), got[:min(len(got), 20)])
	}
	if got := commandLine(&pb.ProcessConfig{Cmd: "ls", Args: []string{"-l", "/tmp"}}); got != "ls -l /tmp" {
		t.Errorf("commandLine = %q", got)
	}
}
