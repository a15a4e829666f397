package sandboxtool_test

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cove-sandbox/cove/agent"
	"github.com/cove-sandbox/cove/agent/tool/sandboxtool"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/hostproc/hostproctest"
)

// change is a file_changed event as the tests compare it.
type change struct {
	Action, Path string
	Size         int64
}

// changesOf returns the file_changed events of a call, and fails the test
// on a call error.
func changesOf(t *testing.T, r result) []change {
	t.Helper()
	if r.err != nil {
		t.Fatalf("call failed: %v", r.err)
	}
	var out []change
	for _, ev := range r.events {
		if ev.Type == agent.EventFileChanged {
			out = append(out, change{ev.Action, ev.Path, ev.Size})
		}
	}
	return out
}

func execCmd(t *testing.T, tools *sandboxtool.Tools, cmd string) result {
	t.Helper()
	return call(t, tools.ExecCommand(), fmt.Sprintf(`{"cmd": %q}`, cmd))
}

// Files a command writes, changes or deletes are reported once, by the
// command that did it, whatever wrote them; noise directories are not.
func TestFileChangesOfCommands(t *testing.T) {
	t.Parallel()
	tools, _ := newHostTools(t, sandboxtool.Options{})
	for _, tc := range []struct {
		cmd  string
		want []change
	}{
		{"true", nil}, // the first call only takes the baseline
		{"printf 12345 > report.csv; mkdir -p out/deep; printf png > out/deep/chart.png", []change{
			{"created", "out/deep/chart.png", 3}, {"created", "report.csv", 5},
		}},
		{"ls -la > /dev/null", nil},
		{"printf 6 >> report.csv; rm out/deep/chart.png; ln -s report.csv link.csv", []change{
			{"created", "link.csv", 10}, {"deleted", "out/deep/chart.png", 0}, {"updated", "report.csv", 6},
		}},
		// Dependencies, caches and version control are noise, at the top
		// and deeper; the rest of the call's files still show.
		{"mkdir -p node_modules/x .git sub/__pycache__ && touch node_modules/x/y .git/HEAD sub/__pycache__/z.pyc sub/kept.txt", []change{
			{"created", "sub/kept.txt", 0},
		}},
		{"echo hi > sub/more.txt", []change{{"created", "sub/more.txt", 3}}},
	} {
		if diff := cmp.Diff(tc.want, changesOf(t, execCmd(t, tools, tc.cmd))); diff != "" {
			t.Errorf("%s: file changes (-want +got):\n%s", tc.cmd, diff)
		}
	}
}

// A command still running after its yield: what it writes later shows at
// the write_stdin call that sees it.
func TestFileChangesOfBackgroundCommand(t *testing.T) {
	t.Parallel()
	tools, _ := newHostTools(t, sandboxtool.Options{})
	execCmd(t, tools, "true")
	r := call(t, tools.ExecCommand(), `{"cmd": "read line; echo \"$line\" > late.txt", "tty": true, "yield_time_ms": 250}`)
	if got := changesOf(t, r); got != nil {
		t.Errorf("before its input, the command changed %v", got)
	}
	id := sessionID(t, r)
	r = call(t, tools.WriteStdin(), fmt.Sprintf(`{"session_id": %d, "chars": "done\n", "yield_time_ms": 3000}`, id))
	if diff := cmp.Diff([]change{{"created", "late.txt", 5}}, changesOf(t, r)); diff != "" {
		t.Errorf("write_stdin: file changes (-want +got):\n%s", diff)
	}
	for _, ev := range r.events {
		if ev.Type == agent.EventFileChanged && ev.Command == "" {
			t.Errorf("file_changed %s does not name the command that made it", ev.Path)
		}
	}
}

