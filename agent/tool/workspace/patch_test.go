package workspace

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/cove-sandbox/cove/agent"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/sandboxtest/fake"
)

// readAll returns the workspace's files (path relative to the root ->
// content), to check what a patch left behind.
func readAll(t *testing.T, sess sandbox.Session) map[string]string {
	t.Helper()
	ctx := context.Background()
	infos, err := sess.List(ctx, "", 16)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, fi := range infos {
		if fi.Type != sandbox.TypeFile {
			continue
		}
		rc, err := sess.ReadFile(ctx, fi.Path)
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimPrefix(fi.Path, "/workspace/")] = string(data)
	}
	return out
}

func mode(t *testing.T, sess sandbox.Session, p string) uint32 {
	t.Helper()
	fi, err := sess.Stat(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode
}

func TestApplyPatchSpec(t *testing.T) {
	got := ApplyPatch(newSession(t, nil)).Spec()
	if got.Name != "apply_patch" || got.Grammar == "" || !strings.Contains(got.Description, "*** Begin Patch") || got.Parameters != nil {
		t.Errorf("Spec() = %+v, want the freeform apply_patch tool with its grammar", got)
	}
}

func TestApplyPatch(t *testing.T) {
	base := map[string]string{
		"main.go":   "package main\n\nfunc main() {\n\tprintln(\"hi\")\n}\n",
		"old.txt":   "obsolete\n",
		"run.sh":    "#!/bin/sh\necho one\n",
		"README.md": "# Demo\n",
	}
	with := func(changes map[string]string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for k, v := range changes {
			if v == "" {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
		return m
	}
	tests := []struct {
		name       string
		args       string
		want       string // the output; "" when an error is wanted
		wantErr    string
		wantFiles  map[string]string
		wantEvents []agent.Event
	}{
		{
			name:      "add",
			args:      "*** Begin Patch\n*** Add File: docs/new.md\n+# New\n+text\n*** End Patch\n",
			want:      "Created docs/new.md",
			wantFiles: with(map[string]string{"docs/new.md": "# New\ntext\n"}),
			wantEvents: []agent.Event{{Type: agent.EventFileChanged, Path: "docs/new.md", Action: "created",
				Diff: "--- /dev/null\n+++ b/docs/new.md\n@@ -0,0 +1,2 @@\n+# New\n+text\n"}},
		},
		{
			name:      "update",
			args:      "*** Begin Patch\n*** Update File: main.go\n@@ func main() {\n-\tprintln(\"hi\")\n+\tprintln(\"hello\")\n }\n*** End Patch",
			want:      "Updated main.go",
			wantFiles: with(map[string]string{"main.go": "package main\n\nfunc main() {\n\tprintln(\"hello\")\n}\n"}),
			wantEvents: []agent.Event{{Type: agent.EventFileChanged, Path: "main.go", Action: "updated",
				Diff: "--- a/main.go\n+++ b/main.go\n@@ -1,5 +1,5 @@\n package main\n \n func main() {\n-\tprintln(\"hi\")\n+\tprintln(\"hello\")\n }\n"}},
		},
		{
			name:      "delete",
			args:      "*** Begin Patch\n*** Delete File: old.txt\n*** End Patch\n",
			want:      "Deleted old.txt",
			wantFiles: with(map[string]string{"old.txt": ""}),
			wantEvents: []agent.Event{{Type: agent.EventFileChanged, Path: "old.txt", Action: "deleted",
				Diff: "--- a/old.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-obsolete\n"}},
		},
		{
			name:      "move",
			args:      "*** Begin Patch\n*** Update File: run.sh\n*** Move to: bin/run.sh\n@@\n #!/bin/sh\n-echo one\n+echo two\n*** End Patch\n",
			want:      "Updated run.sh\nMoved run.sh to bin/run.sh",
			wantFiles: with(map[string]string{"run.sh": "", "bin/run.sh": "#!/bin/sh\necho two\n"}),
			wantEvents: []agent.Event{{Type: agent.EventFileChanged, Path: "bin/run.sh", Action: "moved",
				Diff: "--- a/run.sh\n+++ b/bin/run.sh\n@@ -1,2 +1,2 @@\n #!/bin/sh\n-echo one\n+echo two\n"}},
		},
		{
			name:      "several, wrapped in JSON input",
			args:      `{"input":"*** Begin Patch\n*** Add File: a.txt\n+a\n*** Delete File: README.md\n*** End Patch\n"}`,
			want:      "Created a.txt\nDeleted README.md",
			wantFiles: with(map[string]string{"a.txt": "a\n", "README.md": ""}),
			wantEvents: []agent.Event{
				{Type: agent.EventFileChanged, Path: "a.txt", Action: "created", Diff: "--- /dev/null\n+++ b/a.txt\n@@ -0,0 +1 @@\n+a\n"},
				{Type: agent.EventFileChanged, Path: "README.md", Action: "deleted", Diff: "--- a/README.md\n+++ /dev/null\n@@ -1 +0,0 @@\n-# Demo\n"},
			},
		},
		{
			name:      "JSON patch key",
			args:      `{"patch":"*** Begin Patch\n*** Add File: b.txt\n+b\n*** End Patch"}`,
			want:      "Created b.txt",
			wantFiles: with(map[string]string{"b.txt": "b\n"}),
			wantEvents: []agent.Event{
				{Type: agent.EventFileChanged, Path: "b.txt", Action: "created", Diff: "--- /dev/null\n+++ b/b.txt\n@@ -0,0 +1 @@\n+b\n"},
			},
		},
		{
			name:      "escape with ..",
			args:      "*** Begin Patch\n*** Add File: ok.txt\n+fine\n*** Add File: ../x\n+escaped\n*** End Patch\n",
			wantErr:   `"..`,
			wantFiles: base,
		},
		{
			name:      "absolute path",
			args:      "*** Begin Patch\n*** Add File: /etc/cron.d/x\n+escaped\n*** End Patch\n",
			wantErr:   "absolute",
			wantFiles: base,
		},
		{
			name:      "escape through a symlink",
			args:      "*** Begin Patch\n*** Add File: ok.txt\n+fine\n*** Add File: etc/x\n+escaped\n*** End Patch\n",
			wantErr:   "invalid argument",
			wantFiles: base,
		},
		{
			name:      "context not found",
			args:      "*** Begin Patch\n*** Add File: ok.txt\n+fine\n*** Update File: main.go\n@@\n-\tprintln(\"bye\")\n+\tprintln(\"x\")\n*** End Patch\n",
			wantErr:   "main.go",
			wantFiles: base,
		},
		{
			name:      "delete of a directory",
			args:      "*** Begin Patch\n*** Delete File: lib\n*** End Patch\n",
			wantErr:   "lib is a directory",
			wantFiles: base,
		},
		{
			name:      "update of a missing file",
			args:      "*** Begin Patch\n*** Update File: nope.go\n@@\n-a\n+b\n*** End Patch\n",
			wantErr:   "no such file",
			wantFiles: base,
		},
		{
			name:      "not a patch",
			args:      "please edit main.go",
			wantErr:   "*** Begin Patch",
			wantFiles: base,
		},
		{
			name:      "JSON without the patch",
			args:      `{"command":["apply_patch"]}`,
			wantErr:   `"input"`,
			wantFiles: base,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			sess := newSession(t, base)
			if err := sess.WriteFile(ctx, "run.sh", strings.NewReader(base["run.sh"]), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := sess.Mkdir(ctx, "lib"); err != nil {
				t.Fatal(err)
			}
			// A symlink out of the workspace: the session must refuse to
			// write through it.
			if err := sess.(*fake.Session).Symlink(ctx, "/etc", "etc"); err != nil {
				t.Fatal(err)
			}
			var events []agent.Event
			res, err := ApplyPatch(sess).Call(ctx, agent.ToolCall{ID: "call_1", Name: "apply_patch", Arguments: tt.args,
				Emit: func(e agent.Event) { events = append(events, e) }})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			} else if got := agent.Text(res.Output); got != tt.want {
				t.Errorf("output %q, want %q", got, tt.want)
			}
			if diff := cmp.Diff(tt.wantFiles, readAll(t, sess)); diff != "" {
				t.Errorf("files (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantEvents, events, cmpopts.IgnoreFields(agent.Event{}, "Time")); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			for _, e := range events {
				if e.Time.IsZero() {
					t.Errorf("event %+v has no time", e)
				}
			}
		})
	}
}

// TestApplyPatchModes checks that a patch keeps a script executable, when
// it is updated in place and when it is moved.
func TestApplyPatchModes(t *testing.T) {
	ctx := context.Background()
	sess := newSession(t, nil)
	if err := sess.WriteFile(ctx, "a.sh", strings.NewReader("echo a\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tool := ApplyPatch(sess)
	for _, patch := range []string{
		"*** Begin Patch\n*** Update File: a.sh\n@@\n-echo a\n+echo b\n*** End Patch\n",
		"*** Begin Patch\n*** Update File: a.sh\n*** Move to: bin/b.sh\n@@\n-echo b\n+echo c\n*** End Patch\n",
		"*** Begin Patch\n*** Add File: new.txt\n+x\n*** End Patch\n",
	} {
		if _, err := tool.Call(ctx, agent.ToolCall{Arguments: patch}); err != nil {
			t.Fatal(err)
		}
	}
	if got := mode(t, sess, "bin/b.sh"); got != 0o755 {
		t.Errorf("moved script mode %o, want 755", got)
	}
	if got := mode(t, sess, "new.txt"); got != 0o644 {
		t.Errorf("new file mode %o, want 644", got)
	}
}

// TestRiskAndView: under agent.ApproveRisky apply_patch and load_skill
// never wait (a patch stays in the workspace; a skill is only read), and
// a patch is shown as an edit.
func TestRiskAndView(t *testing.T) {
	sess := newSession(t, nil)
	for _, tool := range []agent.Tool{ApplyPatch(sess), LoadSkill(sess, nil)} {
		name := tool.Spec().Name
		if reason, need := agent.ApproveRisky(context.Background(), agent.ApprovalRequest{Tool: name, Arguments: "*** Begin Patch\n*** Delete File: /etc/passwd\n*** End Patch\n", Root: "/workspace", Handler: tool}); need {
			t.Errorf("ApproveRisky(%s) = %q, want no approval", name, reason)
		}
	}
	d, ok := ApplyPatch(sess).(agent.Describer)
	if !ok || d.Describe("*** Begin Patch\n") != (agent.CallView{Kind: agent.CallEdit}) {
		t.Errorf("apply_patch is not described as an edit")
	}
}
