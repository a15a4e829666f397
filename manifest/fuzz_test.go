package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cove-sandbox/cove/sandbox"
)

// FuzzParse checks that Parse never panics, that every error it returns
// wraps sandbox.ErrInvalid, and that anything it accepts marshals and
// parses back to an equal manifest, with the same JSON the second time.
func FuzzParse(f *testing.F) {
	seeds := []string{
		`{}`,
		`{"root": "/w", "entries": {"a/b.txt": {"type": "file", "content": "héllo"}}}`,
		`{"entries": {"bin": {"type": "file", "content": "AP8=", "encoding": "base64", "permissions": {"owner": 6}}}}`,
		`{"entries": {"d": {"type": "dir", "description": "x", "group": {"name": "dev"}, "children": {"e": {"type": "dir", "children": {"f": {"type": "file", "content": ""}}}}}}}`,
		`{"entries": {"f": {"type": "local_file", "src": "x"}, "d": {"type": "local_dir", "src": null}, "e": {"type": "local_dir", "src": "y", "ephemeral": true}}}`,
		`{"entries": {"r": {"type": "git_repo", "host": "gitlab.com", "repo": "o/n", "ref": "v1", "subpath": "/docs"}}}`,
		`{"environment": {"value": {"A": "1", "B": {"type": "str", "value": "2"}, "C": {"description": "d", "ephemeral": true, "value": {"type": "str", "value": "3"}}}}}`,
		`{"users": [{"name": "alice"}], "groups": [{"name": "dev", "users": [{"name": "bob"}]}]}`,
		`{"entries": {"a": {"type": "foo"}}}`,
		`{"entries": {"a": {}, "./a": {"type": "file", "content": ""}}}`,
		`{"entries": {"f": {"type": "file", "content": ""}, "f/g": {"type": "file", "content": ""}}}`,
		`{"entries": {"\u0000": {"type": "file", "content": "\ud800"}}}`,
		`[]`,
		`null`,
		``,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	if data, err := os.ReadFile("testdata/sdk_manifest.json"); err == nil {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Parse(data)
		if err != nil {
			if !errors.Is(err, sandbox.ErrInvalid) {
				t.Fatalf("Parse(%q): got error %v, want one wrapping sandbox.ErrInvalid", data, err)
			}
			return
		}
		out, err := json.Marshal(m)
		if err != nil {
			t.Fatalf("Marshal of parsed %q: %v", data, err)
		}
		m2, err := Parse(out)
		if err != nil {
			t.Fatalf("Parse of re-marshaled %s (from %q): %v", out, data, err)
		}
		if diff := cmp.Diff(m, m2); diff != "" {
			t.Fatalf("round trip of %q via %s mismatch (-first +second):\n%s", data, out, diff)
		}
		out2, err := json.Marshal(m2)
		if err != nil {
			t.Fatalf("second Marshal: %v", err)
		}
		if !bytes.Equal(out, out2) {
			t.Fatalf("marshal not stable:\nfirst  %s\nsecond %s", out, out2)
		}
	})
}
