package applypatch

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// memFS is an in-memory FS. It can be told to fail a write or a removal of
// one path, and it records every path it is asked about, so tests can check
// that a bad path never reached it.
type memFS struct {
	// mu guards the fields below.
	mu         sync.Mutex
	files      map[string]string
	failWrite  string // WriteFile of this path fails
	failRemove string // Remove of this path fails
	failUndo   bool   // once a write has failed, every call fails
	failed     bool
	touched    []string
}

var _ FS = (*memFS)(nil)

var errInjected = errors.New("injected failure")

func newMemFS(files map[string]string) *memFS {
	m := &memFS{files: map[string]string{}}
	maps.Copy(m.files, files)
	return m
}

func (m *memFS) ReadFile(ctx context.Context, path string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.touched = append(m.touched, path)
	s, ok := m.files[path]
	if !ok {
		return nil, fmt.Errorf("open %s: %w", path, fs.ErrNotExist)
	}
	return []byte(s), nil
}

func (m *memFS) WriteFile(ctx context.Context, path string, data []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.touched = append(m.touched, path)
	if path == m.failWrite || (m.failUndo && m.failed) {
		m.failed = true
		return errInjected
	}
	m.files[path] = string(data)
	return nil
}

func (m *memFS) Remove(ctx context.Context, path string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.touched = append(m.touched, path)
	if path == m.failRemove || (m.failUndo && m.failed) {
		m.failed = true
		return errInjected
	}
	if _, ok := m.files[path]; !ok {
		return fmt.Errorf("remove %s: %w", path, fs.ErrNotExist)
	}
	delete(m.files, path)
	return nil
}

func (m *memFS) snapshot() map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.files)
}

