package disk

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// uncapped makes an uncapped disk in a new directory, removed when the
// test ends.
func uncapped(t *testing.T) *Disk {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("copying owners, whiteouts and trusted xattrs needs root")
	}
	d, err := Create(context.Background(), filepath.Join(t.TempDir(), "disk"), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Remove() })
	return d
}

// describe lists a tree as lines of path, type, mode, owner, size, link
// target or content, and xattrs, without following links.
func describe(t *testing.T, root string) string {
	t.Helper()
	var lines []string
	filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, p)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		line := fmt.Sprintf("%s %o %d:%d mtime=%d", rel, st.Mode, st.Uid, st.Gid, st.Mtim.Sec)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			target, _ := os.Readlink(p)
			line += " -> " + target
		case unix.S_IFREG:
			b, _ := os.ReadFile(p)
			line += fmt.Sprintf(" %d bytes sha256 %x nlink=%d", len(b), sha256.Sum256(b), st.Nlink)
		case unix.S_IFCHR:
			line += fmt.Sprintf(" rdev=%d", st.Rdev)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR || st.Mode&unix.S_IFMT == unix.S_IFREG {
			buf := make([]byte, 1024)
			if n, err := unix.Llistxattr(p, buf); err == nil && n > 0 {
				names := strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00")
				sort.Strings(names)
				for _, name := range names {
					v := make([]byte, 256)
					m, _ := unix.Lgetxattr(p, name, v)
					line += fmt.Sprintf(" %s=%q", name, v[:m])
				}
			}
		}
		lines = append(lines, line)
		return nil
	})
	return strings.Join(lines, "\n")
}

// TestCopyUncappedKeepsTheTree: a fork's copy of an uncapped disk keeps
// what an overlay upper dir holds, and copies links as links.
func TestCopyUncappedKeepsTheTree(t *testing.T) {
	d := uncapped(t)
	up := d.Upper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(up, "workspace/src"), 0o755))
	must(os.WriteFile(filepath.Join(up, "workspace/src/main.go"), []byte("package main"), 0o644))
	must(os.Link(filepath.Join(up, "workspace/src/main.go"), filepath.Join(up, "workspace/hard")))
	must(os.Chown(filepath.Join(up, "workspace/src/main.go"), 1000, 1000))
	must(os.Chown(filepath.Join(up, "workspace"), 1000, 1000))
	sparse, err := os.Create(filepath.Join(up, "workspace/sparse"))
	must(err)
	must(sparse.Truncate(64 << 20))
	sparse.WriteAt([]byte("end"), 64<<20-3)
	sparse.Close()
	must(os.WriteFile(filepath.Join(up, "setuid"), []byte("x"), 0o755))
	must(os.Chmod(filepath.Join(up, "setuid"), 0o4755))
	must(os.Symlink("/etc/shadow", filepath.Join(up, "workspace/shadow")))
	must(os.Symlink("/", filepath.Join(up, "workspace/root")))
	must(os.Symlink("../../../../..", filepath.Join(up, "workspace/up")))
	must(unix.Lchown(filepath.Join(up, "workspace/up"), 1000, 1000))
	must(unix.Mknod(filepath.Join(up, "whiteout"), unix.S_IFCHR, 0))
	must(unix.Mkfifo(filepath.Join(up, "workspace/fifo"), 0o600))
	must(os.MkdirAll(filepath.Join(up, "etc/opaque"), 0o700))
	if err := unix.Setxattr(filepath.Join(up, "etc/opaque"), "trusted.overlay.opaque", []byte("y"), 0); err != nil {
		t.Skipf("trusted xattrs unsupported here: %v", err)
	}
	must(unix.Setxattr(filepath.Join(up, "workspace/src/main.go"), "user.note", []byte("kept"), 0))
	old := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	must(os.Chtimes(filepath.Join(up, "workspace/src"), old, old))
	must(os.Chtimes(filepath.Join(up, "workspace/src/main.go"), old, old))

	c, err := d.Copy(context.Background(), filepath.Join(t.TempDir(), "fork"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Remove() })
	if got, want := describe(t, c.Upper()), describe(t, up); got != want {
		t.Errorf("the copy differs:\n got:\n%s\nwant:\n%s", got, want)
	}
	var st unix.Stat_t
	must(unix.Stat(filepath.Join(c.Upper(), "workspace/sparse"), &st))
	if st.Blocks*512 > 1<<20 {
		t.Errorf("the sparse file's copy takes %d bytes", st.Blocks*512)
	}
	if fi, err := os.Stat(c.Work()); err != nil || !fi.IsDir() {
		t.Errorf("the copy's work dir: %v %v", fi, err)
	}
}

// TestCopyUncappedUnderSwaps: while the copy runs, the sandbox (here, the
// test) swaps its directories for symlinks to a host directory and back,
// atomically and without end; the copy never holds the host's files.
func TestCopyUncappedUnderSwaps(t *testing.T) {
	d := uncapped(t)
	host := t.TempDir()
	if err := os.WriteFile(filepath.Join(host, "secret"), []byte("host secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	const n = 100
	for i := range n {
		dir := filepath.Join(d.Upper(), fmt.Sprintf("d%03d", i))
		os.MkdirAll(dir, 0o755)
		os.WriteFile(filepath.Join(dir, "mine"), []byte("sandbox"), 0o644)
		if err := os.Symlink(host, dir+".l"); err != nil {
			t.Fatal(err)
		}
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := range 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := w; !stop.Load(); j++ {
				dir := filepath.Join(d.Upper(), fmt.Sprintf("d%03d", j%n))
				unix.Renameat2(unix.AT_FDCWD, dir, unix.AT_FDCWD, dir+".l", unix.RENAME_EXCHANGE)
			}
		}()
	}
	defer func() { stop.Store(true); wg.Wait() }()
	for round := range 10 {
		dst := filepath.Join(t.TempDir(), "fork")
		c, err := d.Copy(context.Background(), dst)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		leaked := 0
		filepath.WalkDir(c.Upper(), func(p string, e fs.DirEntry, err error) error {
			if err == nil && e.Name() == "secret" {
				leaked++
			}
			return nil
		})
		c.Remove()
		if leaked > 0 {
			t.Fatalf("round %d: the copy holds %d copies of a host file reached through the sandbox's links", round, leaked)
		}
	}
}
