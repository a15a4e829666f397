package template

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/cove-sandbox/cove/sandbox"
)

// TestImportImageUserChecked: an image config's user (and group) must be
// names a runtime can use, never paths; the forms images use are kept.
func TestImportImageUserChecked(t *testing.T) {
	st, err := Open(tempDir(t))
	if err != nil {
		t.Fatal(err)
	}
	l := layerTar(t, entry{name: "etc/passwd", body: "root:x:0:0::/root:/bin/sh\n"})
	tests := []struct {
		user string
		ok   bool
	}{
		{"app", true},
		{"1000", true},
		{"1000:1000", true},
		{"nobody:nogroup", true},
		{"../../..", false},
		{"../../../var/tmp/x", false},
		{"/etc", false},
		{"app:../../x", false},
		{"app:", false},
		{":1000", false},
		{"-x", false},
		{"a:b:c", false},
	}
	for i, tt := range tests {
		name := fmt.Sprintf("user%d", i)
		tmpl, err := st.Import(t.Context(), name, bytes.NewReader(ociTarball(t, imageConfigJSON(nil, "", tt.user), l)), nil)
		if tt.ok {
			if err != nil {
				t.Errorf("import with user %q: %v", tt.user, err)
			} else if tmpl.Config.User != tt.user {
				t.Errorf("import with user %q: the template's user is %q", tt.user, tmpl.Config.User)
			}
			continue
		}
		if !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("import with user %q: %v, want ErrInvalid", tt.user, err)
		}
		if _, err := st.Get(name); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("a refused import left template %q: %v", name, err)
		}
	}
}
