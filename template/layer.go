package template

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
)

// Whiteout markers of the OCI image layer format (and Docker's, which it
// took them from).
const (
	whiteoutPrefix = ".wh."
	whiteoutOpaque = ".wh..wh..opq"
	whiteoutMeta   = ".wh..wh." // AUFS bookkeeping (.wh..wh.plnk, ...)
)

// unpacker applies image layers, one after the other, to a root filesystem
// directory. All file operations go through an os.Root; on top of that it
// checks every parent directory itself and never writes through a symlink,
// so even a tree an earlier layer filled with hostile links is written
// only where the member names say. Absolute symlink targets are fine: they
// resolve inside the sandbox, never on the host, since nothing here
// follows them.
type unpacker struct {
	ctx   context.Context
	root  *os.Root
	chown bool         // set owners from the headers (needs root)
	note  func(string) // progress notes (skipped device nodes)

	// written holds the entries the current layer created or replaced:
	// its whiteouts and opaque markers hide only what lower layers made.
	written map[string]bool
	// dirs holds the mode and time of every directory member, applied by
	// finish, children first, so that a read-only directory can still be
	// filled by later members and layers.
	dirs map[string]dirMeta
}

type dirMeta struct {
	mode  fs.FileMode
	mtime time.Time
}

func newUnpacker(ctx context.Context, root *os.Root, chown bool, note func(string)) *unpacker {
	return &unpacker{ctx: ctx, root: root, chown: chown, note: note, dirs: map[string]dirMeta{}}
}

// apply extracts one uncompressed layer. Errors about a member name it
// and wrap sandbox.ErrInvalid.
func (u *unpacker) apply(r io.Reader) error {
	u.written = map[string]bool{}
	tr := tar.NewReader(r)
	for {
		if err := u.ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the layer's tar stream: %v: %w", err, sandbox.ErrInvalid)
		}
		if err := u.member(hdr, tr); err != nil {
			if strings.HasPrefix(err.Error(), "tar member ") || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return err
			}
			return fmt.Errorf("tar member %q: %w", hdr.Name, err)
		}
	}
}

// memberName vets a member's name and returns it clean and relative to
// the root ("." for the root itself).
func memberName(hdr *tar.Header) (string, error) {
	n := hdr.Name
	bad := func(why string) (string, error) {
		return "", fmt.Errorf("tar member %q: %s: %w", n, why, sandbox.ErrInvalid)
	}
	switch {
	case n == "":
		return bad("empty name")
	case strings.IndexByte(n, 0) >= 0:
		return bad("name contains a NUL byte")
	case strings.HasPrefix(n, "/"):
		return bad("name is absolute; layer members must be relative to the root")
	case len(n) > sandbox.MaxPathLen:
		return bad(fmt.Sprintf("name is longer than %d bytes", sandbox.MaxPathLen))
	}
	for _, c := range strings.Split(n, "/") {
		if c == ".." {
			return bad(`name climbs out of the root with ".."`)
		}
		if len(c) > sandbox.MaxNameLen {
			return bad(fmt.Sprintf("a name component is longer than %d bytes", sandbox.MaxNameLen))
		}
	}
	return path.Clean(n), nil
}

