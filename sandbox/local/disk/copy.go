package disk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/internal/sbutil"
)

// copySparse copies the file src to a new file dst and keeps its holes: a
// 2 GiB image holding 50 MB of data costs 50 MB to copy and to store. It
// clones the file when the filesystem shares extents (FICLONE: btrfs, XFS
// with reflink), else copies each data extent found with SEEK_DATA and
// SEEK_HOLE using copy_file_range, so the bytes stay in the kernel. ctx is
// checked between extents.
func copySparse(ctx context.Context, dst, src string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY|unix.O_CLOEXEC, fi.Mode().Perm())
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(dst)
		}
	}()
	return copyData(ctx, out, in, fi.Size())
}

// copyData copies the size bytes of in to the new, empty file out, keeping
// holes, cloning the extents where the filesystem can.
func copyData(ctx context.Context, out, in *os.File, size int64) error {
	if unix.IoctlFileClone(int(out.Fd()), int(in.Fd())) == nil {
		return nil
	}
	if err := out.Truncate(size); err != nil {
		return mapFull(err)
	}
	for off := int64(0); off < size; {
		if err := ctx.Err(); err != nil {
			return err
		}
		data, err := unix.Seek(int(in.Fd()), off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole is left
		}
		if err != nil {
			return fmt.Errorf("finding data in %s: %w", in.Name(), err)
		}
		hole, err := unix.Seek(int(in.Fd()), data, unix.SEEK_HOLE)
		if err != nil {
			return fmt.Errorf("finding holes in %s: %w", in.Name(), err)
		}
		if err := copyRange(out, in, data, hole-data); err != nil {
			return mapFull(err)
		}
		off = hole
	}
	return nil
}

// copyUncapped copies an uncapped disk's directories into nd's: the
// upper dir whole, and a new, empty work dir (overlayfs keeps only
// scratch state there).
func copyUncapped(ctx context.Context, d, nd *Disk) error {
	if err := os.Mkdir(nd.mnt(), 0o755); err != nil {
		return mapFull(err)
	}
	if err := copyTree(ctx, d.Upper(), nd.Upper()); err != nil {
		return err
	}
	return mapFull(os.Mkdir(nd.Work(), 0o700))
}

// copyTree copies the directory tree src (an uncapped disk's upper dir)
// to dst, a new directory, keeping what an overlay upper dir holds: owners,
// modes, times, extended attributes (trusted.overlay.* of opaque and
// redirected directories included), hard links within the tree, holes,
// symlinks as symlinks, whiteouts (0/0 character devices) and fifos.
// Sockets and other device nodes are left out (a sandbox can make no
// device node; a socket is no data).
//
// src is the sandbox's own disk, which its root may change while it is
// copied (when the host has no freezer) and has filled with symlinks to
// host paths. So nothing is reached by a path below src: each entry is
// opened O_PATH|O_NOFOLLOW relative to its parent's descriptor, and what
// is done with it depends only on the inode that descriptor holds (a
// directory is entered through it, a file read through it, a symlink read
// as a link). An entry swapped for a symlink mid-copy is copied as that
// symlink; the copy never reads or lists anything outside src. dst is new
// and only this copy writes it.
func copyTree(ctx context.Context, src, dst string) error {
	sfd, err := unix.Open(src, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("copying %s: %w", src, err)
	}
	defer unix.Close(sfd)
	var st unix.Stat_t
	if err := unix.Fstat(sfd, &st); err != nil {
		return fmt.Errorf("copying %s: %w", src, err)
	}
	if err := os.Mkdir(dst, 0o700); err != nil {
		return fmt.Errorf("copying %s: %w", src, mapFull(err))
	}
	dfd, err := unix.Open(dst, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("copying %s: %w", src, err)
	}
	defer unix.Close(dfd)
	t := &treeCopy{ctx: ctx, dstRoot: dfd, links: map[[2]uint64]string{}}
	if err := t.dir(sfd, dfd, ""); err != nil {
		return fmt.Errorf("copying %s: %w", src, err)
	}
	// The root's own metadata: dst is dfd, reached as "." from itself.
	if err := t.meta(sfd, &st, dfd, ".", dfd); err != nil {
		return fmt.Errorf("copying %s: %w", src, err)
	}
	return nil
}

type treeCopy struct {
	ctx     context.Context
	dstRoot int
	// links maps the (dev, ino) of a non-directory with several links to
	// its first copy's path relative to dstRoot.
	links map[[2]uint64]string
}

// dir copies the entries of the directory sdir (a readable descriptor)
// into ddir; rel is ddir's path relative to dstRoot.
func (t *treeCopy) dir(sdir, ddir int, rel string) error {
	rfd, err := unix.Dup(sdir)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(rfd), rel)
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := t.ctx.Err(); err != nil {
			return err
		}
		if err := t.entry(sdir, ddir, name, path.Join(rel, name)); err != nil {
			return err
		}
	}
	return nil
}

