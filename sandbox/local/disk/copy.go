package disk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/sandbox"
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
	if unix.IoctlFileClone(int(out.Fd()), int(in.Fd())) == nil {
		return nil
	}
	size := fi.Size()
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
			return fmt.Errorf("finding data in %s: %w", src, err)
		}
		hole, err := unix.Seek(int(in.Fd()), data, unix.SEEK_HOLE)
		if err != nil {
			return fmt.Errorf("finding holes in %s: %w", src, err)
		}
		if err := copyRange(out, in, data, hole-data); err != nil {
			return mapFull(err)
		}
		off = hole
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
