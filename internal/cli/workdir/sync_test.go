package workdir

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestSyncDirNoLinkFollowed: the agent's final workspace reaches --out
// without writing, making or removing anything through a link in --out
// that leads out of it, even where the link is the user's own.
func TestSyncDirNoLinkFollowed(t *testing.T) {
	tmp := t.TempDir()
	final, out, outside := filepath.Join(tmp, "final"), filepath.Join(tmp, "out"), filepath.Join(tmp, "outside")
	for _, d := range []string{final, out, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(outside, "keep.txt"), "host file")
	// --out holds links out: a folder link, a file link, and a folder
	// whose file the agent deleted.
	if err := os.Symlink(outside, filepath.Join(out, "data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "keep.txt"), filepath.Join(out, "notes.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(out, "gone")); err != nil {
		t.Fatal(err)
	}
	// The agent's workspace: a real folder where out has a link, a file
	// where out links to a host file, and a relative link of its own.
	write(filepath.Join(final, "data", "keep.txt"), "agent's")
	write(filepath.Join(final, "data", "new.txt"), "agent's")
	write(filepath.Join(final, "notes.txt"), "agent's notes")
	if err := os.Symlink("notes.txt", filepath.Join(final, "link")); err != nil {
		t.Fatal(err)
	}
	// The original workspace had gone/keep.txt, which the agent deleted.
	orig := filepath.Join(tmp, "orig")
	write(filepath.Join(orig, "gone", "keep.txt"), "x")

	if err := Sync(final, out, orig); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(outside, "keep.txt")); err != nil || string(b) != "host file" {
		t.Errorf("the host file behind the links is %q, %v; want it untouched", b, err)
	}
	if _, err := os.Stat(filepath.Join(outside, "new.txt")); err == nil {
		t.Error("a file was written through out's link into the host directory")
	}
	for rel, want := range map[string]string{"data/keep.txt": "agent's", "data/new.txt": "agent's", "notes.txt": "agent's notes", "link": "agent's notes"} {
		if b, err := os.ReadFile(filepath.Join(out, rel)); err != nil || string(b) != want {
			t.Errorf("out/%s = %q, %v; want %q", rel, b, err, want)
		}
	}
	if fi, err := os.Lstat(filepath.Join(out, "data")); err != nil || !fi.IsDir() {
		t.Errorf("out/data is %v, %v; want the agent's folder in place of the link", fi, err)
	}
	if target, err := os.Readlink(filepath.Join(out, "link")); err != nil || target != "notes.txt" {
		t.Errorf("out/link -> %q, %v; want notes.txt", target, err)
	}
	if _, err := os.Lstat(filepath.Join(out, "gone")); err == nil {
		t.Error("out/gone, deleted by the agent, is still there")
	}
}

// TestDiffNoLinkFollowed: a link the sandbox left in its workspace is
// not read through into the patch (a host file's content would be in it),
// but named; a link the user's workspace already had is read as before.
func TestDiffNoLinkFollowed(t *testing.T) {
	tmp := t.TempDir()
	orig, final := filepath.Join(tmp, "orig"), filepath.Join(tmp, "final")
	secret := filepath.Join(tmp, "host-secret")
	for _, d := range []string{orig, final} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, s string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, p string) {
		t.Helper()
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	write(secret, "HOST SECRET\n")
	write(filepath.Join(orig, "f.txt"), "old\n")
	write(filepath.Join(final, "f.txt"), "new\n")
	link("f.txt", filepath.Join(orig, "same"))
	link("f.txt", filepath.Join(final, "same"))
	link(secret, filepath.Join(final, "leak"))
	link("../host-secret", filepath.Join(final, "rel"))
	link("/dev/zero", filepath.Join(final, "zero"))

	patch, links, err := Diff(orig, final)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(patch, "HOST SECRET") {
		t.Errorf("the patch holds the host file a sandbox link points at:\n%s", patch)
	}
	if !strings.Contains(patch, "+new") || !strings.Contains(patch, "b/f.txt") {
		t.Errorf("the patch lacks the change of f.txt:\n%s", patch)
	}
	want := []string{"leak -> " + secret, "rel -> ../host-secret", "zero -> /dev/zero"}
	if !slices.Equal(links, want) {
		t.Errorf("links = %q, want %q", links, want)
	}
}