func (u *unpacker) member(hdr *tar.Header, r io.Reader) error {
	name, err := memberName(hdr)
	if err != nil {
		return err
	}
	if name == "." {
		return nil // the root keeps the mode the store gives it
	}
	dir, base := path.Split(name)
	dir = path.Clean(dir)

	switch {
	case base == whiteoutOpaque:
		if err := u.parents(hdr, name, true); err != nil {
			return err
		}
		return u.opaque(dir)
	case strings.HasPrefix(base, whiteoutMeta):
		return nil
	case strings.HasPrefix(base, whiteoutPrefix):
		target := path.Join(dir, strings.TrimPrefix(base, whiteoutPrefix))
		if t := path.Base(target); t == "." || t == ".." || t == "/" || target == "." {
			return fmt.Errorf("tar member %q: whiteout of %q: %w", hdr.Name, t, sandbox.ErrInvalid)
		}
		if u.written[target] {
			return nil // a whiteout hides lower layers only
		}
		if err := u.parents(hdr, target, false); errors.Is(err, fs.ErrNotExist) {
			return nil // nothing to hide
		} else if err != nil {
			return err
		}
		if err := u.root.RemoveAll(target); err != nil { // removes a final symlink itself
			return err
		}
		delete(u.dirs, target)
		return nil
	}

	switch hdr.Typeflag {
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		kind := map[byte]string{tar.TypeChar: "character device", tar.TypeBlock: "block device", tar.TypeFifo: "fifo"}[hdr.Typeflag]
		u.note(fmt.Sprintf("skipping %s /%s: the runtime provides /dev", kind, name))
		return nil
	case tar.TypeXGlobalHeader:
		return nil
	case tar.TypeDir, tar.TypeReg, tar.TypeRegA, tar.TypeSymlink, tar.TypeLink, tar.TypeCont:
	default:
		return fmt.Errorf("tar member %q: unsupported member type %q: %w", hdr.Name, string(hdr.Typeflag), sandbox.ErrInvalid)
	}
	if err := u.parents(hdr, name, true); err != nil {
		return err
	}
	mode := hdr.FileInfo().Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
	isDir := hdr.Typeflag == tar.TypeDir || (hdr.Typeflag == tar.TypeRegA && strings.HasSuffix(hdr.Name, "/"))
	switch {
	case isDir:
		err = u.mkdir(hdr, name, mode)
	case hdr.Typeflag == tar.TypeSymlink:
		err = u.symlink(hdr, name)
	case hdr.Typeflag == tar.TypeLink:
		err = u.link(hdr, name)
	default:
		if _, sparse := hdr.PAXRecords["GNU.sparse.major"]; sparse {
			return fmt.Errorf("tar member %q: sparse files are not supported in layers: %w", hdr.Name, sandbox.ErrInvalid)
		}
		err = u.file(hdr, name, mode, r)
	}
	if err != nil {
		return err
	}
	u.written[name] = true
	return nil
}

// parents checks every directory above name: each must be a real
// directory, never a symlink. Missing ones are created (mode 0755, owned
// by the extracting user) when create is set, else the result wraps
// fs.ErrNotExist.
func (u *unpacker) parents(hdr *tar.Header, name string, create bool) error {
	dir := path.Dir(name)
	if dir == "." {
		return nil
	}
	cur := ""
	for _, c := range strings.Split(dir, "/") {
		if cur == "" {
			cur = c
		} else {
			cur += "/" + c
		}
		fi, err := u.root.Lstat(cur)
		if errors.Is(err, fs.ErrNotExist) {
			if !create {
				return err
			}
			if err := mkdirMode(u.root, cur, 0o755); err != nil {
				return err
			}
			u.written[cur] = true
			continue
		}
		if err != nil {
			return err
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			return fmt.Errorf("tar member %q: parent /%s is a symlink; refusing to write through it: %w", hdr.Name, cur, sandbox.ErrInvalid)
		case !fi.IsDir():
			return fmt.Errorf("tar member %q: parent /%s is not a directory: %w", hdr.Name, cur, sandbox.ErrInvalid)
		}
	}
	return nil
}

// opaque empties dir of everything lower layers put there, keeping what
// the current layer wrote.
func (u *unpacker) opaque(dir string) error {
	if dir == "." {
		dir = ""
	}
	open := dir
	if open == "" {
		open = "."
	}
	fi, err := u.root.Lstat(open)
	if errors.Is(err, fs.ErrNotExist) {
		if err := mkdirMode(u.root, open, 0o755); err != nil {
			return err
		}
		u.written[open] = true
		return nil
	}
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("opaque marker in /%s, which is not a directory: %w", dir, sandbox.ErrInvalid)
	}
	f, err := u.root.Open(open)
	if err != nil {
		return err
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return err
	}
	for _, n := range names {
		child := path.Join(dir, n)
		if !u.written[child] {
			if err := u.root.RemoveAll(child); err != nil {
				return err
			}
			delete(u.dirs, child)
			continue
		}
		if fi, err := u.root.Lstat(child); err == nil && fi.IsDir() {
			if err := u.opaque(child); err != nil {
				return err
			}
		}
	}
	return nil
}

