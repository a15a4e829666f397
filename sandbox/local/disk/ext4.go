package disk

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cove-sandbox/cove/sandbox"
)

// blockSize is the filesystem and loop device block size.
const blockSize = 4096

// format writes a fresh ext4 filesystem of size bytes into the new file
// image, with empty upper and work directories at its root.
//
// The options keep creation cheap and the file sparse (about 130 KB
// written for any size): lazy_itable_init and lazy_journal_init skip
// zeroing the inode tables and the journal (mke2fs discards, i.e. punches,
// the file first, so they read as zero anyway and no background zeroing
// follows the mount); sparse_super2 with no backup superblocks and no
// resize inode leave out metadata only an offline repair or growth would
// use; -m 0 leaves no blocks reserved for root, so the sandbox's user gets
// the whole limit. 4 KiB blocks match the loop device's block size. The journal is kept, so a host crash does not
// corrupt a stopped sandbox's disk, but capped at 32 MiB: its blocks are
// eventually all written, and that is host disk the sandbox cannot use.
func format(ctx context.Context, image string, size int64) error {
	mkfs, err := exec.LookPath("mkfs.ext4")
	if err != nil {
		return fmt.Errorf("mkfs.ext4 is missing (%w): install e2fsprogs: %w", err, sandbox.ErrUnavailable)
	}
	seed, err := os.MkdirTemp(filepath.Dir(image), ".seed-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(seed)
	// The upper dir's mode becomes the mode of the sandbox's "/": set it
	// whatever the umask.
	for _, d := range []struct {
		name string
		mode os.FileMode
	}{{"upper", 0o755}, {"work", 0o700}} {
		p := filepath.Join(seed, d.name)
		if err := os.Mkdir(p, d.mode); err != nil {
			return err
		}
		if err := os.Chmod(p, d.mode); err != nil {
			return err
		}
	}
	f, err := os.OpenFile(image, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(image)
		return mapFull(err)
	}
	args := []string{"-q", "-F", "-t", "ext4", "-b", strconv.Itoa(blockSize), "-m", "0",
		"-O", "sparse_super2,^resize_inode",
		"-E", "lazy_itable_init=1,lazy_journal_init=1,num_backup_sb=0", "-d", seed}
	if size >= 2<<30 {
		args = append(args, "-J", "size=32")
	}
	cmd := exec.CommandContext(ctx, mkfs, append(args, image)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		os.Remove(image)
		return fmt.Errorf("formatting %s: %w: %s", image, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// ext4 superblock fields (offsets from the superblock's start, which is
// 1024 bytes into the filesystem).
const (
	sbOffset          = 1024
	sbBlocksLo        = 0x04
	sbFreeBlocksLo    = 0x0C
	sbLogBlockSize    = 0x18
	sbMagic           = 0x38
	sbFeatureIncompat = 0x60
	sbBlocksHi        = 0x150
	sbFreeBlocksHi    = 0x158
	sbOverhead        = 0x248
	sbSize            = 0x400

	ext4Magic      = 0xEF53
	incompat64Bit  = 0x80
	maxLogBlockLen = 6 // 64 KiB blocks
)

// superblockUsage reads the used and usable bytes of an unmounted ext4
// image from its superblock, as statfs reports them once it is mounted
// (the overhead of inode tables, bitmaps and journal counts in neither).
// The free count is exact after a clean unmount.
func superblockUsage(image string) (used, total int64, err error) {
	f, err := os.Open(image)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sb := make([]byte, sbSize)
	if _, err := f.ReadAt(sb, sbOffset); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, 0, fmt.Errorf("reading the superblock of %s: %w", image, err)
	}
	le := binary.LittleEndian
	if le.Uint16(sb[sbMagic:]) != ext4Magic {
		return 0, 0, fmt.Errorf("%s is not an ext4 image (bad superblock magic): %w", image, sandbox.ErrInvalid)
	}
	logBlock := le.Uint32(sb[sbLogBlockSize:])
	if logBlock > maxLogBlockLen {
		return 0, 0, fmt.Errorf("%s: bad block size in its superblock: %w", image, sandbox.ErrInvalid)
	}
	bs := int64(1024) << logBlock
	blocks := int64(le.Uint32(sb[sbBlocksLo:]))
	free := int64(le.Uint32(sb[sbFreeBlocksLo:]))
	if le.Uint32(sb[sbFeatureIncompat:])&incompat64Bit != 0 {
		blocks |= int64(le.Uint32(sb[sbBlocksHi:])) << 32
		free |= int64(le.Uint32(sb[sbFreeBlocksHi:])) << 32
	}
	overhead := int64(le.Uint32(sb[sbOverhead:]))
	usable := blocks - overhead
	if usable < free {
		usable = free
	}
	return (usable - free) * bs, usable * bs, nil
}
