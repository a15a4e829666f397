package cli

import (
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/agent"
	"github.com/cove-sandbox/cove/agent/model/fake"
)

// artifactScript writes files with commands, then answers.
func artifactScript() []fake.Turn {
	return []fake.Turn{
		fake.Call("exec_command", `{"cmd":"mkdir -p out && printf 'a,b\\n1,2\\n' > report.csv && printf xyz > out/chart.png"}`),
		fake.Call("exec_command", `{"cmd":"rm old.txt && printf 'three\\n' >> notes.txt"}`),
		fake.Text("Wrote the report and its chart."),
	}
}

// cove run prints each file a command created, changed or deleted, under
// the command, with its size.
func TestRunShowsFilesOfCommands(t *testing.T) {
	runEnv(t)
	ws := newWorkspace(t)
	srv := fake.NewServer(t, artifactScript()...)
	out, errOut, err := run(t, "run", "--base-url", srv.URL, "--workspace", ws, "make a report")
	if err != nil {
		t.Fatalf("cove run: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	rest := out
	for _, s := range []string{
		"$ mkdir -p out", "✎ created out/chart.png (3 B)\n", "✎ created report.csv (8 B)\n",
		"$ rm old.txt", "✎ updated notes.txt (14 B)\n", "✎ deleted old.txt\n",
		"» Wrote the report and its chart.\n",
	} {
		i := strings.Index(rest, s)
		if i < 0 {
			t.Fatalf("stdout lacks %q after the steps before it:\n%s", s, out)
		}
		rest = rest[i+len(s):]
	}
}

// --json has a file_changed event per file, with its size and the
// command that made it.
func TestRunJSONFilesOfCommands(t *testing.T) {
	runEnv(t)
	ws := newWorkspace(t)
	srv := fake.NewServer(t, artifactScript()...)
	out, errOut, err := run(t, "run", "--json", "--base-url", srv.URL, "--workspace", ws, "make a report")
	if err != nil {
		t.Fatalf("cove run --json: %v\n%s", err, errOut)
	}
	var got []string
	for _, e := range jsonEvents(t, out) {
		if e.Type == agent.EventFileChanged {
			got = append(got, e.Action+" "+e.Path)
			if e.Command == "" || (e.Action != "deleted" && e.Size == 0) {
				t.Errorf("file_changed %s %s: command %q, size %d", e.Action, e.Path, e.Command, e.Size)
			}
		}
	}
	want := "created out/chart.png,created report.csv,updated notes.txt,deleted old.txt"
	if strings.Join(got, ",") != want {
		t.Errorf("file_changed events: got %q, want %q", strings.Join(got, ","), want)
	}
}

// A file name with control characters is quoted: the sandbox picks it,
// and it must not drive the user's terminal.
func TestFileLineQuotesControlCharacters(t *testing.T) {
	for _, tc := range []struct {
		ev   agent.Event
		want string
	}{
		{agent.Event{Path: "out/chart.png", Action: "created", Size: 2048}, "✎ created out/chart.png (2 KiB)\n"},
		{agent.Event{Path: "big.bin", Action: "updated", Size: 3 << 19}, "✎ updated big.bin (1.5 MiB)\n"},
		{agent.Event{Path: "x\x1b]0;owned\x07", Action: "created", Size: 1}, "✎ created \"x\\x1b]0;owned\\a\" (1 B)\n"},
		{agent.Event{Path: "gone.txt", Action: "deleted"}, "✎ deleted gone.txt\n"},
		{agent.Event{Text: "and 12 more files changed", Action: "updated"}, "✎ and 12 more files changed\n"},
	} {
		if got := fileLine(tc.ev); got != tc.want {
			t.Errorf("fileLine(%+v) = %q, want %q", tc.ev, got, tc.want)
		}
	}
}
