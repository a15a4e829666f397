package kubeimage

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/cove-sandbox/cove/template"
)

// TestReadBack writes an image from a small root and imports it as a
// Cove template: the same files come back, with the sandbox program.
func TestReadBack(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	os.WriteFile(filepath.Join(root, "etc", "passwd"), []byte("root:x:0:0::/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n"), 0o644)
	os.WriteFile(filepath.Join(root, "hello.txt"), []byte("hello\n"), 0o600)
	os.Symlink("hello.txt", filepath.Join(root, "link"))
	bin := filepath.Join(t.TempDir(), "cove-sandbox")
	os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755)

	var buf bytes.Buffer
	if err := Write(&buf, t.TempDir(), Options{Ref: "cove/test:latest", Root: root, Sandbox: bin, Env: map[string]string{"LANG": "C.UTF-8"}}); err != nil {
		t.Fatal(err)
	}
	st, err := template.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tm, err := st.Import(t.Context(), "back", &buf, nil)
	if err != nil {
		t.Fatalf("importing the image as a template: %v", err)
	}
	for name, want := range map[string]string{"hello.txt": "hello\n", "usr/local/bin/cove-sandbox": "#!/bin/sh\n"} {
		got, err := os.ReadFile(filepath.Join(tm.RootFS, name))
		if err != nil || string(got) != want {
			t.Errorf("%s: got %q (%v), want %q", name, got, err, want)
		}
	}
	if l, err := os.Readlink(filepath.Join(tm.RootFS, "link")); err != nil || l != "hello.txt" {
		t.Errorf("link: %q %v", l, err)
	}
	if fi, err := os.Stat(filepath.Join(tm.RootFS, "tmp")); err != nil || fi.Mode().Perm() != 0o777 || fi.Mode()&os.ModeSticky == 0 {
		t.Errorf("tmp: %v %v, want 1777", fi, err)
	}
}

func TestWriteRefuses(t *testing.T) {
	if err := Write(&bytes.Buffer{}, "", Options{Root: t.TempDir()}); err == nil {
		t.Error("Write without a reference or program: no error")
	}
}
