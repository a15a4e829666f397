package disk

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/sandbox"
)

// needDisks skips the test unless capped disks can be made here.
func needDisks(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("capped disks need root (loop devices and mounts)")
	}
	if err := Available(); err != nil {
		t.Skipf("capped disks are unavailable here: %v", err)
	}
}

// create makes a disk in a fresh temporary directory and mounts it, and
// removes it at the end of the test (before the directory itself is
// cleaned up, so no cleanup walks into a mount).
func create(t testing.TB, limit int64, opts ...Option) *Disk {
	t.Helper()
	d, err := Create(context.Background(), filepath.Join(t.TempDir(), "disk"), limit, opts...)
	if err != nil {
		t.Fatalf("Create(%d): %v", limit, err)
	}
	t.Cleanup(func() { d.Remove() })
	if err := d.Mount(); err != nil {
		t.Fatalf("Mount: %v", err)
	}
	return d
}

// fill writes 1 MiB chunks to a new file at path until a write fails and
// returns the bytes written and the error.
func fill(path string) (int64, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	chunk := bytes.Repeat([]byte("cove"), 1<<18)
	var n int64
	for {
		c, err := f.Write(chunk)
		n += int64(c)
		if err != nil {
			return n, err
		}
		if n > 1<<40 {
			return n, errors.New("no limit hit after 1 TiB")
		}
	}
}

// assertGone checks that nothing of a removed disk is left: no mount, no
// loop device bound to its image, no directory.
func assertGone(t *testing.T, d *Disk) {
	t.Helper()
	mounts, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mounts), " "+d.Dir()+"/") {
		t.Errorf("a mount under %s is left in /proc/self/mounts", d.Dir())
	}
	image := filepath.Join(d.Dir(), imageName)
	deadline := time.Now().Add(detachWait)
	for len(loopsBacking(image)) > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if devs := loopsBacking(image); len(devs) > 0 {
		t.Errorf("loop devices %v still bound to the removed image", devs)
	}
	if _, err := os.Stat(d.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("disk directory %s left behind (stat: %v)", d.Dir(), err)
	}
}

func hostAvail(t *testing.T, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * int64(st.Bsize)
}

