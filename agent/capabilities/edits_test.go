package capabilities

import (
	"context"
	"slices"
	"testing"

	"github.com/cove-sandbox/cove/agent"
)

// emitter is a tool that reports the file changes it is given.
type emitter []agent.Event

func (e emitter) Spec() agent.ToolSpec { return agent.ToolSpec{Name: "apply_patch"} }

func (e emitter) Call(ctx context.Context, call agent.ToolCall) (agent.ToolResult, error) {
	for _, ev := range e {
		call.Emit(ev)
	}
	return agent.TextResult("done"), nil
}

// The paths apply_patch reports, a move's source included, are recorded
// for the shell, and its events still reach the run.
func TestRecordEdits(t *testing.T) {
	edits := &agent.Edits{}
	tool := recordEdits{emitter{
		{Type: agent.EventFileChanged, Path: "a.txt", Action: "created", Diff: "--- /dev/null\n+++ b/a.txt\n@@ -0,0 +1 @@\n+a\n"},
		{Type: agent.EventFileChanged, Path: "docs/b.md", Action: "moved", Diff: "--- a/b.md\n+++ b/docs/b.md\n"},
		{Type: agent.EventOutput, Data: "not a file"},
	}, edits}
	var seen int
	if _, err := tool.Call(t.Context(), agent.ToolCall{Emit: func(agent.Event) { seen++ }}); err != nil {
		t.Fatal(err)
	}
	if seen != 3 {
		t.Errorf("%d events reached the run, want 3", seen)
	}
	got := edits.Take()
	slices.Sort(got)
	if want := []string{"a.txt", "b.md", "docs/b.md"}; !slices.Equal(got, want) {
		t.Errorf("recorded %q, want %q", got, want)
	}
	if again := edits.Take(); again != nil {
		t.Errorf("a second Take gave %q, want nothing", again)
	}
	// Without an Edits (a runner that gives none), nothing breaks.
	if _, err := (recordEdits{emitter{{Type: agent.EventFileChanged, Path: "x"}}, nil}).Call(t.Context(), agent.ToolCall{}); err != nil {
		t.Fatal(err)
	}
}
