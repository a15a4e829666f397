package applypatch

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fuzzSeeds are patches good and bad, covering every marker and the
// lenient corners of the syntax.
var fuzzSeeds = []string{
	patch("*** Begin Patch", "*** Add File: a/b.txt", "+hello", "+", "*** End Patch"),
	patch("*** Begin Patch", "*** Delete File: x", "*** End Patch"),
	patch("*** Begin Patch", "*** Update File: f", "*** Move to: g", "@@ class A", "@@ def f():", " a", "-b", "+c", "@@", "-z", "*** End of File", "*** End Patch"),
	patch("*** Begin Patch", "*** Update File: f", " a", "", "\t", "-b", "*** End Patch"),
	patch("*** Begin Patch", "*** Update File: f", "@@ -1,3 +1,4 @@ def g():", "-a", "@@  ", "+b", "*** End Patch"),
	patch("*** Begin Patch", "*** Update File: a", "*** Move to: b", "*** End Patch"),
	"\ufeff\r\n  *** Begin Patch \r\n*** Add File: a\r\n+x\r\r\n*** End Patch\r\n\r\n",
	patch("<<'EOF'", "*** Begin Patch", "*** Delete File: a", "*** End Patch", "EOF"),
	patch("*** Begin Patch", "*** Update File: a", "@@", "*** End of File", "*** End Patch"),
	patch("*** Begin Patch", "*** Add File: ../x", "+x", "*** Delete File: /etc/passwd", "*** End Patch"),
	"*** Begin Patch\n*** End Patch",
	"*** Begin Patch",
	"",
}

// FuzzParse checks that Parse never panics, that every error is an *Error,
// and that a patch it accepts is written back by String as text it parses
// to the same patch.
func FuzzParse(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		p, err := Parse(text)
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) || !errors.Is(err, ErrPatch) {
				t.Fatalf("Parse: got error %v of type %T, want an *Error", err, err)
			}
			return
		}
		if len(p.Ops) == 0 {
			t.Fatalf("Parse: got a patch with no operations from %q", text)
		}
		for _, op := range p.Ops {
			if op.Path == "" || op.Path != strings.TrimSpace(op.Path) {
				t.Fatalf("Parse: got path %q, want it non-empty and trimmed", op.Path)
			}
			for _, h := range op.Hunks {
				if len(h.Lines) == 0 {
					t.Fatalf("Parse: got a hunk with no lines from %q", text)
				}
			}
		}
		out := p.String()
		again, err := Parse(out)
		if err != nil {
			t.Fatalf("Parse(String()): got error %v, want none; input %q, String %q", err, text, out)
		}
		if diff := cmp.Diff(p, again, ignoreLines); diff != "" {
			t.Fatalf("Parse(String()): got a different patch (-first +again):\n%s\ninput %q", diff, text)
		}
		if out2 := again.String(); out2 != out {
			t.Fatalf("String: not stable: %q then %q", out, out2)
		}
	})
}

// FuzzApply applies arbitrary patches to a small tree and checks that Apply
// never panics and that a patch it rejects leaves the tree as it was.
func FuzzApply(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s, "a\nb\nz\n")
	}
	f.Add(patch("*** Begin Patch", "*** Update File: f", "@@", " a", "-b", "+B", "*** End of File", "*** End Patch"), "a\nb")
	f.Add(patch("*** Begin Patch", "*** Update File: f", "@@ a", "+x", "@@", "", "*** End Patch"), "a\r\n\r\nb\r\n")
	f.Fuzz(func(t *testing.T, text, content string) {
		before := map[string]string{"f": content, "g/h": "one\ntwo\n"}
		fsys := newMemFS(before)
		summary, changes, err := Apply(context.Background(), fsys, text)
		if err != nil {
			if !errors.Is(err, ErrPatch) {
				t.Fatalf("Apply: got error %v from an FS that does not fail, want an ErrPatch", err)
			}
			if diff := cmp.Diff(before, fsys.snapshot()); diff != "" {
				t.Fatalf("Apply: a rejected patch changed files (-before +after):\n%s", diff)
			}
			return
		}
		if got := strings.Count(summary, "\n") + 1; got < len(changes) {
			t.Fatalf("Apply: got %d summary lines for %d changes", got, len(changes))
		}
		for _, c := range changes {
			if c.Path == "" || strings.HasPrefix(c.Path, "/") || strings.Contains("/"+c.Path+"/", "/../") {
				t.Fatalf("Apply: got change with path %q", c.Path)
			}
		}
	})
}
