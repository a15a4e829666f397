package fsys

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestRenameNoReplaceWithoutKernelSupport: where RENAME_NOREPLACE is
// refused with EINVAL (gVisor's shared bind mounts), a move still moves
// files, links and directories, and still never replaces what is there.
func TestRenameNoReplaceWithoutKernelSupport(t *testing.T) {
	for _, native := range []bool{true, false} {
		name := "native"
		if !native {
			name = "einval"
			renameat2 = func(int, string, int, string, uint) error { return unix.EINVAL }
			t.Cleanup(func() { renameat2 = unix.Renameat2 })
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			d, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(d)
			write := func(p, s string) {
				if err := os.WriteFile(filepath.Join(dir, p), []byte(s), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			read := func(p string) string {
				b, _ := os.ReadFile(filepath.Join(dir, p))
				return string(b)
			}
			write("a", "A")
			write("taken", "kept")
			os.Mkdir(filepath.Join(dir, "dir"), 0o755)
			write("dir/inner", "I")
			os.Mkdir(filepath.Join(dir, "takendir"), 0o755)
			os.Symlink("/etc/passwd", filepath.Join(dir, "link"))

			if err := renameNoReplace(d, "a", d, "b"); err != nil || read("b") != "A" {
				t.Errorf("moving a file: %v, b = %q", err, read("b"))
			}
			if _, err := os.Lstat(filepath.Join(dir, "a")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the source is still there: %v", err)
			}
			if err := renameNoReplace(d, "b", d, "taken"); !errors.Is(err, unix.EEXIST) || read("taken") != "kept" || read("b") != "A" {
				t.Errorf("a file onto a file: %v, taken = %q, b = %q; want EEXIST and both kept", err, read("taken"), read("b"))
			}
			if err := renameNoReplace(d, "dir", d, "takendir"); !errors.Is(err, unix.EEXIST) {
				t.Errorf("a directory onto an empty directory: %v, want EEXIST", err)
			}
			if err := renameNoReplace(d, "dir", d, "moved"); err != nil || read("moved/inner") != "I" {
				t.Errorf("moving a directory: %v, moved/inner = %q", err, read("moved/inner"))
			}
			if err := renameNoReplace(d, "link", d, "link2"); err != nil {
				t.Fatalf("moving a link: %v", err)
			}
			if target, err := os.Readlink(filepath.Join(dir, "link2")); err != nil || target != "/etc/passwd" {
				t.Errorf("the moved link: %q, %v; want the link itself moved, not its target", target, err)
			}
		})
	}
}
