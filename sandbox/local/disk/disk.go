// Package disk gives a sandbox its own size-capped disk: the filesystem
// that holds its overlay's upper and work directories, so everything the
// sandbox writes lands there and a full disk gives its writers ENOSPC while
// the host's filesystem is untouched.
//
// A capped disk is a file formatted as ext4 and mounted through a loop
// device. Of the ways to cap a directory this is the one that works on any
// host filesystem: project quotas need the state directory's filesystem
// mounted with prjquota (ext4) or pquota (XFS), which hosts rarely are; a
// tmpfs with size= is memory, not disk, and loses its contents when the
// sandbox stops. The image file is the disk: it survives Unmount, so a
// stopped sandbox keeps its files, a resume mounts it again, a fork copies
// it.
//
// The image holds its whole limit on the host from the start (fallocate:
// the blocks are reserved, not written, so this takes about a millisecond
// whatever the size). A sparse image would cost only the blocks written,
// but then the limits of all sandboxes could add up to more than the host
// has, and the sandbox that filled its own allowance would fill the host:
// the other sandboxes' next writes would fail inside their filesystems
// (EIO, journal aborts: lost data), and so would the host's own. Reserved
// up front, a disk that the host cannot back is refused when it is made
// (ErrLimit, see SpaceError), the host's filesystem does the accounting
// for every sandbox on it, whichever state directory or Cove install made
// them, and a full host costs no sandbox its data. Filesystems without
// fallocate keep sparse images (without that guarantee); on btrfs, whose
// copy-on-write needs new blocks for every write, it holds only with
// nodatacow.
//
// Times measured for a 2 GiB disk on a 2-CPU VM (medians): formatting with
// mkfs.ext4 takes about 5 ms whatever the size, since the options write
// only about 130 KB; WithImageCache keeps one pristine (sparse) image per
// size and copies it instead (0.3 ms). Mount takes about 1 ms (the loop
// device uses direct I/O, so the first mount of a copied image flushes
// its blocks first), Unmount about 3 ms (sync, unmount, wait for the loop
// device to be freed), Remove about 2 ms. A limit of 0 makes an uncapped
// disk: plain directories on the host's filesystem behind the same API,
// with no cap and nothing reserved.
//
// Mounts are made in the caller's mount namespace (a thread's, for a
// caller that unshared one), under the disk's directory; Create does not
// mount. A disk mounted in a namespace other than the caller's is reached
// through Via. The package needs root (CAP_SYS_ADMIN), /dev/loop-control
// and mkfs.ext4 (Debian's e2fsprogs); Available says whether they are
// there. Methods of a Disk are safe for concurrent use; two Disk values (or
// processes) operating on the same directory at once are not coordinated.
package disk

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/mountinfo"
)

// MinLimit is the smallest disk limit: ext4's own structures (journal,
// inode tables) need a few MiB.
const MinLimit = 16 << 20

// Files and directories inside a disk's directory.
const (
	imageName = "disk.img" // the ext4 image of a capped disk
	mntName   = "mnt"      // where it is mounted; holds upper and work
)

// ioctls to freeze and thaw a filesystem (<linux/fs.h>).
const (
	fiFreeze = 0xC0045877 // FIFREEZE: _IOWR('X', 119, int)
	fiThaw   = 0xC0045878 // FITHAW: _IOWR('X', 120, int)
)

// KeepFree is the space a disk's reservation leaves free on the host's
// filesystem, beyond what root alone may use there: room for the
// runtime's own state, logs and databases. A disk that would leave less
// is refused.
const KeepFree = 32 << 20

// detachWait bounds the wait for the kernel to free an autoclear loop
// device after an unmount. Freeing is quick on an idle host, but the
// kernel flushes the image first: a full disk on a busy host has taken
// over 2 s, so the wait is generous (it ends as soon as the device is
// free).
const detachWait = 30 * time.Second

