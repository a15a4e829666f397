package workspace

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cove-sandbox/cove/agent"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/sandboxtest/fake"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// newSession returns a fake sandbox whose workspace holds files (path
// relative to the root -> content; a path ending in / is an empty
// directory).
func newSession(t *testing.T, files map[string]string) sandbox.Session {
	t.Helper()
	ctx := context.Background()
	sess, err := fake.New().Create(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	for p, content := range files {
		if strings.HasSuffix(p, "/") {
			err = sess.Mkdir(ctx, p)
		} else {
			err = sess.WriteFile(ctx, p, strings.NewReader(content), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return sess
}

// golden compares got with testdata/name.golden, or rewrites the file
// under -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	p := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(p, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s differs (-want +got):\n%s\nIf the change is intended, run go test -update.", p, diff)
	}
}

// project is a small repository-like workspace used by several tests.
func project() map[string]string {
	return map[string]string{
		"AGENTS.md":                      "# Project\n\nRun `make test` before finishing.\n",
		"README.md":                      "hello\n",
		"go.mod":                         "module example.com/p\n",
		".git/HEAD":                      "ref: refs/heads/main\n",
		".git/objects/ab/cdef":           "blob",
		"pkg/AGENTS.md":                  "Package code: no globals.\n",
		"pkg/api/AGENTS.md":              "The API package keeps its JSON names stable.\n",
		"pkg/api/api.go":                 "package api\n",
		"pkg/api/v1/deep/too_deep.go":    "package deep\n",
		"pkg/util/util.go":               "package util\n",
		"docs/":                          "",
		".agents/review/SKILL.md":        "---\nname: review\ndescription: Review a change for bugs and style.\n---\nRead the diff, then the tests.\n",
		".agents/review/scripts/lint":    "#!/bin/sh\n",
		".agents/skills/deploy/SKILL.md": "---\nname: deploy\ndescription: \"Ship the service: build, push, roll out.\"\n---\nSteps.\n",
	}
}

func TestInstructionsGolden(t *testing.T) {
	many := map[string]string{}
	for _, d := range []string{"a", "b", "c"} {
		for _, f := range []string{"1", "2", "3", "4", "5", "6"} {
			many[d+"/"+f+".txt"] = f
		}
	}
	for _, f := range []string{"x", "y", "z", "w"} {
		many[f] = f
	}
	tests := []struct {
		name  string
		files map[string]string
		opts  Options
	}{
		{name: "default", files: project()},
		{name: "workdir", files: project(), opts: Options{Workdir: "pkg/api"}},
		{
			name:  "agent_no_capabilities",
			files: project(),
			opts:  Options{AgentInstructions: "You review Go code.", Capabilities: []Capability{}},
		},
		{name: "bounded", files: many, opts: Options{TreeEntries: 9, TreeDirEntries: 3}},
		{name: "empty", files: nil, opts: Options{Capabilities: []Capability{CapabilityShell, "compaction"}}},
		{
			name:  "agents_budget",
			files: project(),
			opts:  Options{Workdir: "pkg/api", AgentsFileBytes: 20, AgentsTotalBytes: 30, Capabilities: []Capability{}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sess := newSession(t, tt.files)
			got, err := Instructions(context.Background(), sess, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, "instructions_"+tt.name, got)
		})
	}
}

// TestInstructionsContent checks the properties the golden files show, so
// an -update cannot quietly lose them.
func TestInstructionsContent(t *testing.T) {
	sess := newSession(t, project())
	got, err := Instructions(context.Background(), sess, Options{Workdir: "/workspace/pkg/api"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"sandboxed Linux workspace at /workspace",
		"├── .git/\n",       // the .git directory is shown...
		"    │   └── v1/\n", // ...depth 3 is reached...
		"- review: Review a change for bugs and style. (/workspace/.agents/review/SKILL.md)",
		"- deploy: Ship the service: build, push, roll out. (/workspace/.agents/skills/deploy/SKILL.md)",
		"`load_skill`",
		"Your working directory is `/workspace/pkg/api`",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("instructions lack %q", want)
		}
	}
	for _, unwanted := range []string{"HEAD", "objects", "too_deep.go", "deep/"} {
		if strings.Contains(got, unwanted) {
			t.Errorf("instructions hold %q: .git contents and entries below depth 3 must not be shown", unwanted)
		}
	}
	// AGENTS.md from the root down to the working directory, in order.
	var order []int
	for _, h := range []string{"## /workspace/AGENTS.md", "## /workspace/pkg/AGENTS.md", "## /workspace/pkg/api/AGENTS.md"} {
		i := strings.Index(got, h)
		if i < 0 {
			t.Fatalf("instructions lack the heading %q", h)
		}
		order = append(order, i)
	}
	if !(order[0] < order[1] && order[1] < order[2]) {
		t.Errorf("AGENTS.md headings at %v, want root first, then pkg, then pkg/api", order)
	}
	if strings.Contains(got, "Run `make test`") == false || !strings.Contains(got, "keeps its JSON names stable") {
		t.Errorf("AGENTS.md contents missing")
	}
}

func TestInstructionsErrors(t *testing.T) {
	sess := newSession(t, nil)
	for _, opts := range []Options{
		{Workdir: "../etc"},
		{Root: "workspace"},
	} {
		if _, err := Instructions(context.Background(), sess, opts); err == nil {
			t.Errorf("Instructions(%+v) = nil error, want one", opts)
		}
	}
}

func TestTreeBounds(t *testing.T) {
	files := map[string]string{}
	for i := range 50 {
		files["d/"+string(rune('a'+i%26))+string(rune('a'+i/26))] = ""
	}
	files["top.txt"] = ""
	sess := newSession(t, files)
	got, err := renderTree(context.Background(), sess, "/workspace", treeLimits{depth: 3, entries: 10, dirEntries: 100})
	if err != nil {
		t.Fatal(err)
	}
	// Breadth first: both top-level entries, then 8 of d's 50.
	lines := strings.Split(strings.TrimSpace(got), "\n")
	if n := len(lines); n != 1+2+8+1 {
		t.Errorf("tree has %d lines, want 12 (root, 10 entries, one marker):\n%s", n, got)
	}
	if !strings.Contains(got, "└── ... (42 more)") || !strings.Contains(got, "└── top.txt") {
		t.Errorf("tree lacks the marker or top.txt:\n%s", got)
	}
}

func TestParseFrontmatter(t *testing.T) {
	tests := []struct {
		name     string
		text     string
		want     map[string]string
		wantBody string
		wantErr  string
	}{
		{
			name:     "simple",
			text:     "---\nname: pdf\ndescription: Fill PDF forms\n---\n# PDF\nbody\n",
			want:     map[string]string{"name": "pdf", "description": "Fill PDF forms"},
			wantBody: "# PDF\nbody\n",
		},
		{
			name: "quotes comments crlf",
			text: "\uFEFF---\r\n# a comment\r\nname: 'it''s'\r\ndescription: \"a: \\\"b\\\"\"\r\n---\r\nbody",
			want: map[string]string{"name": "it's", "description": `a: "b"`},

			wantBody: "body",
		},
		{
			name: "folded and continued",
			text: "---\nname: x\ndescription: >\n  one\n  two\nlicense: MIT\n  and more\n---\n",
			want: map[string]string{"name": "x", "description": "one two", "license": "MIT and more"},
		},
		{
			name: "literal block",
			text: "---\ndescription: |\n  one\n  two\n---\n",
			want: map[string]string{"description": "one\ntwo"},
		},
		{name: "missing", text: "# Just markdown\n", wantErr: "no frontmatter"},
		{name: "empty file", text: "", wantErr: "no frontmatter"},
		{name: "unclosed", text: "---\nname: x\n", wantErr: "not closed"},
		{name: "not key value", text: "---\nname: x\njust words\n---\n", wantErr: "line 3"},
		{name: "orphan indent", text: "---\n  indented\n---\n", wantErr: "continues no key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, body, err := parseFrontmatter(tt.text)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("fields (-want +got):\n%s", diff)
			}
			if body != tt.wantBody {
				t.Errorf("body %q, want %q", body, tt.wantBody)
			}
		})
	}
}

