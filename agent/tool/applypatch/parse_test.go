package applypatch

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// patch builds patch text from lines, so that leading spaces of context
// lines stay visible in the test source.
func patch(lines ...string) string { return strings.Join(lines, "\n") + "\n" }

func ctxLine(s string) HunkLine { return HunkLine{Kind: ' ', Text: s} }
func delLine(s string) HunkLine { return HunkLine{Kind: '-', Text: s} }
func addLine(s string) HunkLine { return HunkLine{Kind: '+', Text: s} }

// ignoreLines compares patches by content, not by where in the text they were.
var ignoreLines = cmp.Options{
	cmpopts.IgnoreFields(Op{}, "Line"),
	cmpopts.IgnoreFields(Hunk{}, "Line"),
	cmpopts.EquateEmpty(),
}

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		text string
		want *Patch
	}{
		{
			name: "add",
			text: patch("*** Begin Patch", "*** Add File: a/b.txt", "+hello", "+", "+ world", "*** End Patch"),
			want: &Patch{Ops: []Op{{Kind: OpAdd, Path: "a/b.txt", Lines: []string{"hello", "", " world"}, Line: 2}}},
		},
		{
			name: "add empty file",
			text: patch("*** Begin Patch", "*** Add File: empty", "*** End Patch"),
			want: &Patch{Ops: []Op{{Kind: OpAdd, Path: "empty", Line: 2}}},
		},
		{
			name: "delete",
			text: patch("*** Begin Patch", "*** Delete File: old.txt", "*** End Patch"),
			want: &Patch{Ops: []Op{{Kind: OpDelete, Path: "old.txt", Line: 2}}},
		},
		{
			name: "update with anchors, hunks and EOF",
			text: patch(
				"*** Begin Patch",
				"*** Update File: src/app.py",
				"*** Move to: src/main.py",
				"@@ class A",
				"@@     def f():",
				" keep",
				"-old",
				"+new",
				"@@",
				"-tail",
				"+TAIL",
				"*** End of File",
				"*** End Patch",
			),
			want: &Patch{Ops: []Op{{
				Kind: OpUpdate, Path: "src/app.py", MoveTo: "src/main.py", Line: 2,
				Hunks: []Hunk{
					{Anchors: []string{"class A", "    def f():"}, Lines: []HunkLine{ctxLine("keep"), delLine("old"), addLine("new")}, Line: 4},
					{Lines: []HunkLine{delLine("tail"), addLine("TAIL")}, EOF: true, Line: 9},
				},
			}}},
		},
		{
			name: "several operations",
			text: patch(
				"*** Begin Patch",
				"*** Add File: hello.txt",
				"+Hello world",
				"*** Update File: src/app.py",
				"@@ def greet():",
				"-print(\"Hi\")",
				"+print(\"Hello, world!\")",
				"*** Delete File: obsolete.txt",
				"*** End Patch",
			),
			want: &Patch{Ops: []Op{
				{Kind: OpAdd, Path: "hello.txt", Lines: []string{"Hello world"}},
				{Kind: OpUpdate, Path: "src/app.py", Hunks: []Hunk{{Anchors: []string{"def greet():"}, Lines: []HunkLine{delLine(`print("Hi")`), addLine(`print("Hello, world!")`)}}}},
				{Kind: OpDelete, Path: "obsolete.txt"},
			}},
		},
		{
			name: "CRLF, blank lines around the envelope and spaces around markers",
			text: "\ufeff\r\n" + strings.ReplaceAll(patch(
				"  *** Begin Patch ",
				"",
				"*** Update File:   a.txt  ",
				" x",
				"-y",
				"+z",
				"",
				"*** Delete File: b.txt",
				"",
				"*** End Patch  ",
			), "\n", "\r\n") + "\n\n",
			want: &Patch{Ops: []Op{
				// The blank line before the Delete File is taken as an
				// empty context line; Apply drops it if it does not match.
				{Kind: OpUpdate, Path: "a.txt", Hunks: []Hunk{{Lines: []HunkLine{ctxLine("x"), delLine("y"), addLine("z"), ctxLine("")}}}},
				{Kind: OpDelete, Path: "b.txt"},
			}},
		},
		{
			name: "BOM and no trailing newline",
			text: "\ufeff*** Begin Patch\n*** Delete File: x\n*** End Patch",
			want: &Patch{Ops: []Op{{Kind: OpDelete, Path: "x"}}},
		},
		{
			name: "first hunk without @@, blank line as empty context",
			text: patch("*** Begin Patch", "*** Update File: f", " a", "", "\t", "-b", "*** End Patch"),
			want: &Patch{Ops: []Op{{Kind: OpUpdate, Path: "f", Hunks: []Hunk{{Lines: []HunkLine{ctxLine("a"), ctxLine(""), ctxLine(""), delLine("b")}}}}}},
		},
		{
			name: "blank lines between hunks are separators",
			text: patch("*** Begin Patch", "*** Update File: f", "", "@@", "-a", "*** End of File", "", "@@ x", "+b", "*** End Patch"),
			want: &Patch{Ops: []Op{{Kind: OpUpdate, Path: "f", Hunks: []Hunk{
				{Lines: []HunkLine{delLine("a")}, EOF: true},
				{Anchors: []string{"x"}, Lines: []HunkLine{addLine("b")}},
			}}}},
		},
		{
			name: "unified diff ranges on @@ lines",
			text: patch("*** Begin Patch", "*** Update File: f", "@@ -1,3 +1,4 @@", "-a", "@@ -10 +11,2 @@ def g():", "-b", "@@  ", "-c", "*** End Patch"),
			want: &Patch{Ops: []Op{{Kind: OpUpdate, Path: "f", Hunks: []Hunk{
				{Lines: []HunkLine{delLine("a")}},
				{Anchors: []string{"def g():"}, Lines: []HunkLine{delLine("b")}},
				{Lines: []HunkLine{delLine("c")}},
			}}}},
		},
		{
			name: "pure move",
			text: patch("*** Begin Patch", "*** Update File: a", "*** Move to: b", "*** End Patch"),
			want: &Patch{Ops: []Op{{Kind: OpUpdate, Path: "a", MoveTo: "b"}}},
		},
		{
			name: "lines that look like markers inside bodies are content",
			text: patch("*** Begin Patch", "*** Add File: a", "+*** End Patch", "+@@", "*** Update File: b", " *** Add File: c", "-@@ x", "*** End Patch"),
			want: &Patch{Ops: []Op{
				{Kind: OpAdd, Path: "a", Lines: []string{"*** End Patch", "@@"}},
				{Kind: OpUpdate, Path: "b", Hunks: []Hunk{{Lines: []HunkLine{ctxLine("*** Add File: c"), delLine("@@ x")}}}},
			}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.text)
			if err != nil {
				t.Fatalf("Parse: got error %v, want none", err)
			}
			opts := ignoreLines
			if tt.want.Ops[0].Line != 0 {
				opts = cmp.Options{cmpopts.EquateEmpty()}
			}
			if diff := cmp.Diff(tt.want, got, opts); diff != "" {
				t.Errorf("Parse: got patch differing from want (-want +got):\n%s", diff)
			}
			// What String writes, Parse reads back as the same patch.
			again, err := Parse(got.String())
			if err != nil {
				t.Fatalf("Parse(String()): got error %v, want none; text:\n%s", err, got.String())
			}
			if diff := cmp.Diff(got, again, ignoreLines); diff != "" {
				t.Errorf("Parse(String()): got a different patch (-first +again):\n%s", diff)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name     string
		text     string
		wantLine int
		wantMsg  string // a substring of the message
	}{
		{"empty", "  \n\n", 0, "the patch is empty"},
		{"no begin", patch("*** Add File: a", "+x", "*** End Patch"), 1, `must start with the line "*** Begin Patch", got "*** Add File: a"`},
		{"heredoc", patch("<<'EOF'", "*** Begin Patch", "*** Delete File: a", "*** End Patch", "EOF"), 1, "not a shell command or heredoc"},
		{"no end", patch("*** Begin Patch", "*** Add File: a", "+x"), 3, `must end with the line "*** End Patch", got "+x"`},
		{"begin only", "*** Begin Patch\n", 1, `must end with the line "*** End Patch"`},
		{"no operations", patch("*** Begin Patch", "", "*** End Patch"), 3, "no file operations"},
		{"unknown header", patch("*** Begin Patch", "*** Create File: a", "*** End Patch"), 2, `"*** Create File: a"; the markers are case-sensitive`},
		{"lowercase header", patch("*** Begin Patch", "*** add file: a", "+x", "*** End Patch"), 2, `expected "*** Add File: <path>"`},
		{"missing path", patch("*** Begin Patch", "*** Add File: ", "+x", "*** End Patch"), 2, `"*** Add File:" has no path after it`},
		{"missing move path", patch("*** Begin Patch", "*** Update File: a", "*** Move to:", "-x", "*** End Patch"), 3, `"*** Move to:" has no path`},
		{"add line without plus", patch("*** Begin Patch", "*** Add File: a", "+x", "y", "*** End Patch"), 4, `got "y"`},
		{"empty line in add", patch("*** Begin Patch", "*** Add File: a", "+x", "", "+y", "*** End Patch"), 5, "an empty line in an Add File must be written as a lone '+'"},
		{"context in add", patch("*** Begin Patch", "*** Add File: a", " x", "*** End Patch"), 3, "use Update File to edit"},
		{"body after delete", patch("*** Begin Patch", "*** Delete File: a", "-x", "*** End Patch"), 3, "a Delete File has none"},
		{"update without hunks", patch("*** Begin Patch", "*** Update File: a", "*** End Patch"), 2, "*** Update File: a has no hunks"},
		{"hunk without lines", patch("*** Begin Patch", "*** Update File: a", "@@ f", "*** End Patch"), 3, "the hunk has no lines"},
		{"hunk with bad line", patch("*** Begin Patch", "*** Update File: a", "@@", "-x", "\tbad", "*** End Patch"), 5, `unexpected line "\tbad" in *** Update File: a; every hunk line starts with ' '`},
		{"@@ without space", patch("*** Begin Patch", "*** Update File: a", "@@f", "-x", "*** End Patch"), 3, `expected "@@" or "@@ <a line of the file>", got "@@f"`},
		{"EOF marker without lines", patch("*** Begin Patch", "*** Update File: a", "@@", "*** End of File", "*** End Patch"), 4, "must follow a hunk's lines"},
		{"lines after EOF marker", patch("*** Begin Patch", "*** Update File: a", "@@", "-x", "*** End of File", "-y", "*** End Patch"), 6, "start the next hunk with \"@@\""},
		{"EOF marker in add", patch("*** Begin Patch", "*** Add File: a", "+x", "*** End of File", "*** End Patch"), 4, "may only end a hunk of an Update File"},
		{"move out of place", patch("*** Begin Patch", "*** Update File: a", "@@", "-x", "*** Move to: b", "*** End Patch"), 5, "must come right after"},
		{"end patch early", patch("*** Begin Patch", "*** Delete File: a", "*** End Patch", "*** Delete File: b", "*** End Patch"), 3, "before the end of the patch"},
		{"second begin", patch("*** Begin Patch", "*** Begin Patch", "*** Delete File: a", "*** End Patch"), 2, "a second"},
		{"unknown marker in update", patch("*** Begin Patch", "*** Update File: a", "@@", "-x", "*** Frobnicate", "*** End Patch"), 5, `got "*** Frobnicate"`},
		{"too big", "*** Begin Patch\n" + strings.Repeat("x", MaxPatchSize), 0, "over the 10485760-byte limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.text)
			if err == nil {
				t.Fatalf("Parse: got %+v, want an error", got)
			}
			if !errors.Is(err, ErrPatch) {
				t.Errorf("Parse: got error %v, want one matching ErrPatch", err)
			}
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("Parse: got error of type %T, want *Error", err)
			}
			if pe.Line != tt.wantLine {
				t.Errorf("Parse: got error at line %d, want line %d (%v)", pe.Line, tt.wantLine, err)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("Parse: got error %q, want it to contain %q", err, tt.wantMsg)
			}
		})
	}
}