// Disk is one sandbox's disk, kept in its own directory.
type Disk struct {
	dir   string
	limit int64 // 0: uncapped, plain directories
	// view is prefixed to the mount point's path for what looks at the
	// mount (a /proc/PID/root when it is in another mount namespace); ""
	// in the caller's.
	view string

	// mu serializes Mount, Unmount, Copy and Remove.
	mu sync.Mutex
}

// Option changes how Create makes a disk.
type Option func(*options)

type options struct {
	cache string
}

// WithImageCache keeps a pristine formatted image of each size in dir and
// makes new disks by copying it (sparse) instead of running mkfs.ext4:
// making the image drops from about 5 ms to 0.3 ms once one of that size
// exists. Every disk copied from one image shares its filesystem UUID,
// which ext4 does not mind.
func WithImageCache(dir string) Option {
	return func(o *options) { o.cache = dir }
}

// Available reports whether capped disks can be made here: nil, or an
// error wrapping sandbox.ErrUnavailable that says what is missing.
func Available() error {
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		return fmt.Errorf("mkfs.ext4 is missing (%w): install e2fsprogs: %w", err, sandbox.ErrUnavailable)
	}
	f, err := os.OpenFile(loopControl, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return loopUnavailable(err)
	}
	defer f.Close()
	if _, err := unix.IoctlRetInt(int(f.Fd()), unix.LOOP_CTL_GET_FREE); err != nil {
		return loopUnavailable(fmt.Errorf("finding a free loop device: %w", err))
	}
	return nil
}

// Create makes a disk capped at limit bytes in dir, which must be missing
// or empty and then belongs to the disk (Remove deletes it), with its
// whole limit reserved on the host's filesystem. It does not mount it:
// Mount it in the mount namespace that is to hold it, and Upper and Work
// are then ready for an overlay mount. limit is rounded down to 4 KiB;
// the filesystem's own structures (journal, inode tables) take some of
// it: about 12% of a 64 MiB disk, 3% of 2 GiB. A limit of 0 makes an
// uncapped disk (its directories are there at once).
//
// Errors: ErrInvalid for a negative limit or one below MinLimit, ErrExist
// if dir is not empty, ErrUnavailable when mkfs.ext4 is missing, ErrLimit
// (a *SpaceError) when the host cannot back the limit. On error nothing is
// left behind, dir included.
func Create(ctx context.Context, dir string, limit int64, opts ...Option) (_ *Disk, err error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if limit < 0 || (limit > 0 && limit < MinLimit) {
		return nil, fmt.Errorf("creating disk: limit %d bytes: a disk limit must be 0 (none) or at least %d MiB: %w", limit, MinLimit>>20, sandbox.ErrInvalid)
	}
	limit &^= blockSize - 1
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return nil, fmt.Errorf("creating disk in %s: the directory is not empty (a disk there already?): %w", dir, sandbox.ErrExist)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating disk in %s: %w", dir, mapFull(err))
	}
	d := &Disk{dir: dir, limit: limit}
	defer func() {
		if err != nil {
			d.Remove()
		}
	}()

	if limit == 0 {
		for _, p := range []string{d.mnt(), d.Upper()} {
			if err := os.Mkdir(p, 0o755); err != nil {
				return nil, fmt.Errorf("creating disk in %s: %w", dir, mapFull(err))
			}
			// The upper dir's mode becomes the mode of the sandbox's "/",
			// whatever the umask.
			if err := os.Chmod(p, 0o755); err != nil {
				return nil, fmt.Errorf("creating disk in %s: %w", dir, err)
			}
		}
		if err := os.Mkdir(d.Work(), 0o700); err != nil {
			return nil, fmt.Errorf("creating disk in %s: %w", dir, mapFull(err))
		}
		return d, nil
	}

	if err := admit(dir, limit); err != nil {
		return nil, err
	}
	if err := os.Mkdir(d.mnt(), 0o755); err != nil {
		return nil, fmt.Errorf("creating disk in %s: %w", dir, mapFull(err))
	}
	if o.cache != "" {
		err = copyFromCache(ctx, o.cache, d.image(), limit)
	} else {
		err = format(ctx, d.image(), limit)
	}
	if err != nil {
		return nil, fmt.Errorf("creating disk in %s: %w", dir, err)
	}
	if err := d.allocate(); err != nil {
		return nil, err
	}
	return d, nil
}