func TestSkills(t *testing.T) {
	sess := newSession(t, map[string]string{
		".agents/good/SKILL.md":         "---\nname: good\ndescription: Does good things.\n---\nbody\n",
		".agents/bare/SKILL.md":         "# No frontmatter\n",
		".agents/nodesc/SKILL.md":       "---\nname: quiet\n---\nbody\n",
		".agents/noname/SKILL.md":       "---\ndescription: Named by its folder.\n---\n",
		".agents/broken/SKILL.md":       "---\nname: broken\ndescription: x\n",
		".agents/notes/README.md":       "not a skill\n",
		".agents/config.toml":           "x = 1\n",
		".agents/skills/codex/SKILL.md": "---\nname: codex\ndescription: Codex layout.\n---\n",
		".agents/skills/good/SKILL.md":  "---\nname: good\ndescription: A second good.\n---\n",
		".agents/skills/dir/SKILL.md/x": "SKILL.md is a directory here\n",
	})
	got, skipped, err := Skills(context.Background(), sess)
	if err != nil {
		t.Fatal(err)
	}
	want := []Skill{
		{Name: "codex", Description: "Codex layout.", Path: "/workspace/.agents/skills/codex/SKILL.md"},
		{Name: "good", Description: "Does good things.", Path: "/workspace/.agents/good/SKILL.md"},
		{Name: "noname", Description: "Named by its folder.", Path: "/workspace/.agents/noname/SKILL.md"},
		{Name: "quiet", Description: noDescription, Path: "/workspace/.agents/nodesc/SKILL.md"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("skills (-want +got):\n%s", diff)
	}
	wantSkipped := map[string]string{
		"/workspace/.agents/bare/SKILL.md":        "no frontmatter",
		"/workspace/.agents/broken/SKILL.md":      "not closed",
		"/workspace/.agents/skills/good/SKILL.md": "already taken by /workspace/.agents/good/SKILL.md",
		"/workspace/.agents/skills/dir/SKILL.md":  "directory",
	}
	if len(skipped) != len(wantSkipped) {
		t.Errorf("skipped %+v, want %d entries", skipped, len(wantSkipped))
	}
	for _, s := range skipped {
		if w, ok := wantSkipped[s.Path]; !ok || !strings.Contains(s.Reason, w) {
			t.Errorf("skipped %s: %q, want a reason containing %q", s.Path, s.Reason, w)
		}
	}

	t.Run("no skills", func(t *testing.T) {
		got, skipped, err := Skills(context.Background(), newSession(t, nil))
		if err != nil || got != nil || skipped != nil {
			t.Errorf("Skills(empty workspace) = %v, %v, %v; want nothing", got, skipped, err)
		}
	})
	t.Run("configured dir", func(t *testing.T) {
		got, _, err := Skills(context.Background(), sess, ".agents/skills")
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[0].Name != "codex" || got[1].Description != "A second good." {
			t.Errorf("Skills(.agents/skills) = %+v, want codex and the second good", got)
		}
	})
}

func TestLoadSkill(t *testing.T) {
	sess := newSession(t, map[string]string{
		".agents/review/SKILL.md":            "---\nname: code-review\ndescription: Review a change.\n---\n\n# Review\n\nRun scripts/lint first.\n",
		".agents/review/scripts/lint":        "#!/bin/sh\n",
		".agents/review/references/style.md": "style\n",
	})
	ctx := context.Background()
	skills, _, err := Skills(ctx, sess)
	if err != nil {
		t.Fatal(err)
	}
	tool := LoadSkill(sess, skills)
	if got := tool.Spec(); got.Name != "load_skill" || got.Parameters["required"].([]any)[0] != "skill_name" {
		t.Errorf("Spec() = %+v, want load_skill requiring skill_name", got)
	}
	wantOK := "# Skill: code-review\n\nFolder: /workspace/.agents/review (relative paths below are relative to it)\n\n" +
		"# Review\n\nRun scripts/lint first.\n\n## Other files in this skill\n\n- references/style.md\n- scripts/lint\n"
	tests := []struct {
		name    string
		args    string
		want    string
		wantErr string
	}{
		{name: "by name", args: `{"skill_name":"code-review"}`, want: wantOK},
		{name: "by folder", args: `{"skill_name":"review"}`, want: wantOK},
		{name: "dollar and name key", args: `{"name":"$code-review"}`, want: wantOK},
		{name: "unknown", args: `{"skill_name":"deploy"}`, wantErr: `no skill named "deploy"; the skills are: code-review`},
		{name: "bad json", args: `code-review`, wantErr: `load_skill takes {"skill_name": "<name>"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := tool.Call(ctx, agent.ToolCall{ID: "c1", Name: "load_skill", Arguments: tt.args, Emit: func(agent.Event) {}})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, agent.Text(res.Output)); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("no skills", func(t *testing.T) {
		_, err := LoadSkill(sess, nil).Call(ctx, agent.ToolCall{Arguments: `{"skill_name":"x"}`})
		if err == nil || !strings.Contains(err.Error(), "this workspace has no skills") {
			t.Errorf("error %v, want one saying there are no skills", err)
		}
	})
}