// Paths another tool reported itself (apply_patch, through Options.Edits)
// are not reported again; a file written by other means is.
func TestFileChangesSkipEdits(t *testing.T) {
	t.Parallel()
	edits := &agent.Edits{}
	tools, sess := newHostTools(t, sandboxtool.Options{Edits: edits})
	execCmd(t, tools, "printf a > moved-away.txt")
	write := func(p, text string) {
		t.Helper()
		if err := sess.WriteFile(t.Context(), p, strings.NewReader(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("patched.txt", "by apply_patch")
	write("uploaded.txt", "by someone else")
	if err := sess.Move(t.Context(), "moved-away.txt", "moved.txt"); err != nil {
		t.Fatal(err)
	}
	write(".venv/lib/patched.py", "in the noise")
	edits.Add("patched.txt", "moved.txt", "moved-away.txt", ".venv/lib/patched.py")
	got := changesOf(t, execCmd(t, tools, "printf x >> patched.txt"))
	want := []change{{"updated", "patched.txt", 15}, {"created", "uploaded.txt", 15}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("file changes (-want +got):\n%s", diff)
	}
}

// A workspace past Options.MaxTrackedFiles is not compared any more: each
// command would pay for its listing.
func TestFileChangesHugeWorkspace(t *testing.T) {
	t.Parallel()
	tools, _ := newHostTools(t, sandboxtool.Options{MaxTrackedFiles: 50})
	execCmd(t, tools, "true")
	r := execCmd(t, tools, "mkdir many && cd many && seq 51 | xargs touch")
	if r.raw.ExitCode == nil || *r.raw.ExitCode != 0 {
		t.Fatalf("making the files: %s", r.text)
	}
	want := []change{{Action: "updated"}} // the notice, its text below
	if diff := cmp.Diff(want, changesOf(t, r)); diff != "" {
		t.Errorf("a workspace too large to compare: file changes (-want +got):\n%s", diff)
	}
	if text := r.events[len(r.events)-1].Text; !strings.Contains(text, "over 50 files") {
		t.Errorf("the notice says %q, want it to say the workspace has over 50 files", text)
	}
	if got := changesOf(t, execCmd(t, tools, "touch after.txt")); got != nil {
		t.Errorf("after the workspace grew too large, reported %v", got)
	}
}

// A call that changes many files reports the first ones and sums up the
// rest in one event, so the timeline stays readable.
func TestFileChangesMany(t *testing.T) {
	t.Parallel()
	tools, _ := newHostTools(t, sandboxtool.Options{})
	execCmd(t, tools, "true")
	r := execCmd(t, tools, "seq 300 | xargs touch")
	var files int
	var summary string
	for _, ev := range r.events {
		if ev.Type != agent.EventFileChanged {
			continue
		}
		if ev.Path == "" {
			summary = ev.Text
			continue
		}
		files++
	}
	if files != 200 || summary != "and 100 more files changed" {
		t.Errorf("got %d file events and summary %q, want 200 and %q", files, summary, "and 100 more files changed")
	}
}

// BenchmarkExecWithChanges is exec_command "true" in workspaces of
// various sizes, with and without a node_modules of 20,000 files at the
// top: what comparing the workspace after each command costs.
func BenchmarkExecWithChanges(b *testing.B) {
	for _, n := range []int{0, 1000, 5000, 10000} {
		for _, noise := range []bool{false, true} {
			b.Run(fmt.Sprintf("files=%d/node_modules=%v", n, noise), func(b *testing.B) {
				sess, err := hostproctest.New(b).Create(b.Context(), sandbox.Spec{})
				if err != nil {
					b.Fatal(err)
				}
				tools := sandboxtool.New(sess, sandboxtool.Options{})
				defer tools.Close(context.Background())
				var names []string
				for i := range n {
					names = append(names, fmt.Sprintf("src/d%d/f%d", i/100, i))
				}
				if noise {
					for i := range 20000 {
						names = append(names, fmt.Sprintf("node_modules/m%d/f%d", i/100, i))
					}
				}
				if err := sess.RestoreWorkspace(b.Context(), emptyFiles(b, names)); err != nil {
					b.Fatal(err)
				}
				exec := func() {
					_, err := tools.ExecCommand().Call(b.Context(), agent.ToolCall{ID: "c", Name: "exec_command", Arguments: `{"cmd": "true"}`, Emit: func(agent.Event) {}})
					if err != nil {
						b.Fatal(err)
					}
				}
				exec() // the baseline
				b.ResetTimer()
				for range b.N {
					exec()
				}
			})
		}
	}
}

// emptyFiles is a tar stream of empty files with these names.
func emptyFiles(b *testing.B, names []string) io.Reader {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Typeflag: tar.TypeReg}); err != nil {
			b.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		b.Fatal(err)
	}
	return &buf
}

// Parallel calls: each file is reported once, by one of them. Each call
// makes its file in one step (an empty file, made by one open): a file
// written after it is made can be listed in between by the other call's
// end, and then it was truly created there and updated after.
func TestFileChangesParallelCalls(t *testing.T) {
	t.Parallel()
	tools, _ := newHostTools(t, sandboxtool.Options{})
	execCmd(t, tools, "true")
	var wg sync.WaitGroup
	results := make([]result, 2)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = call(t, tools.ExecCommand(), fmt.Sprintf(`{"cmd": "sleep 0.2; : > f%d.txt"}`, i))
		}()
	}
	wg.Wait()
	var got []string
	for _, r := range results {
		if r.err != nil {
			t.Fatal(r.err)
		}
		for _, c := range changesOf(t, r) {
			got = append(got, c.Action+" "+c.Path)
		}
	}
	slices.Sort(got)
	if want := []string{"created f0.txt", "created f1.txt"}; !slices.Equal(got, want) {
		t.Errorf("file changes of two parallel calls: got %q, want %q", got, want)
	}
}