// SpaceError is the ErrLimit of a disk the host's filesystem cannot back.
// Its message names sizes, never a path.
type SpaceError struct {
	// Need is the space the disk still needs reserved.
	Need int64
	// Free is the space free on the host's filesystem (for users other
	// than root), and Keep what of it stays free (KeepFree).
	Free, Keep int64
}

func (e *SpaceError) Error() string {
	return fmt.Sprintf("the host has too little disk space to promise this sandbox its disk: it needs %s more, %s is free and %s of that stays free for the host (a sandbox's disk holds its whole limit from the start, so no sandbox can take another's space); ask for a smaller disk or delete sandboxes you no longer need",
		size(e.Need), size(max(e.Free, 0)), size(e.Keep))
}

// Is makes a SpaceError a sandbox.ErrLimit.
func (e *SpaceError) Is(target error) bool { return target == sandbox.ErrLimit }

// size renders n bytes in MiB or GiB.
func size(n int64) string {
	if n >= 10<<30 {
		return strconv.FormatInt(n>>30, 10) + " GiB"
	}
	return strconv.FormatInt((n+(1<<20)-1)>>20, 10) + " MiB"
}

// admit checks that the filesystem holding dir (or its nearest existing
// parent) can reserve need more bytes and still keep KeepFree free.
func admit(dir string, need int64) error {
	if need <= 0 {
		return nil
	}
	var st unix.Statfs_t
	for p := dir; ; p = filepath.Dir(p) {
		err := unix.Statfs(p, &st)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.ENOENT) || p == filepath.Dir(p) {
			return fmt.Errorf("measuring the host's free space for disk %s: %w", dir, err)
		}
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	if free-need < KeepFree {
		return &SpaceError{Need: need, Free: free, Keep: KeepFree}
	}
	return nil
}

// allocate reserves every block of the disk's image on the host's
// filesystem: a host that fills up later cannot fail the sandbox's
// writes. The blocks are reserved as unwritten extents (read as zeros,
// nothing written now). A clone sharing blocks with another file (a
// reflink copy on XFS) is unshared first, since writing a shared block
// needs a new one. On a filesystem without fallocate the image stays
// sparse.
func (d *Disk) allocate() error {
	f, err := os.OpenFile(d.image(), os.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("reserving disk %s: %w", d.dir, err)
	}
	defer f.Close()
	const unshare = 0x40 // FALLOC_FL_UNSHARE_RANGE (Linux 4.20)
	unix.Fallocate(int(f.Fd()), unshare, 0, d.limit)
	err = unix.Fallocate(int(f.Fd()), 0, 0, d.limit)
	switch {
	case errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS):
		return nil
	case errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT):
		// Another reservation took the space since admit looked.
		var st unix.Statfs_t
		unix.Fstatfs(int(f.Fd()), &st)
		return &SpaceError{Need: d.limit, Free: int64(st.Bavail) * int64(st.Bsize), Keep: KeepFree}
	case err != nil:
		return fmt.Errorf("reserving disk %s: %w", d.dir, err)
	}
	return nil
}

// Reserve makes sure the disk's whole limit is reserved on the host, as
// Create and Copy leave it: a no-op for those, and for an uncapped disk;
// a disk made sparse (by an older Cove) gets its blocks now. A resume
// calls it before mounting. ErrLimit (a *SpaceError) when the host cannot
// back the rest.
func (d *Disk) Reserve() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.limit == 0 {
		return nil
	}
	held, err := d.allocated()
	if err != nil {
		return err
	}
	if held >= d.limit {
		return nil
	}
	if err := admit(d.dir, d.limit-held); err != nil {
		return err
	}
	return d.allocate()
}

