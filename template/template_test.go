package template

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/mountinfo"
)

func TestValidName(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"python", true},
		{"py-3.11_x", true},
		{"A1", true},
		{"", false},
		{".hidden", false},
		{"..", false},
		{"a/b", false},
		{"-flag", false},
		{"a b", false},
		{strings.Repeat("x", 65), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidName(tt.name)
			if got := err == nil; got != tt.ok {
				t.Errorf("ValidName(%q) = %v, want ok=%v", tt.name, err, tt.ok)
			}
			if err != nil && !errors.Is(err, sandbox.ErrInvalid) {
				t.Errorf("ValidName(%q) = %v, want ErrInvalid", tt.name, err)
			}
		})
	}
}

// importSmall imports a one-layer image with the given file content.
func importSmall(t *testing.T, st *Store, name, content string) *Template {
	t.Helper()
	l := layerTar(t, entry{name: "etc/passwd", body: "root:x:0:0::/root:/bin/sh\n"}, entry{name: "data", body: content})
	tmpl, err := st.Import(t.Context(), name, bytes.NewReader(ociTarball(t, imageConfigJSON(nil, "", ""), l)), nil)
	if err != nil {
		t.Fatalf("Import %s: %v", name, err)
	}
	return tmpl
}

func TestStore(t *testing.T) {
	dir := tempDir(t)
	st, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("store directory mode: %v %v, want 0700", fi.Mode(), err)
	}
	a := importSmall(t, st, "a", "one")
	b := importSmall(t, st, "b", "one") // same content as a
	c := importSmall(t, st, "c", "two")
	if a.Digest != b.Digest || a.RootFS != b.RootFS {
		t.Errorf("same content, different blobs: %s %s", a.RootFS, b.RootFS)
	}
	if a.Digest == c.Digest {
		t.Errorf("different content, same digest %s", a.Digest)
	}

	t.Run("List", func(t *testing.T) {
		ts, err := st.List()
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, tm := range ts {
			names = append(names, tm.Name)
		}
		if got, want := strings.Join(names, " "), "host a b c"; got != want {
			t.Errorf("List: got %q, want %q", got, want)
		}
	})

	t.Run("refs survive reopening", func(t *testing.T) {
		st2, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		got, err := st2.Get("c")
		if err != nil || got.Digest != c.Digest {
			t.Errorf("Get c after reopening: %v, %v; want digest %s", got, err, c.Digest)
		}
	})

	t.Run("errors", func(t *testing.T) {
		inUse := func(string) bool { return true }
		tests := []struct {
			name    string
			err     error
			want    error
			message string
		}{
			{"Get unknown", second(st.Get("nope")), sandbox.ErrNotFound, "cove template ls"},
			{"Get bad name", second(st.Get("../x")), sandbox.ErrInvalid, "template name"},
			{"Remove unknown", st.Remove("nope", nil), sandbox.ErrNotFound, "cove template ls"},
			{"Remove in use", st.Remove("c", inUse), sandbox.ErrState, "a sandbox uses it"},
			{"Remove host", st.Remove("host", nil), sandbox.ErrInvalid, "built in"},
			{"Import existing", second(st.Import(t.Context(), "a", bytes.NewReader(nil), nil)), sandbox.ErrExist, "cove template rm a"},
			{"Import as host", second(st.Import(t.Context(), "host", bytes.NewReader(nil), nil)), sandbox.ErrInvalid, "reserved"},
			{"Build existing", second(st.Build(t.Context(), "a", BuildOptions{})), sandbox.ErrExist, "already exists"},
			{"Build bad package", second(st.Build(t.Context(), "new", BuildOptions{Packages: []string{"--evil"}})), sandbox.ErrInvalid, "package name"},
			{"Build bad mirror", second(st.Build(t.Context(), "new", BuildOptions{Mirror: "-oops"})), sandbox.ErrInvalid, "mirror"},
			{"Build bad tool", second(st.Build(t.Context(), "new", BuildOptions{Tool: "rm"})), sandbox.ErrInvalid, "bootstrapper"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				if !errors.Is(tt.err, tt.want) || !strings.Contains(tt.err.Error(), tt.message) {
					t.Errorf("got %v, want %v mentioning %q", tt.err, tt.want, tt.message)
				}
			})
		}
		if _, err := st.Get("c"); err != nil {
			t.Errorf("c is gone after a refused Remove: %v", err)
		}
	})

	t.Run("ByDigest", func(t *testing.T) {
		host, err := st.Host()
		if err != nil {
			t.Fatal(err)
		}
		for _, tt := range []struct{ digest, name string }{{a.Digest, "a"}, {c.Digest, "c"}, {host.Digest, "host"}} {
			got, err := st.ByDigest(tt.digest)
			if err != nil || got.Name != tt.name || got.Digest != tt.digest {
				t.Errorf("ByDigest(%s): got %+v, %v; want name %q", tt.digest, got, err, tt.name)
			}
		}
		if _, err := st.ByDigest("sha256:" + strings.Repeat("0", 64)); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("ByDigest of unknown content: %v, want ErrNotFound", err)
		}
		if _, err := st.ByDigest("../../etc"); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("ByDigest of a malformed digest: %v, want ErrInvalid", err)
		}
	})

	t.Run("damaged", func(t *testing.T) {
		d := importSmall(t, st, "damaged", "three")
		if err := os.Remove(filepath.Join(filepath.Dir(d.RootFS), "config.json")); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Get("damaged"); !errors.Is(err, sandbox.ErrNotFound) || !strings.Contains(err.Error(), "cove template rm damaged") {
			t.Errorf("Get of a damaged template: %v, want ErrNotFound saying how to remove it", err)
		}
		ts, err := st.List()
		if err != nil || len(ts) != 5 || ts[4].Name != "damaged" || !strings.Contains(ts[4].Source, "damaged") {
			t.Errorf("List with a damaged template: %v %+v", err, ts)
		}
		if err := st.Remove("damaged", nil); err != nil {
			t.Errorf("Remove of a damaged template: %v", err)
		}
		if _, err := os.Stat(d.RootFS); !os.IsNotExist(err) {
			t.Errorf("the damaged template's files stay: %v", err)
		}
	})

	t.Run("Remove", func(t *testing.T) {
		var asked []string
		inUse := func(d string) bool { asked = append(asked, d); return false }
		// a and b share a blob: removing a keeps it for b.
		if err := st.Remove("a", inUse); err != nil {
			t.Fatal(err)
		}
		if len(asked) == 0 || asked[0] != a.Digest {
			t.Errorf("inUse asked about %v, want %s first", asked, a.Digest)
		}
		if _, err := os.Stat(b.RootFS); err != nil {
			t.Errorf("b's files went with a: %v", err)
		}
		if got, err := st.ByDigest(a.Digest); err != nil || got.Name != "b" {
			t.Errorf("ByDigest after a went: %+v, %v; want it named b", got, err)
		}
		if _, err := st.Get("a"); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("Get a after Remove: %v, want ErrNotFound", err)
		}
		if err := st.Remove("b", nil); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(b.RootFS); !os.IsNotExist(err) {
			t.Errorf("b's files stay after its last name went: %v", err)
		}
		if _, err := st.Get("c"); err != nil {
			t.Errorf("c: %v", err)
		}
		host, err := st.Host()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(host.RootFS); err != nil {
			t.Errorf("Remove deleted the host template: %v", err)
		}
		if entries, _ := os.ReadDir(filepath.Join(dir, "tmp")); len(entries) != 0 {
			t.Errorf("tmp holds %d entries after Remove", len(entries))
		}
	})
}