func TestCleanPath(t *testing.T) {
	tests := []struct {
		in, want, wantErr string
	}{
		{in: "a.txt", want: "a.txt"},
		{in: "src/./pkg//x.go", want: "src/pkg/x.go"},
		{in: `nested\win.txt`, want: "nested/win.txt"},
		{in: "dir/", want: "dir"},
		{in: "C:notes", want: "C:notes"},
		{in: "", wantErr: "the path is empty"},
		{in: "   ", wantErr: "the path is empty"},
		{in: ".", wantErr: "names the workspace root"},
		{in: "/etc/passwd", wantErr: "is absolute"},
		{in: `C:\Windows\x`, wantErr: "is absolute"},
		{in: `\\server\share`, wantErr: "is absolute"},
		{in: "../x", wantErr: `contains ".."`},
		{in: "a/../../b", wantErr: `contains ".."`},
		{in: "a/../b", wantErr: `contains ".."`},
		{in: `..\x`, wantErr: `contains ".."`},
		{in: "a\x00b", wantErr: "control character"},
		{in: "a\x1bb", wantErr: "control character"},
		{in: strings.Repeat("n", 256), wantErr: "name over 255 bytes"},
		{in: strings.Repeat("d/", 2100) + "f", wantErr: "over the 4096-byte limit"},
	}
	for _, tt := range tests {
		t.Run(clip(tt.in), func(t *testing.T) {
			got, err := CleanPath(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("CleanPath(%q): got %q, %v, want an error containing %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("CleanPath(%q): got %q, %v, want %q", tt.in, got, err, tt.want)
			}
		})
	}
}