// Via returns the disk as seen through root, the root directory of
// another mount namespace (/proc/PID/root of a process in it): Mounted,
// Usage and Copy's freeze then look at the mount there. Upper and Work
// stay the paths inside that namespace.
func (d *Disk) Via(root string) *Disk {
	return &Disk{dir: d.dir, limit: d.limit, view: root}
}

// WaitFree waits up to timeout until no loop device holds the disk's
// image (the kernel frees one only when the filesystem's last mount, in
// any mount namespace, is gone), and says whether one still does: an
// error wrapping ErrUnavailable, naming no device or path, for a caller
// to pass on to a tenant.
func (d *Disk) WaitFree(timeout time.Duration) error {
	if d.limit == 0 {
		return nil
	}
	if devs := waitDetached(d.image(), timeout); len(devs) > 0 {
		return fmt.Errorf("the sandbox's disk is still in use on the host (a process outside the sandbox holds its filesystem); it cannot be mounted again until that ends: %w", sandbox.ErrUnavailable)
	}
	return nil
}

// copyFromCache copies the cached pristine image of this size to image,
// formatting it first if the cache has none. Concurrent callers may each
// format one; the last rename wins and every copy is valid.
func copyFromCache(ctx context.Context, cache, image string, size int64) error {
	// v2: the upper dir's mode is set whatever the umask of the process
	// that formatted it.
	cached := filepath.Join(cache, "ext4-v2-"+strconv.FormatInt(size, 10)+".img")
	if _, err := os.Stat(cached); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(cache, 0o700); err != nil {
			return mapFull(err)
		}
		tmp := fmt.Sprintf("%s.%d-%d.tmp", cached, os.Getpid(), time.Now().UnixNano())
		if err := format(ctx, tmp, size); err != nil {
			return err
		}
		if err := os.Rename(tmp, cached); err != nil {
			os.Remove(tmp)
			return err
		}
	}
	return copySparse(ctx, image, cached)
}

// Open returns the disk kept in dir (mounted or not). ErrNotFound if dir
// holds none.
func Open(dir string) (*Disk, error) {
	fi, err := os.Stat(filepath.Join(dir, imageName))
	if err == nil {
		return &Disk{dir: dir, limit: fi.Size()}, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("opening disk in %s: %w", dir, err)
	}
	if fi, err := os.Stat(filepath.Join(dir, mntName, "upper")); err == nil && fi.IsDir() {
		return &Disk{dir: dir}, nil
	}
	return nil, fmt.Errorf("opening disk in %s: no disk there: %w", dir, sandbox.ErrNotFound)
}

// Dir is the disk's directory.
func (d *Disk) Dir() string { return d.dir }

// Limit is the disk's size in bytes; 0 for an uncapped disk.
func (d *Disk) Limit() int64 { return d.limit }

// Upper is the directory to use as the overlay's upperdir. It is on the
// capped filesystem only while the disk is mounted.
func (d *Disk) Upper() string { return filepath.Join(d.mnt(), "upper") }

// Work is the directory to use as the overlay's workdir, on the same
// filesystem as Upper.
func (d *Disk) Work() string { return filepath.Join(d.mnt(), "work") }

// Image is the path of the disk's image file; "" for an uncapped disk.
func (d *Disk) Image() string {
	if d.limit == 0 {
		return ""
	}
	return d.image()
}

func (d *Disk) mnt() string   { return filepath.Join(d.dir, mntName) }
func (d *Disk) image() string { return filepath.Join(d.dir, imageName) }

// seen is the mount point's path as the caller reaches it (see Via).
func (d *Disk) seen() string { return d.view + d.mnt() }

// Mounted reports whether the disk's filesystem is mounted (in the
// caller's mount namespace). An uncapped disk is always mounted.
func (d *Disk) Mounted() (bool, error) {
	if d.limit == 0 {
		return true, nil
	}
	return isMountPoint(d.seen())
}