func TestApply(t *testing.T) {
	tests := []struct {
		name        string
		files       map[string]string
		patch       string
		want        map[string]string
		wantSummary string
		wantActions []Action
	}{
		{
			name:        "add",
			files:       map[string]string{},
			patch:       patch("*** Begin Patch", "*** Add File: dir/new.txt", "+one", "+", "+three", "*** End Patch"),
			want:        map[string]string{"dir/new.txt": "one\n\nthree\n"},
			wantSummary: "Created dir/new.txt",
			wantActions: []Action{ActionCreated},
		},
		{
			name:        "add empty file",
			files:       map[string]string{},
			patch:       patch("*** Begin Patch", "*** Add File: pkg/__init__.py", "*** End Patch"),
			want:        map[string]string{"pkg/__init__.py": ""},
			wantSummary: "Created pkg/__init__.py",
			wantActions: []Action{ActionCreated},
		},
		{
			name:        "delete",
			files:       map[string]string{"a.txt": "x\n", "b.txt": "y\n"},
			patch:       patch("*** Begin Patch", "*** Delete File: a.txt", "*** End Patch"),
			want:        map[string]string{"b.txt": "y\n"},
			wantSummary: "Deleted a.txt",
			wantActions: []Action{ActionDeleted},
		},
		{
			name:        "update exact",
			files:       map[string]string{"f.py": "import os\n\ndef f():\n    return 1\n"},
			patch:       patch("*** Begin Patch", "*** Update File: f.py", "@@", " def f():", "-    return 1", "+    return 2", "*** End Patch"),
			want:        map[string]string{"f.py": "import os\n\ndef f():\n    return 2\n"},
			wantSummary: "Updated f.py",
			wantActions: []Action{ActionUpdated},
		},
		{
			name:        "update matching trailing white space loosely keeps the file's context lines",
			files:       map[string]string{"f": "a  \nb\t\nc\n"},
			patch:       patch("*** Begin Patch", "*** Update File: f", "@@", " a", "-b", "+B", " c", "*** End Patch"),
			want:        map[string]string{"f": "a  \nB\nc\n"},
			wantSummary: "Updated f",
			wantActions: []Action{ActionUpdated},
		},
		{
			name:        "update matching indentation loosely",
			files:       map[string]string{"f.go": "func f() {\n\t\tx := 1\n\t\treturn x\n}\n"},
			patch:       patch("*** Begin Patch", "*** Update File: f.go", "@@", "     x := 1", "-    return x", "+\t\treturn x + 1", "*** End Patch"),
			want:        map[string]string{"f.go": "func f() {\n\t\tx := 1\n\t\treturn x + 1\n}\n"},
			wantSummary: "Updated f.go",
			wantActions: []Action{ActionUpdated},
		},
		{
			name:        "update matching typographic punctuation loosely",
			files:       map[string]string{"doc.md": "He said \u201chi\u201d \u2014 twice.\nend\n"},
			patch:       patch("*** Begin Patch", "*** Update File: doc.md", "@@", `-He said "hi" - twice.`, `+He said "hello".`, " end", "*** End Patch"),
			want:        map[string]string{"doc.md": "He said \"hello\".\nend\n"},
			wantSummary: "Updated doc.md",
			wantActions: []Action{ActionUpdated},
		},
		{
			name:  "a stricter level anywhere wins over a looser one earlier",
			files: map[string]string{"f": "  x\nx\n"},
			patch: patch("*** Begin Patch", "*** Update File: f", "@@", "-x", "+y", "*** End Patch"),
			want:  map[string]string{"f": "  x\ny\n"},
			// The exact match on line 2 is taken over the trimmed one on line 1.
			wantSummary: "Updated f",
			wantActions: []Action{ActionUpdated},
		},
		{
			name:  "several hunks in order",
			files: map[string]string{"f": "a\nb\nc\nd\ne\nf\ng\nh\n"},
			patch: patch("*** Begin Patch", "*** Update File: f",
				"@@", " a", "-b", "+B", " c",
				"@@", " f", "-g", "+G", "+G2",
				"*** End Patch"),
			want:        map[string]string{"f": "a\nB\nc\nd\ne\nf\nG\nG2\nh\n"},
			wantSummary: "Updated f",
			wantActions: []Action{ActionUpdated},
		},
		{
			name:  "a later hunk searches after the earlier one",
			files: map[string]string{"f": "x = 1\ny\nx = 1\nz\n"},
			patch: patch("*** Begin Patch", "*** Update File: f",
				"@@", "-x = 1", "+x = 2", " y",
				"@@", "-x = 1", "+x = 3",
				"*** End Patch"),
			want:        map[string]string{"f": "x = 2\ny\nx = 3\nz\n"},
			wantSummary: "Updated f",
			wantActions: []Action{ActionUpdated},
		},
		{
			name: "anchor seeks forward to the function",
			files: map[string]string{"f.py": "def a():\n    return 0\n\n" +
				"def b():\n    return 0\n"},
			patch:       patch("*** Begin Patch", "*** Update File: f.py", "@@ def b():", "-    return 0", "+    return 1", "*** End Patch"),
			want:        map[string]string{"f.py": "def a():\n    return 0\n\ndef b():\n    return 1\n"},
			wantSummary: "Updated f.py",
			wantActions: []Action{ActionUpdated},
		},
		{
			name: "stacked anchors narrow the search",
			files: map[string]string{"s.py": "class First\n    def target():\n        pass\n\n" +
				"class Second\n    def helper():\n        pass\n\n    def target():\n        pass\n"},
			patch: patch("*** Begin Patch", "*** Update File: s.py", "@@ class Second", "@@     def target():", "-        pass", "+        return 1", "*** End Patch"),
			want: map[string]string{"s.py": "class First\n    def target():\n        pass\n\n" +
				"class Second\n    def helper():\n        pass\n\n    def target():\n        return 1\n"},
			wantSummary: "Updated s.py",
			wantActions: []Action{ActionUpdated},
		},
		{
			name:  "a repeated anchor stays in the same function",
			files: map[string]string{"f.py": "def f():\n    a = 1\n    b = 2\n    c = 3\n    d = 4\n"},
			patch: patch("*** Begin Patch", "*** Update File: f.py",
				"@@ def f():", "-    a = 1", "+    a = 10",
				"@@ def f():", "-    d = 4", "+    d = 40",
				"*** End Patch"),
			want:        map[string]string{"f.py": "def f():\n    a = 10\n    b = 2\n    c = 3\n    d = 40\n"},
			wantSummary: "Updated f.py",
			wantActions: []Action{ActionUpdated},
		},
		{
			name:        "addition under an anchor goes right after it",
			files:       map[string]string{"f.py": "import os\nimport sys\n\nx = 1\n"},
			patch:       patch("*** Begin Patch", "*** Update File: f.py", "@@ import sys", "+import re", "*** End Patch"),
			want:        map[string]string{"f.py": "import os\nimport sys\nimport re\n\nx = 1\n"},
			wantSummary: "Updated f.py",
			wantActions: []Action{ActionUpdated},
		},
		{
			name:        "addition without context appends",
			files:       map[string]string{"log": "one\ntwo\n"},
			patch:       patch("*** Begin Patch", "*** Update File: log", "@@", "+three", "*** End Patch"),
			want:        map[string]string{"log": "one\ntwo\nthree\n"},
			wantSummary: "Updated log",
			wantActions: []Action{ActionUpdated},
		},
		{
			name:        "EOF anchors at the end, not at an earlier match",
			files:       map[string]string{"f": "end\nmiddle\nend\n"},
			patch:       patch("*** Begin Patch", "*** Update File: f", "@@", "-end", "+END", "*** End of File", "*** End Patch"),
			want:        map[string]string{"f": "end\nmiddle\nEND\n"},
			wantSummary: "Updated f",
			wantActions: []Action{ActionUpdated},
		},
		{
			name:        "EOF with context",
			files:       map[string]string{"tail.txt": "one\ntwo\nthree\n"},
			patch:       patch("*** Begin Patch", "*** Update File: tail.txt", "@@", " two", "-three", "+four", "*** End of File", "*** End Patch"),
			want:        map[string]string{"tail.txt": "one\ntwo\nfour\n"},
			wantSummary: "Updated tail.txt",
			wantActions: []Action{ActionUpdated},
		},
		{
			name:        "file without a trailing newline keeps none",
			files:       map[string]string{"f": "a\nb"},
			patch:       patch("*** Begin Patch", "*** Update File: f", "@@", " b", "+c", "*** End of File", "*** End Patch"),
			want:        map[string]string{"f": "a\nb\nc"},
			wantSummary: "Updated f",
			wantActions: []Action{ActionUpdated},
		},
		{
			name:        "trailing blank context line standing for the final newline",
			files:       map[string]string{"f": "a\nb\n"},
			patch:       patch("*** Begin Patch", "*** Update File: f", "@@", " a", "-b", "+c", " ", "", "*** End Patch"),
			want:        map[string]string{"f": "a\nc\n"},
			wantSummary: "Updated f",
			wantActions: []Action{ActionUpdated},
		},
		{
			name:        "CRLF file keeps CRLF",
			files:       map[string]string{"w.txt": "one\r\ntwo\r\nthree\r\n"},
			patch:       patch("*** Begin Patch", "*** Update File: w.txt", "@@", " one", "-two", "+2", "*** End Patch"),
			want:        map[string]string{"w.txt": "one\r\n2\r\nthree\r\n"},
			wantSummary: "Updated w.txt",
			wantActions: []Action{ActionUpdated},
		},
		{
			name:        "CRLF patch on LF file",
			files:       map[string]string{"f": "one\ntwo\n"},
			patch:       strings.ReplaceAll(patch("*** Begin Patch", "*** Update File: f", "@@", "-two", "+2", "*** Add File: g", "+x", "*** End Patch"), "\n", "\r\n"),
			want:        map[string]string{"f": "one\n2\n", "g": "x\n"},
			wantSummary: "Updated f\nCreated g",
			wantActions: []Action{ActionUpdated, ActionCreated},
		},
		{
			name:        "update an empty file",
			files:       map[string]string{"e": ""},
			patch:       patch("*** Begin Patch", "*** Update File: e", "@@", "+first", "*** End Patch"),
			want:        map[string]string{"e": "first\n"},
			wantSummary: "Updated e",
			wantActions: []Action{ActionUpdated},
		},
		{
			name:        "remove every line",
			files:       map[string]string{"f": "a\nb\n"},
			patch:       patch("*** Begin Patch", "*** Update File: f", "@@", "-a", "-b", "*** End Patch"),
			want:        map[string]string{"f": ""},
			wantSummary: "Updated f",
			wantActions: []Action{ActionUpdated},
		},
		{
			name:        "move with change",
			files:       map[string]string{"src/app.py": "print(\"Hi\")\n"},
			patch:       patch("*** Begin Patch", "*** Update File: src/app.py", "*** Move to: src/main.py", "@@", "-print(\"Hi\")", "+print(\"Hello\")", "*** End Patch"),
			want:        map[string]string{"src/main.py": "print(\"Hello\")\n"},
			wantSummary: "Updated src/app.py\nMoved src/app.py to src/main.py",
			wantActions: []Action{ActionMoved},
		},
		{
			name:        "pure move",
			files:       map[string]string{"a": "keep\n"},
			patch:       patch("*** Begin Patch", "*** Update File: a", "*** Move to: b/c", "*** End Patch"),
			want:        map[string]string{"b/c": "keep\n"},
			wantSummary: "Updated a\nMoved a to b/c",
			wantActions: []Action{ActionMoved},
		},
		{
			name:        "move to the same path is an update",
			files:       map[string]string{"a": "x\n"},
			patch:       patch("*** Begin Patch", "*** Update File: a", "*** Move to: ./a", "@@", "-x", "+y", "*** End Patch"),
			want:        map[string]string{"a": "y\n"},
			wantSummary: "Updated a",
			wantActions: []Action{ActionUpdated},
		},
		{
			name:  "operations see earlier ones",
			files: map[string]string{"old": "o\n"},
			patch: patch("*** Begin Patch",
				"*** Add File: n", "+1",
				"*** Update File: n", "@@", " 1", "+2",
				"*** Delete File: old",
				"*** Add File: old", "+fresh",
				"*** End Patch"),
			want:        map[string]string{"n": "1\n2\n", "old": "fresh\n"},
			wantSummary: "Created n\nUpdated n\nDeleted old\nCreated old",
			wantActions: []Action{ActionCreated, ActionUpdated, ActionDeleted, ActionCreated},
		},
		{
			name:        "backslash path",
			files:       map[string]string{},
			patch:       patch("*** Begin Patch", `*** Add File: nested\new.txt`, "+hello", "*** End Patch"),
			want:        map[string]string{"nested/new.txt": "hello\n"},
			wantSummary: "Created nested/new.txt",
			wantActions: []Action{ActionCreated},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fsys := newMemFS(tt.files)
			summary, changes, err := Apply(context.Background(), fsys, tt.patch)
			if err != nil {
				t.Fatalf("Apply: got error %v, want none", err)
			}
			if summary != tt.wantSummary {
				t.Errorf("Apply: got summary %q, want %q", summary, tt.wantSummary)
			}
			var actions []Action
			for _, c := range changes {
				actions = append(actions, c.Action)
			}
			if diff := cmp.Diff(tt.wantActions, actions); diff != "" {
				t.Errorf("Apply: got actions differing (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.want, fsys.snapshot()); diff != "" {
				t.Errorf("Apply: got files differing (-want +got):\n%s", diff)
			}
		})
	}
}