// clear removes whatever is at name (a whole directory tree included: a
// later layer's file replaces a lower layer's directory).
func (u *unpacker) clear(name string) error {
	delete(u.dirs, name)
	err := u.root.RemoveAll(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

func (u *unpacker) mkdir(hdr *tar.Header, name string, mode fs.FileMode) error {
	fi, err := u.root.Lstat(name)
	if err != nil || !fi.IsDir() {
		if err := u.clear(name); err != nil {
			return err
		}
		if err := u.root.Mkdir(name, 0o700); err != nil {
			return err
		}
	}
	if err := u.owner(name, hdr); err != nil {
		return err
	}
	// Writable and searchable for us until finish sets the real mode.
	if err := u.root.Chmod(name, 0o700); err != nil {
		return err
	}
	u.dirs[name] = dirMeta{mode: mode, mtime: hdr.ModTime}
	return nil
}

func (u *unpacker) file(hdr *tar.Header, name string, mode fs.FileMode, r io.Reader) error {
	if hdr.Size < 0 {
		return fmt.Errorf("tar member %q: negative size: %w", hdr.Name, sandbox.ErrInvalid)
	}
	if err := u.clear(name); err != nil {
		return err
	}
	// O_EXCL|O_NOFOLLOW: clear removed what was there; never follow a link.
	f, err := u.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	if errors.Is(err, io.ErrUnexpectedEOF) {
		err = fmt.Errorf("tar member %q: the layer ends inside it: %w", hdr.Name, sandbox.ErrInvalid)
	}
	if err == nil && u.chown {
		err = f.Chown(hdr.Uid, hdr.Gid)
	}
	if err == nil {
		err = f.Chmod(mode) // after chown, which clears setuid bits
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if !hdr.ModTime.IsZero() {
		return u.root.Chtimes(name, hdr.ModTime, hdr.ModTime)
	}
	return nil
}

func (u *unpacker) symlink(hdr *tar.Header, name string) error {
	t := hdr.Linkname
	switch {
	case t == "":
		return fmt.Errorf("tar member %q: symlink with an empty target: %w", hdr.Name, sandbox.ErrInvalid)
	case strings.IndexByte(t, 0) >= 0:
		return fmt.Errorf("tar member %q: symlink target contains a NUL byte: %w", hdr.Name, sandbox.ErrInvalid)
	case len(t) > sandbox.MaxPathLen:
		return fmt.Errorf("tar member %q: symlink target longer than %d bytes: %w", hdr.Name, sandbox.MaxPathLen, sandbox.ErrInvalid)
	}
	if err := u.clear(name); err != nil {
		return err
	}
	if err := u.root.Symlink(t, name); err != nil {
		return err
	}
	return u.owner(name, hdr)
}

// link makes a hard link. Tar names its target as a member name, relative
// to the root; it must be a file or symlink already in the tree (from
// this layer or a lower one), reached through real directories only.
func (u *unpacker) link(hdr *tar.Header, name string) error {
	target, err := memberName(&tar.Header{Name: hdr.Linkname})
	if err != nil {
		return fmt.Errorf("tar member %q: hard link target %q is not a name inside the root: %w", hdr.Name, hdr.Linkname, sandbox.ErrInvalid)
	}
	if target == "." || target == name {
		return fmt.Errorf("tar member %q: hard link to %q: %w", hdr.Name, hdr.Linkname, sandbox.ErrInvalid)
	}
	if err := u.parents(hdr, target, false); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("tar member %q: hard link target %q does not exist: %w", hdr.Name, hdr.Linkname, sandbox.ErrInvalid)
		}
		return err
	}
	fi, err := u.root.Lstat(target)
	if err != nil {
		return fmt.Errorf("tar member %q: hard link target %q does not exist: %w", hdr.Name, hdr.Linkname, sandbox.ErrInvalid)
	}
	if fi.IsDir() {
		return fmt.Errorf("tar member %q: hard link target %q is a directory: %w", hdr.Name, hdr.Linkname, sandbox.ErrInvalid)
	}
	if err := u.clear(name); err != nil {
		return err
	}
	return u.root.Link(target, name)
}

func (u *unpacker) owner(name string, hdr *tar.Header) error {
	if !u.chown {
		return nil
	}
	return u.root.Lchown(name, hdr.Uid, hdr.Gid)
}

// finish gives directories their mode and time, children before parents.
func (u *unpacker) finish() error {
	names := make([]string, 0, len(u.dirs))
	for n := range u.dirs {
		names = append(names, n)
	}
	sort.Sort(sort.Reverse(sort.StringSlice(names)))
	for _, n := range names {
		d := u.dirs[n]
		fi, err := u.root.Lstat(n)
		if err != nil || !fi.IsDir() {
			continue // replaced since; Chmod would follow a symlink
		}
		if err := u.root.Chmod(n, d.mode); err != nil {
			return fmt.Errorf("/%s: %w", n, err)
		}
		if !d.mtime.IsZero() {
			if err := u.root.Chtimes(n, d.mtime, d.mtime); err != nil {
				return fmt.Errorf("/%s: %w", n, err)
			}
		}
	}
	return nil
}

// mkdirMode makes a directory with exactly this mode, whatever the umask.
func mkdirMode(root *os.Root, name string, mode fs.FileMode) error {
	if err := root.Mkdir(name, 0o700); err != nil {
		return err
	}
	return root.Chmod(name, mode)
}