// isMountPoint reports whether something is mounted on dir: its device
// differs from its parent's.
func isMountPoint(dir string) (bool, error) {
	var st, parent unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return false, err
	}
	if err := unix.Stat(filepath.Dir(dir), &parent); err != nil {
		return false, err
	}
	return st.Dev != parent.Dev, nil
}

// Mount mounts the disk's filesystem (after Unmount, or in a new process
// after a restart) so Upper and Work are on it again. Mounting a mounted
// disk does nothing. ErrState if the image is still bound to a loop device
// that is not mounted here (a sandbox's mount namespace may still hold
// it: stop the sandbox first); mounting the same image twice would
// corrupt it.
func (d *Disk) Mount() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.limit == 0 {
		return nil
	}
	mounted, err := isMountPoint(d.mnt())
	if err != nil {
		return fmt.Errorf("mounting disk %s: %w", d.dir, err)
	}
	if mounted {
		return nil
	}
	if devs := waitDetached(d.image(), time.Second); len(devs) > 0 {
		return fmt.Errorf("mounting disk %s: its image is still in use through /dev/%s (a sandbox process may still hold it): stop the sandbox and try again: %w", d.dir, strings.Join(devs, ", /dev/"), sandbox.ErrState)
	}
	dev, err := attachLoop(d.image())
	if err != nil {
		return fmt.Errorf("mounting disk %s: %w", d.dir, err)
	}
	// Closing the device after the mount leaves the mount its only user,
	// so the autoclear flag frees the device at unmount; after a failed
	// mount, closing frees it at once.
	defer dev.Close()
	if err := unix.Mount(dev.Name(), d.mnt(), "ext4", unix.MS_NOATIME|unix.MS_NODEV|unix.MS_NOSUID, ""); err != nil {
		return fmt.Errorf("mounting disk %s (%s on %s): %w (if the image is damaged, e2fsck -fy %s may repair it)", d.dir, dev.Name(), d.mnt(), err, d.image())
	}
	return nil
}

// Unmount unmounts the disk's filesystem, keeping its image (and its
// reservation: no blocks are given back), and waits until its loop device
// is free. Unmounting an unmounted disk does nothing. ErrState while
// something still uses it (the sandbox's overlay in this mount namespace,
// an open file, a copy of the mount in another namespace): stop the
// sandbox first.
func (d *Disk) Unmount() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.unmountLocked(false)
}

func (d *Disk) unmountLocked(lazy bool) error {
	if d.limit == 0 {
		return nil
	}
	mounted, err := isMountPoint(d.mnt())
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("unmounting disk %s: %w", d.dir, err)
	}
	if mounted {
		if !lazy {
			// The overlay keeps the filesystem alive after its own
			// mount is gone: refuse rather than leave it half-unmounted.
			if users := overlaysOn(d.mnt()); len(users) > 0 {
				return fmt.Errorf("unmounting disk %s: the overlay on %s uses it: stop the sandbox first: %w", d.dir, users[0], sandbox.ErrState)
			}
		}
		err := unix.Unmount(d.mnt(), 0)
		if errors.Is(err, unix.EBUSY) && lazy {
			err = unix.Unmount(d.mnt(), unix.MNT_DETACH)
		}
		if errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("unmounting disk %s: it is in use (the sandbox's overlay or an open file): stop the sandbox first: %w", d.dir, sandbox.ErrState)
		}
		if err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("unmounting disk %s: %w", d.dir, err)
		}
	}
	if lazy {
		return nil
	}
	if devs := waitDetached(d.image(), detachWait); len(devs) > 0 {
		return fmt.Errorf("unmounting disk %s: its image is still bound to /dev/%s (mounted in another mount namespace?): stop the sandbox first: %w", d.dir, strings.Join(devs, ", /dev/"), sandbox.ErrState)
	}
	return nil
}

