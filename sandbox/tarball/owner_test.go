package tarball

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("giving files to another owner needs root")
	}
}

func ownerOf(t *testing.T, p string) (int, int) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return int(st.Uid), int(st.Gid)
}

// TestExtractOwner: Chown through the root gives every member but the root its ids, a
// symlink itself rather than its target.
func TestExtractOwner(t *testing.T) {
	needRoot(t)
	tmp, root := sandboxDirs(t)
	opts := ExtractOptions{Chown: func(r *os.Root, name string, _ *tar.Header) error { return r.Lchown(name, 1234, 5678) }}
	b := buildTar(t, dir("./"), dir("a/"), file("a/b", "x"), symlink("l", "a"), symlink("up", "a/b"))
	if err := Extract(context.Background(), bytes.NewReader(b), root, opts); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a", "a/b", "l", "up"} {
		if uid, gid := ownerOf(t, filepath.Join(root, n)); uid != 1234 || gid != 5678 {
			t.Errorf("%s is owned by %d:%d, want 1234:5678", n, uid, gid)
		}
	}
	if uid, _ := ownerOf(t, root); uid != 0 {
		t.Errorf("the root was given to %d", uid)
	}
	if uid, _ := ownerOf(t, filepath.Join(tmp, "outside", "sentinel")); uid != 0 {
		t.Errorf("a file outside the root was given to %d", uid)
	}
}