func TestApplyErrors(t *testing.T) {
	files := map[string]string{
		"a.txt": "alpha\nbeta\n",
		"b.txt": "one\ntwo\nthree\n",
		"s.py":  "class Target\n    def helper():\n        pass\n",
		"bin":   "\xff\xfe\x00",
	}
	tests := []struct {
		name    string
		patch   string
		wantErr string
		// wantTouch is set when the FS must not have been asked about
		// anything (a path rejected before any read).
		wantUntouched bool
		wantIs        error
	}{
		{
			name:          "parent escape",
			patch:         patch("*** Begin Patch", "*** Add File: ok.txt", "+x", "*** Add File: ../x", "+x", "*** End Patch"),
			wantErr:       `line 4: path "../x" contains ".."`,
			wantUntouched: true,
		},
		{
			name:          "absolute",
			patch:         patch("*** Begin Patch", "*** Update File: a.txt", "@@", "-alpha", "*** Delete File: /etc/passwd", "*** End Patch"),
			wantErr:       `line 5: path "/etc/passwd" is absolute`,
			wantUntouched: true,
		},
		{
			name:          "escape through a subdirectory",
			patch:         patch("*** Begin Patch", "*** Delete File: a/../../b", "*** End Patch"),
			wantErr:       `contains ".."`,
			wantUntouched: true,
		},
		{
			name:          "NUL",
			patch:         patch("*** Begin Patch", "*** Add File: a\x00b", "+x", "*** End Patch"),
			wantErr:       "control character",
			wantUntouched: true,
		},
		{
			name:          "move target escapes",
			patch:         patch("*** Begin Patch", "*** Update File: a.txt", "*** Move to: ../../etc/cron.d/x", "@@", "-alpha", "*** End Patch"),
			wantErr:       `*** Move to: path "../../etc/cron.d/x" contains ".."`,
			wantUntouched: true,
		},
		{
			name:    "add existing",
			patch:   patch("*** Begin Patch", "*** Add File: a.txt", "+x", "*** End Patch"),
			wantErr: "line 2: *** Add File: a.txt: the file already exists",
			wantIs:  fs.ErrExist,
		},
		{
			name:    "update missing",
			patch:   patch("*** Begin Patch", "*** Update File: nope.txt", "@@", "-old", "+new", "*** End Patch"),
			wantErr: "*** Update File: nope.txt: no such file; use *** Add File: to create it",
			wantIs:  fs.ErrNotExist,
		},
		{
			name:    "delete missing",
			patch:   patch("*** Begin Patch", "*** Delete File: nope.txt", "*** End Patch"),
			wantErr: "*** Delete File: nope.txt: no such file",
			wantIs:  fs.ErrNotExist,
		},
		{
			name:    "delete twice",
			patch:   patch("*** Begin Patch", "*** Delete File: a.txt", "*** Delete File: a.txt", "*** End Patch"),
			wantErr: "line 3: *** Delete File: a.txt: no such file",
		},
		{
			name:    "move onto an existing file",
			patch:   patch("*** Begin Patch", "*** Update File: a.txt", "*** Move to: b.txt", "@@", "-alpha", "*** End Patch"),
			wantErr: "*** Move to: b.txt: the file already exists",
			wantIs:  fs.ErrExist,
		},
		{
			name:    "context not found",
			patch:   patch("*** Begin Patch", "*** Update File: a.txt", "@@", " missing", "-beta", "+gamma", "*** End Patch"),
			wantErr: "line 3: *** Update File: a.txt: could not find the hunk's context and removed lines, even ignoring white space; re-read the file and copy the lines exactly. Expected:\nmissing\nbeta",
		},
		{
			name: "hunks out of order",
			patch: patch("*** Begin Patch", "*** Update File: b.txt",
				"@@", "-three", "+3",
				"@@", "-one", "+1",
				"*** End Patch"),
			wantErr: "line 6: *** Update File: b.txt: could not find the hunk's context and removed lines after line 3, even ignoring white space; they are at line 1, before the previous hunk or @@ header: hunks must be in file order",
		},
		{
			name:    "EOF context not at the end",
			patch:   patch("*** Begin Patch", "*** Update File: b.txt", "@@", "-two", "+2", "*** End of File", "*** End Patch"),
			wantErr: `the hunk's context and removed lines are not the last lines of the file, as "*** End of File" says; they are at line 2`,
		},
		{
			name:    "anchor not found",
			patch:   patch("*** Begin Patch", "*** Update File: s.py", "@@ def missing():", "-        pass", "+        return 1", "*** End Patch"),
			wantErr: `could not find the line "def missing():" of the "@@ def missing():" header`,
		},
		{
			name:    "stacked anchor not found after the first",
			patch:   patch("*** Begin Patch", "*** Update File: s.py", "@@ class Target", "@@     def desired():", "-        pass", "+        return 99", "*** End Patch"),
			wantErr: `could not find the line "    def desired():" of the "@@     def desired():" header after line 1`,
		},
		{
			name:    "binary file",
			patch:   patch("*** Begin Patch", "*** Update File: bin", "@@", "+x", "*** End Patch"),
			wantErr: "the file is not UTF-8 text",
		},
		{
			name:    "parse error",
			patch:   patch("*** Begin Patch", "*** Update File: a.txt", "oops", "*** End Patch"),
			wantErr: `line 3: unexpected line "oops"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fsys := newMemFS(files)
			summary, changes, err := Apply(context.Background(), fsys, tt.patch)
			if err == nil {
				t.Fatalf("Apply: got %q, %+v, want an error", summary, changes)
			}
			if !errors.Is(err, ErrPatch) {
				t.Errorf("Apply: got error %v, want one matching ErrPatch", err)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("Apply: got error %v, want one matching %v", err, tt.wantIs)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Apply: got error\n%s\nwant it to contain\n%s", err, tt.wantErr)
			}
			if diff := cmp.Diff(files, fsys.snapshot()); diff != "" {
				t.Errorf("Apply: a failed patch changed files (-before +after):\n%s", diff)
			}
			if tt.wantUntouched && len(fsys.touched) > 0 {
				t.Errorf("Apply: got FS calls for %q, want none before the paths are checked", fsys.touched)
			}
		})
	}
}

// TestApplyAtomic checks that a patch whose second operation fails, in
// checking or in writing, leaves the first one's file as it was.
func TestApplyAtomic(t *testing.T) {
	before := map[string]string{"one.txt": "1\n", "two.txt": "2\n", "gone.txt": "g\n"}
	p := patch("*** Begin Patch",
		"*** Update File: one.txt", "@@", "-1", "+uno",
		"*** Add File: new.txt", "+n",
		"*** Update File: two.txt", "@@", "-2", "+dos",
		"*** Delete File: gone.txt",
		"*** End Patch")
	tests := []struct {
		name     string
		setup    func(*memFS)
		patch    string
		wantErr  string
		wantFS   bool // the error is the FS's, not the patch's
		wantLeft map[string]string
	}{
		{
			name:     "second hunk does not match",
			patch:    strings.Replace(p, "-2", "-20", 1),
			wantErr:  "could not find",
			wantLeft: before,
		},
		{
			name:     "write of the third file fails",
			setup:    func(m *memFS) { m.failWrite = "two.txt" },
			patch:    p,
			wantErr:  `writing "two.txt": injected failure`,
			wantFS:   true,
			wantLeft: before,
		},
		{
			name:     "removal fails after the writes",
			setup:    func(m *memFS) { m.failRemove = "gone.txt" },
			patch:    p,
			wantErr:  `removing "gone.txt": injected failure`,
			wantFS:   true,
			wantLeft: before,
		},
		{
			name:    "undo fails too",
			setup:   func(m *memFS) { m.failWrite = "two.txt"; m.failUndo = true },
			patch:   p,
			wantErr: `undoing the partial patch failed, files may be left half-patched: restoring "new.txt": injected failure`,
			wantFS:  true,
			// The FS refused everything after the first failure: the first
			// two writes stay, which the error says.
			wantLeft: map[string]string{"one.txt": "uno\n", "new.txt": "n\n", "two.txt": "2\n", "gone.txt": "g\n"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fsys := newMemFS(before)
			if tt.setup != nil {
				tt.setup(fsys)
			}
			_, _, err := Apply(context.Background(), fsys, tt.patch)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Apply: got error %v, want one containing %q", err, tt.wantErr)
			}
			if got := errors.Is(err, ErrPatch); got == tt.wantFS {
				t.Errorf("Apply: got errors.Is(err, ErrPatch) = %v, want %v", got, !tt.wantFS)
			}
			if tt.wantFS && !errors.Is(err, errInjected) {
				t.Errorf("Apply: got error %v, want it to wrap the FS's error", err)
			}
			if diff := cmp.Diff(tt.wantLeft, fsys.snapshot()); diff != "" {
				t.Errorf("Apply: got files differing (-want +got):\n%s", diff)
			}
		})
	}
}

func TestApplyCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	fsys := newMemFS(map[string]string{"a": "x\n"})
	_, _, err := Apply(ctx, fsys, patch("*** Begin Patch", "*** Update File: a", "@@", "-x", "+y", "*** End Patch"))
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrPatch) {
		t.Errorf("Apply: got error %v, want context.Canceled and not ErrPatch", err)
	}
	if got := fsys.snapshot()["a"]; got != "x\n" {
		t.Errorf("Apply: got a = %q after a cancelled apply, want it unchanged", got)
	}
}

func TestChangesDiff(t *testing.T) {
	files := map[string]string{
		"f":     "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n13\n14\n15\n16\n",
		"nonl":  "a\nb",
		"old":   "x\ny\n",
		"mv":    "m\n",
		"same":  "s\n",
		"empty": "",
	}
	tests := []struct {
		name  string
		patch string
		want  []Change
	}{
		{
			name: "two hunks far apart, and one close by merged",
			patch: patch("*** Begin Patch", "*** Update File: f",
				"@@", "-2", "+two",
				"@@", "-8", "+eight",
				"@@", "-16", "+sixteen",
				"*** End Patch"),
			want: []Change{{Action: ActionUpdated, Path: "f", Diff: "--- a/f\n+++ b/f\n" +
				"@@ -1,11 +1,11 @@\n 1\n-2\n+two\n 3\n 4\n 5\n 6\n 7\n-8\n+eight\n 9\n 10\n 11\n" +
				"@@ -13,4 +13,4 @@\n 13\n 14\n 15\n-16\n+sixteen\n"}},
		},
		{
			name:  "no newline at end of file",
			patch: patch("*** Begin Patch", "*** Update File: nonl", "@@", " b", "+c", "*** End of File", "*** End Patch"),
			want: []Change{{Action: ActionUpdated, Path: "nonl", Diff: "--- a/nonl\n+++ b/nonl\n" +
				"@@ -1,2 +1,3 @@\n a\n-b\n\\ No newline at end of file\n+b\n+c\n\\ No newline at end of file\n"}},
		},
		{
			name: "add, delete, move, unchanged",
			patch: patch("*** Begin Patch",
				"*** Add File: new", "+n1", "+n2",
				"*** Delete File: old",
				"*** Update File: mv", "*** Move to: moved",
				"*** Update File: same", "@@", " s",
				"*** Add File: blank",
				"*** End Patch"),
			want: []Change{
				{Action: ActionCreated, Path: "new", Diff: "--- /dev/null\n+++ b/new\n@@ -0,0 +1,2 @@\n+n1\n+n2\n"},
				{Action: ActionDeleted, Path: "old", Diff: "--- a/old\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-x\n-y\n"},
				{Action: ActionMoved, Path: "mv", NewPath: "moved", Diff: "--- a/mv\n+++ b/moved\n"},
				{Action: ActionUpdated, Path: "same"},
				{Action: ActionCreated, Path: "blank", Diff: "--- /dev/null\n+++ b/blank\n"},
			},
		},
		{
			name:  "insertion into an empty file",
			patch: patch("*** Begin Patch", "*** Update File: empty", "@@", "+e", "*** End Patch"),
			want:  []Change{{Action: ActionUpdated, Path: "empty", Diff: "--- a/empty\n+++ b/empty\n@@ -0,0 +1 @@\n+e\n"}},
		},
		{
			name:  "insertion in the middle",
			patch: patch("*** Begin Patch", "*** Update File: f", "@@ 9", "+9.5", "*** End Patch"),
			want: []Change{{Action: ActionUpdated, Path: "f", Diff: "--- a/f\n+++ b/f\n" +
				"@@ -7,6 +7,7 @@\n 7\n 8\n 9\n+9.5\n 10\n 11\n 12\n"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fsys := newMemFS(files)
			preview, err := Preview(context.Background(), fsys, tt.patch)
			if err != nil {
				t.Fatalf("Preview: got error %v, want none", err)
			}
			if diff := cmp.Diff(files, fsys.snapshot()); diff != "" {
				t.Errorf("Preview: changed files (-before +after):\n%s", diff)
			}
			_, changes, err := Apply(context.Background(), fsys, tt.patch)
			if err != nil {
				t.Fatalf("Apply: got error %v, want none", err)
			}
			if diff := cmp.Diff(tt.want, changes); diff != "" {
				t.Errorf("Apply: got changes differing (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(changes, preview); diff != "" {
				t.Errorf("Preview: got changes differing from Apply's (-apply +preview):\n%s", diff)
			}
		})
	}
}