// Usage returns the bytes in use on the disk and the bytes it can hold,
// as df shows them inside the sandbox (the filesystem's own structures
// count in neither). It works mounted or not: an unmounted disk is read
// from its image's superblock. An uncapped disk reports the bytes its
// directories take on the host and a total of 0.
func (d *Disk) Usage() (used, total int64, err error) {
	if d.limit == 0 {
		used, err = duBytes(d.mnt())
		if err != nil {
			return 0, 0, fmt.Errorf("measuring disk %s: %w", d.dir, err)
		}
		return used, 0, nil
	}
	mounted, err := isMountPoint(d.seen())
	if err != nil {
		return 0, 0, fmt.Errorf("measuring disk %s: %w", d.dir, err)
	}
	if !mounted {
		used, total, err = superblockUsage(d.image())
		if err != nil {
			return 0, 0, fmt.Errorf("measuring disk %s: %w", d.dir, err)
		}
		return used, total, nil
	}
	var st unix.Statfs_t
	if err := unix.Statfs(d.seen(), &st); err != nil {
		return 0, 0, fmt.Errorf("measuring disk %s: %w", d.dir, err)
	}
	bs := int64(st.Bsize)
	return (int64(st.Blocks) - int64(st.Bfree)) * bs, int64(st.Blocks) * bs, nil
}

// Allocated returns the bytes the disk takes on the host's filesystem:
// its image's blocks (its whole limit, reserved, where the host has
// fallocate), or the blocks of an uncapped disk's directories.
func (d *Disk) Allocated() (int64, error) {
	if d.limit == 0 {
		return duBytes(d.mnt())
	}
	return d.allocated()
}

func (d *Disk) allocated() (int64, error) {
	var st unix.Stat_t
	if err := unix.Stat(d.image(), &st); err != nil {
		return 0, fmt.Errorf("measuring disk %s: %w", d.dir, err)
	}
	return st.Blocks * 512, nil
}

// duBytes sums the allocated blocks of the files under dir, hard links
// counted once. The tree is the tenant's and changes while it is walked:
// each directory is opened by descriptor, relative to its parent's and
// without following a link, so a directory swapped for a symlink (to the
// host's /) mid-walk is counted as the link, never walked through.
func duBytes(dir string) (int64, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return 0, err
	}
	du := &diskUse{seen: map[[2]uint64]bool{}, total: st.Blocks * 512}
	err = du.dir(fd)
	return du.total, err
}

// diskUse is duBytes's walk.
type diskUse struct {
	seen  map[[2]uint64]bool // hard-linked files counted, by device and inode
	total int64
}

// dir adds what the open directory fd holds, and closes it.
func (du *diskUse) dir(fd int) error {
	f := os.NewFile(uintptr(fd), "dir")
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if errors.Is(err, unix.ENOENT) {
		return nil // removed while we walked
	}
	if err != nil {
		return err
	}
	for _, name := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // removed while we walked
			}
			return err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
				continue // removed or replaced while we walked
			}
			if err != nil {
				return err
			}
			du.total += st.Blocks * 512
			if err := du.dir(sub); err != nil {
				return err
			}
			continue
		}
		if st.Nlink > 1 {
			k := [2]uint64{st.Dev, st.Ino}
			if du.seen[k] {
				continue
			}
			du.seen[k] = true
		}
		du.total += st.Blocks * 512
	}
	return nil
}