func TestFillUnmountMountCopyRemove(t *testing.T) {
	needDisks(t)
	const limit = 64 << 20
	// The disk lives on a host filesystem of its own, so what the host
	// loses is this disk's doing, not that of whatever else the machine
	// runs meanwhile (other tests write to /tmp too).
	d, err := Create(context.Background(), filepath.Join(smallHost(t, 256<<20), "disk"), limit)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Remove() })
	if err := d.Mount(); err != nil {
		t.Fatal(err)
	}

	var st unix.Statfs_t
	if err := unix.Statfs(d.Upper(), &st); err != nil {
		t.Fatal(err)
	}
	if st.Type != unix.EXT4_SUPER_MAGIC {
		t.Fatalf("upper dir is on filesystem type %#x, want ext4 (%#x)", st.Type, unix.EXT4_SUPER_MAGIC)
	}
	if fi, err := os.Stat(d.Work()); err != nil || !fi.IsDir() {
		t.Fatalf("work dir: %v", err)
	}

	hostBefore := hostAvail(t, d.Dir())
	n, err := fill(filepath.Join(d.Upper(), "big"))
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling the disk: got %v after %d bytes, want ENOSPC", err, n)
	}
	if n > limit || n < limit*3/4 {
		t.Errorf("wrote %d bytes before ENOSPC, want between %d and %d", n, limit*3/4, limit)
	}
	if lost := hostBefore - hostAvail(t, d.Dir()); lost > limit+8<<20 {
		t.Errorf("the host filesystem lost %d bytes filling a %d-byte disk", lost, limit)
	}
	alloc, err := d.Allocated()
	if err != nil {
		t.Fatal(err)
	}
	if alloc < limit || alloc > limit+1<<20 {
		t.Errorf("Allocated() = %d, want the limit %d, reserved (and a few blocks of the host's metadata)", alloc, limit)
	}
	used, total, err := d.Usage()
	if err != nil {
		t.Fatal(err)
	}
	if total > limit || total < limit*3/4 || used < n || used > total {
		t.Errorf("Usage() = %d used of %d, want at least the %d written, of at most %d", used, total, n, limit)
	}

	if err := d.Unmount(); err != nil {
		t.Fatalf("Unmount: %v", err)
	}
	if m, _ := d.Mounted(); m {
		t.Fatal("Mounted() = true after Unmount")
	}
	if _, err := os.Stat(filepath.Join(d.Upper(), "big")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the file is visible with the disk unmounted (stat: %v)", err)
	}
	if devs := loopsBacking(d.Image()); len(devs) > 0 {
		t.Errorf("loop devices %v still bound after Unmount", devs)
	}
	// The superblock of a cleanly unmounted image agrees with statfs (to
	// a few blocks: statfs counts delayed-allocation reservations).
	used2, total2, err := d.Usage()
	if err != nil {
		t.Fatalf("Usage() unmounted: %v", err)
	}
	if diff := used2 - used; diff < -64<<10 || diff > 64<<10 || total2 != total {
		t.Errorf("Usage() unmounted = %d of %d, mounted it was %d of %d", used2, total2, used, total)
	}

	// A new process would Open the directory and Mount it again.
	d2, err := Open(d.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if d2.Limit() != limit {
		t.Errorf("Open(...).Limit() = %d, want %d", d2.Limit(), limit)
	}
	if err := d2.Mount(); err != nil {
		t.Fatalf("Mount: %v", err)
	}
	if err := d2.Mount(); err != nil {
		t.Fatalf("second Mount: %v", err)
	}
	fi, err := os.Stat(filepath.Join(d.Upper(), "big"))
	if err != nil || fi.Size() != n {
		t.Fatalf("after Mount the file is %v (%v), want %d bytes", fi, err, n)
	}
	if err := os.Remove(filepath.Join(d.Upper(), "big")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.Upper(), "kept"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}

	// Copy while mounted (a fork of a running sandbox).
	dst := filepath.Join(t.TempDir(), "fork")
	c, err := d.Copy(context.Background(), dst)
	if err != nil {
		t.Fatalf("Copy: %v", err)
	}
	t.Cleanup(func() { c.Remove() })
	if _, err := d.Copy(context.Background(), dst); !errors.Is(err, sandbox.ErrExist) {
		t.Errorf("Copy onto an existing directory: got %v, want ErrExist", err)
	}
	if m, _ := c.Mounted(); m {
		t.Error("the copy is mounted, want it unmounted")
	}
	if err := c.Mount(); err != nil {
		t.Fatalf("mounting the copy: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(c.Upper(), "kept")); err != nil || string(got) != "hello" {
		t.Errorf("the copy's file: %q, %v; want \"hello\"", got, err)
	}
	if err := os.WriteFile(filepath.Join(c.Upper(), "only-in-copy"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(d.Upper(), "only-in-copy")); !errors.Is(err, os.ErrNotExist) {
		t.Error("a file written to the copy appeared in the original")
	}
	if ca, _ := c.Allocated(); ca < limit {
		t.Errorf("the copy holds %d bytes on the host, want its whole limit (%d) reserved", ca, limit)
	}

	for _, x := range []*Disk{d, c} {
		if err := x.Remove(); err != nil {
			t.Fatalf("Remove: %v", err)
		}
		assertGone(t, x)
		if err := x.Remove(); err != nil {
			t.Errorf("second Remove: %v", err)
		}
	}
}

// TestOverlay uses the disk the way a sandbox does: as the upper layer of
// an overlay, written through the overlay until it is full.
func TestOverlay(t *testing.T) {
	needDisks(t)
	d := create(t, 32<<20)
	base := t.TempDir()
	lower, merged := filepath.Join(base, "lower"), filepath.Join(base, "merged")
	for _, p := range []string{lower, merged} {
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(lower, "from-template"), []byte("t"), 0o644); err != nil {
		t.Fatal(err)
	}
	opts := "lowerdir=" + lower + ",upperdir=" + d.Upper() + ",workdir=" + d.Work()
	if err := unix.Mount("overlay", merged, "overlay", 0, opts); err != nil {
		t.Skipf("overlayfs is unavailable: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(merged, unix.MNT_DETACH) })

	if err := d.Unmount(); !errors.Is(err, sandbox.ErrState) {
		t.Errorf("Unmount under a live overlay: got %v, want ErrState", err)
	}
	n, err := fill(filepath.Join(merged, "big"))
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling through the overlay: got %v after %d bytes, want ENOSPC", err, n)
	}
	if err := os.Remove(filepath.Join(merged, "from-template")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Unmount(merged, 0); err != nil {
		t.Fatal(err)
	}
	if err := d.Unmount(); err != nil {
		t.Fatalf("Unmount after the overlay is gone: %v", err)
	}
	if err := d.Mount(); err != nil {
		t.Fatal(err)
	}
	// The overlay's whiteout for the deleted template file is kept.
	fi, err := os.Lstat(filepath.Join(d.Upper(), "from-template"))
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		t.Errorf("whiteout in the upper dir: %v, %v; want a character device", fi, err)
	}
}

func TestCreateErrors(t *testing.T) {
	needDisks(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		limit int64
		want  error
	}{
		{"negative", -1, sandbox.ErrInvalid},
		{"too small", 1 << 20, sandbox.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "disk")
			if _, err := Create(ctx, dir, tc.limit); !errors.Is(err, tc.want) {
				t.Errorf("Create(%d): got %v, want %v", tc.limit, err, tc.want)
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a failed Create left %s behind", dir)
			}
		})
	}
	t.Run("not empty", func(t *testing.T) {
		d := create(t, MinLimit)
		if _, err := Create(ctx, d.Dir(), MinLimit); !errors.Is(err, sandbox.ErrExist) {
			t.Errorf("Create over a disk: got %v, want ErrExist", err)
		}
		if m, _ := d.Mounted(); !m {
			t.Error("the failed Create unmounted the existing disk")
		}
	})
	t.Run("open missing", func(t *testing.T) {
		if _, err := Open(t.TempDir()); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("Open of an empty directory: got %v, want ErrNotFound", err)
		}
	})
}