// Open removes what a dead process left in tmp, and nothing of a live one.
func TestOpenCleansTmp(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(dir); err != nil {
		t.Fatal(err)
	}
	dead := filepath.Join(dir, "tmp", "build-999999999-abc")
	live := filepath.Join(dir, "tmp", "import-1-abc") // pid 1 always runs
	for _, d := range []string{dead, live} {
		if err := os.MkdirAll(filepath.Join(d, "rootfs", "etc"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Open(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("a dead process's %s stays: %v", dead, err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("a live process's %s went: %v", live, err)
	}
}

// removeTree detaches what is mounted below the tree before deleting it,
// so that a bind of a host directory a killed build left behind is not
// emptied.
func TestRemoveTreeMounted(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	hostDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(hostDir, "host-file"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	m := filepath.Join(dir, "rootfs", "dev")
	if err := os.MkdirAll(m, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount(hostDir, m, "", syscall.MS_BIND, ""); err != nil {
		t.Skipf("bind mount: %v", err)
	}
	if err := removeTree(dir); err != nil {
		t.Fatalf("removeTree: %v", err)
	}
	if ms, _ := mountinfo.Under(dir); len(ms) != 0 {
		syscall.Unmount(m, syscall.MNT_DETACH)
		t.Errorf("still mounted: %v", ms)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s stays: %v", dir, err)
	}
	if _, err := os.Stat(filepath.Join(hostDir, "host-file")); err != nil {
		t.Errorf("the bound host directory was emptied: %v", err)
	}
}

// tempDir is t.TempDir that can also be deleted when a test ran without
// root and left read-only directories in it.
func tempDir(t *testing.T) string {
	dir := t.TempDir()
	t.Cleanup(func() {
		filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if d != nil && d.IsDir() {
				os.Chmod(p, 0o700)
			}
			return nil
		})
	})
	return dir
}

func second[T any](_ T, err error) error { return err }