// Copy copies the disk into dst, a new directory, for a fork: the new disk
// has the same limit and contents, its whole limit reserved as Create's,
// and is not mounted (Mount it). A mounted disk (seen through Via when it
// is in another mount namespace) is frozen during the copy (its writers
// block for that long), so the copy is consistent. Only the image's data
// is copied, cloned where the host filesystem can share blocks. ErrExist
// if dst exists, ErrLimit (a *SpaceError) when the host cannot back the
// copy.
func (d *Disk) Copy(ctx context.Context, dst string) (_ *Disk, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return nil, fmt.Errorf("copying disk %s to %s: %w", d.dir, dst, mapFull(err))
	}
	if err := os.Mkdir(dst, 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			err = fmt.Errorf("%w: %w", err, sandbox.ErrExist)
		}
		return nil, fmt.Errorf("copying disk %s to %s: %w", d.dir, dst, mapFull(err))
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dst)
		}
	}()
	nd := &Disk{dir: dst, limit: d.limit}
	if err := admit(dst, d.limit); err != nil {
		return nil, err
	}
	if d.limit == 0 {
		// The sandbox may be changing its upper dir meanwhile: copyTree
		// follows none of its links (cp -a could, between its lstat and
		// its opendir).
		if err := copyUncapped(ctx, d, nd); err != nil {
			return nil, fmt.Errorf("copying disk %s to %s: %w", d.dir, dst, err)
		}
		return nd, nil
	}
	if err := os.Mkdir(nd.mnt(), 0o755); err != nil {
		return nil, fmt.Errorf("copying disk %s to %s: %w", d.dir, dst, mapFull(err))
	}
	mounted, err := isMountPoint(d.seen())
	if err != nil {
		return nil, fmt.Errorf("copying disk %s to %s: %w", d.dir, dst, err)
	}
	if mounted {
		thaw, err := freeze(d.seen())
		if err != nil {
			return nil, fmt.Errorf("copying disk %s to %s: %w", d.dir, dst, err)
		}
		defer thaw()
	}
	if err := copySparse(ctx, nd.image(), d.image()); err != nil {
		return nil, fmt.Errorf("copying disk %s to %s: %w", d.dir, dst, err)
	}
	if err := nd.allocate(); err != nil {
		return nil, err
	}
	return nd, nil
}

// freeze flushes the filesystem mounted on dir and blocks its writers
// until the returned thaw is called.
func freeze(dir string) (thaw func(), err error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	if err := unix.IoctlSetInt(int(f.Fd()), fiFreeze, 0); err != nil {
		f.Close()
		if errors.Is(err, unix.EBUSY) {
			return nil, fmt.Errorf("freezing %s: it is frozen already (another copy running?): %w", dir, sandbox.ErrState)
		}
		return nil, fmt.Errorf("freezing %s: %w", dir, err)
	}
	return func() {
		unix.IoctlSetInt(int(f.Fd()), fiThaw, 0)
		f.Close()
	}, nil
}

// overlaysOn returns the overlay mounts (in the calling thread's mount
// namespace) whose upper or work dir is under dir.
func overlaysOn(dir string) []string {
	mounts, err := mountinfo.Read("/proc/thread-self/mountinfo")
	if err != nil {
		return nil
	}
	var users []string
	for _, m := range mounts {
		if m.FSType != "overlay" {
			continue
		}
		if up, ok := m.Super["upperdir"]; ok && mountinfo.Within(dir, up) {
			users = append(users, m.Point)
		} else if w, ok := m.Super["workdir"]; ok && mountinfo.Within(dir, w) {
			users = append(users, m.Point)
		}
	}
	return users
}

// Remove frees everything the disk holds: it unmounts the filesystem
// (detaching it lazily if it is busy, so the last user frees it), which
// frees the loop device, and deletes the image and the disk's directory.
// Removing a removed disk does nothing.
func (d *Disk) Remove() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.unmountLocked(true); err != nil {
		return fmt.Errorf("removing disk %s: %w", d.dir, err)
	}
	if d.limit != 0 {
		if mounted, err := isMountPoint(d.mnt()); err == nil && mounted {
			return fmt.Errorf("removing disk %s: it is still mounted on %s: %w", d.dir, d.mnt(), sandbox.ErrState)
		}
	}
	if err := os.RemoveAll(d.dir); err != nil {
		return fmt.Errorf("removing disk %s: %w", d.dir, err)
	}
	return nil
}