func (t *treeCopy) entry(sdir, ddir int, name, rel string) error {
	fd, err := unix.Openat(sdir, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil // removed since it was listed
	}
	if err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	mode := st.Mode & unix.S_IFMT
	if mode != unix.S_IFDIR && st.Nlink > 1 {
		key := [2]uint64{st.Dev, st.Ino}
		if first, ok := t.links[key]; ok {
			if err := unix.Linkat(t.dstRoot, first, ddir, name, 0); err != nil {
				return fmt.Errorf("%s: %w", rel, mapFull(err))
			}
			return nil
		}
		t.links[key] = rel
	}
	switch mode {
	case unix.S_IFDIR:
		// "." of the descriptor: this very directory, readable.
		rd, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		defer unix.Close(rd)
		if err := unix.Mkdirat(ddir, name, 0o700); err != nil {
			return fmt.Errorf("%s: %w", rel, mapFull(err))
		}
		out, err := unix.Openat(ddir, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		defer unix.Close(out)
		if err := t.dir(rd, out, rel); err != nil {
			return err
		}
		return t.meta(rd, &st, ddir, name, out)
	case unix.S_IFREG:
		// Through the descriptor's own inode, never the name again.
		in, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", fd), os.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		defer in.Close()
		ofd, err := unix.Openat(ddir, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, mapFull(err))
		}
		out := os.NewFile(uintptr(ofd), rel)
		defer out.Close()
		if err := copyData(t.ctx, out, in, st.Size); err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		return t.meta(int(in.Fd()), &st, ddir, name, ofd)
	case unix.S_IFLNK:
		target, err := sbutil.Readlinkat(fd, "")
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		if err := unix.Symlinkat(target, ddir, name); err != nil {
			return fmt.Errorf("%s: %w", rel, mapFull(err))
		}
		return t.meta(-1, &st, ddir, name, -1)
	case unix.S_IFCHR, unix.S_IFIFO:
		if mode == unix.S_IFCHR && st.Rdev != 0 {
			return nil // not a whiteout: a device node, never copied
		}
		if err := unix.Mknodat(ddir, name, st.Mode, 0); err != nil {
			return fmt.Errorf("%s: %w", rel, mapFull(err))
		}
		return t.meta(-1, &st, ddir, name, -1)
	}
	return nil // sockets, block devices
}

// meta gives the copy named name in ddir the owner, mode, extended
// attributes and times of st. in and out are readable descriptors of the
// source and the copy when the entry is a directory or a regular file,
// -1 otherwise (symlinks, whiteouts and fifos carry no attributes here).
func (t *treeCopy) meta(in int, st *unix.Stat_t, ddir int, name string, out int) error {
	if out >= 0 {
		if err := unix.Fchown(out, int(st.Uid), int(st.Gid)); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		// After chown, which clears the setuid and setgid bits.
		if err := unix.Fchmod(out, st.Mode&0o7777); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := copyXattrs(in, out); err != nil {
			return fmt.Errorf("%s: %w", name, mapFull(err))
		}
	} else {
		if err := unix.Fchownat(ddir, name, int(st.Uid), int(st.Gid), unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFLNK {
			if err := unix.Fchmodat(ddir, name, st.Mode&0o7777, 0); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	if err := unix.UtimesNanoAt(ddir, name, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// copyXattrs copies every extended attribute of in to out.
func copyXattrs(in, out int) error {
	size, err := unix.Flistxattr(in, nil)
	if errors.Is(err, unix.ENOTSUP) || size <= 0 {
		return nil
	}
	if err != nil {
		return err
	}
	buf := make([]byte, size)
	if size, err = unix.Flistxattr(in, buf); err != nil {
		return err
	}
	for _, name := range strings.Split(strings.TrimRight(string(buf[:size]), "\x00"), "\x00") {
		if name == "" {
			continue
		}
		n, err := unix.Fgetxattr(in, name, nil)
		if errors.Is(err, unix.ENODATA) {
			continue
		}
		if err != nil {
			return err
		}
		val := make([]byte, n)
		if n, err = unix.Fgetxattr(in, name, val); err != nil {
			return err
		}
		if err := unix.Fsetxattr(out, name, val[:n], 0); err != nil {
			return fmt.Errorf("setting %s: %w", name, err)
		}
	}
	return nil
}

// copyRange copies n bytes at off from in to the same offset of out.
func copyRange(out, in *os.File, off, n int64) error {
	roff, woff := off, off
	for n > 0 {
		c, err := unix.CopyFileRange(int(in.Fd()), &roff, int(out.Fd()), &woff, int(min(n, 1<<30)), 0)
		if errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL) {
			// Different filesystems on old kernels, or no support at all.
			_, err = io.Copy(io.NewOffsetWriter(out, woff), io.NewSectionReader(in, roff, n))
			return err
		}
		if err != nil {
			return err
		}
		if c == 0 {
			return fmt.Errorf("copying %s: %w", in.Name(), io.ErrUnexpectedEOF)
		}
		n -= int64(c)
	}
	return nil
}

// mapFull marks a full host filesystem as a limit.
func mapFull(err error) error {
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
		return fmt.Errorf("%w: the host filesystem is full: free space under the state directory: %w", err, sandbox.ErrLimit)
	}
	return err
}