func TestBusy(t *testing.T) {
	needDisks(t)
	d := create(t, MinLimit)
	f, err := os.Create(filepath.Join(d.Upper(), "open"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := d.Unmount(); !errors.Is(err, sandbox.ErrState) {
		t.Errorf("Unmount with an open file: got %v, want ErrState", err)
	}
	// Remove detaches lazily; the loop device goes when the file closes.
	if err := d.Remove(); err != nil {
		t.Fatalf("Remove with an open file: %v", err)
	}
	f.Close()
	assertGone(t, d)
}

func TestImageCache(t *testing.T) {
	needDisks(t)
	cache := t.TempDir()
	a := create(t, 128<<20, WithImageCache(cache))
	b := create(t, 128<<20, WithImageCache(cache))
	imgs, _ := filepath.Glob(filepath.Join(cache, "*.img"))
	if len(imgs) != 1 {
		t.Errorf("cache holds %v, want one image", imgs)
	}
	for _, d := range []*Disk{a, b} {
		if err := os.WriteFile(filepath.Join(d.Upper(), "f"), []byte(d.Dir()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(filepath.Join(a.Upper(), "f"))
	if err != nil || string(got) != a.Dir() {
		t.Errorf("disks made from one cached image share data: read %q, %v", got, err)
	}
	if _, total, _ := b.Usage(); total < 100<<20 {
		t.Errorf("a cached 128 MiB disk holds %d bytes", total)
	}
}

func TestUncapped(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("copying whiteouts and trusted xattrs needs root")
	}
	d := create(t, 0)
	if d.Image() != "" || d.Limit() != 0 {
		t.Errorf("uncapped disk: Image() = %q, Limit() = %d", d.Image(), d.Limit())
	}
	if err := d.Unmount(); err != nil {
		t.Fatal(err)
	}
	if err := d.Mount(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.Upper(), "f"), bytes.Repeat([]byte("x"), 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	wh := filepath.Join(d.Upper(), "whiteout")
	if err := unix.Mknod(wh, unix.S_IFCHR, 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(d.Upper(), "trusted.overlay.opaque", []byte("y"), 0); err != nil {
		t.Skipf("trusted xattrs unsupported here: %v", err)
	}
	used, total, err := d.Usage()
	if err != nil || used < 1<<20 || total != 0 {
		t.Errorf("Usage() = %d, %d, %v; want at least 1 MiB used, total 0", used, total, err)
	}
	c, err := d.Copy(context.Background(), filepath.Join(t.TempDir(), "fork"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Remove() })
	if fi, err := os.Lstat(filepath.Join(c.Upper(), "whiteout")); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		t.Errorf("copied whiteout: %v, %v", fi, err)
	}
	buf := make([]byte, 8)
	if n, err := unix.Getxattr(c.Upper(), "trusted.overlay.opaque", buf); err != nil || string(buf[:n]) != "y" {
		t.Errorf("copied opaque xattr: %q, %v", buf[:n], err)
	}
	if _, err := Open(c.Dir()); err != nil {
		t.Errorf("Open of the copy: %v", err)
	}
	for _, x := range []*Disk{d, c} {
		if err := x.Remove(); err != nil {
			t.Fatal(err)
		}
		assertGone(t, x)
	}
}

// TestConcurrent: many sandboxes start at once, racing for loop devices.
func TestConcurrent(t *testing.T) {
	needDisks(t)
	cache := t.TempDir()
	dir := t.TempDir()
	const n = 20
	disks := make([]*Disk, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			disks[i], errs[i] = Create(context.Background(), filepath.Join(dir, strconv.Itoa(i)), 64<<20, WithImageCache(cache))
			if errs[i] == nil {
				errs[i] = disks[i].Mount()
			}
		}()
	}
	wg.Wait()
	for i, d := range disks {
		if errs[i] != nil {
			t.Errorf("Create %d: %v", i, errs[i])
			continue
		}
		if err := os.WriteFile(filepath.Join(d.Upper(), "id"), []byte(strconv.Itoa(i)), 0o644); err != nil {
			t.Error(err)
		}
	}
	for i, d := range disks {
		if d == nil {
			continue
		}
		if got, err := os.ReadFile(filepath.Join(d.Upper(), "id")); err != nil || string(got) != strconv.Itoa(i) {
			t.Errorf("disk %d holds %q, %v", i, got, err)
		}
		if err := d.Remove(); err != nil {
			t.Error(err)
		}
		assertGone(t, d)
	}
}

// smallHost mounts a tmpfs of size bytes as a host filesystem to keep
// disks on, removed at the end of the test.
func smallHost(t *testing.T, size int64) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+strconv.FormatInt(size, 10)); err != nil {
		t.Skipf("mounting a tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// TestReserve: a disk holds its whole limit on the host from the start,
// so the host refuses one it cannot back (without naming a path), and a
// host filled from outside costs a disk none of its space.
func TestReserve(t *testing.T) {
	needDisks(t)
	ctx := context.Background()
	host := smallHost(t, 256<<20)
	a, err := Create(ctx, filepath.Join(host, "a"), 96<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Remove() })
	if err := a.Mount(); err != nil {
		t.Fatal(err)
	}
	if _, err := Create(ctx, filepath.Join(host, "b"), 96<<20); err != nil {
		t.Fatalf("a second disk that fits: %v", err)
	}
	_, err = Create(ctx, filepath.Join(host, "c"), 96<<20)
	var se *SpaceError
	if !errors.Is(err, sandbox.ErrLimit) || !errors.As(err, &se) {
		t.Fatalf("a third 96 MiB disk on a 256 MiB host: %v, want a SpaceError (ErrLimit)", err)
	}
	if strings.Contains(err.Error(), host) || strings.Contains(err.Error(), "/dev/") {
		t.Errorf("the refusal names a host path: %v", err)
	}
	if _, err := os.Stat(filepath.Join(host, "c")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused disk left its directory")
	}
	if _, err := a.Copy(ctx, filepath.Join(host, "fork")); !errors.Is(err, sandbox.ErrLimit) {
		t.Errorf("copying a disk the host cannot back: %v, want ErrLimit", err)
	}

	// Fill the host from outside; the disk still takes its whole limit.
	if _, err := fill(filepath.Join(host, "filler")); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling the host: %v", err)
	}
	n, err := fill(filepath.Join(a.Upper(), "big"))
	if !errors.Is(err, syscall.ENOSPC) || n < 80<<20 {
		t.Fatalf("filling the disk on a full host: %d bytes, then %v; want about 90 MiB, then ENOSPC", n, err)
	}
	if err := a.Unmount(); err != nil {
		t.Fatalf("unmounting on a full host: %v", err)
	}
	if err := a.Reserve(); err != nil {
		t.Errorf("Reserve of a reserved disk on a full host: %v", err)
	}
	if err := a.Mount(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(a.Upper(), "big"))
	if err != nil || fi.Size() != n {
		t.Errorf("after a remount on a full host the file is %v (%v), want %d bytes", fi, err, n)
	}
}
