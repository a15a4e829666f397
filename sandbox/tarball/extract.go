package tarball

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

// ExtractOptions tunes Extract.
type ExtractOptions struct {
	// MaxBytes caps the total size of the regular files extracted; 0 means
	// no cap. A member that would pass it is refused, before any of its
	// bytes are written, with an error wrapping sandbox.ErrLimit.
	MaxBytes int64
	// Chown, when set, is called once each member is created with the
	// root the extraction works in, the member's clean name relative to
	// it and its header, to set ownership; not for the root "./", which
	// Extract leaves alone. A regular file is still writable by the
	// extraction and has not got its mode yet (so that a setuid bit set
	// after survives the chown). The member may be a symlink: use
	// root.Lchown. An error stops the extraction.
	Chown func(root *os.Root, name string, hdr *tar.Header) error
}

// Extract unpacks the tar stream r into the existing host directory dir.
//
// Every member goes through CheckHeader. Beyond that, Extract never writes
// through a symlink, whether an earlier member or the existing tree put it
// there: a member whose parent directory is a symlink is refused with
// sandbox.ErrInvalid, and a member that names an existing symlink replaces
// the link itself. All file operations go through an os.Root on dir, so
// even a tree changed concurrently cannot lead a write outside it.
//
// A later member replaces an earlier entry of the same name (a non-empty
// directory in the way is an error wrapping sandbox.ErrExist). Missing
// parent directories are created with mode 0755. Regular files and
// directories get the member's permission bits masked to 0777 (never
// setuid, setgid or sticky) and its modification time; directories get
// theirs once every member is written, so a read-only directory can still
// be filled. Symlinks keep the time of their creation. A hard link may
// only point to a regular file written earlier by the same stream. The
// root directory itself ("./") is left as it is.
//
// On error, members before the bad one may have been written; nothing is
// ever written outside dir. A malformed stream is an error wrapping
// sandbox.ErrInvalid; when ctx ends Extract stops and returns ctx.Err().
func Extract(ctx context.Context, r io.Reader, dir string, opts ExtractOptions) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("extracting into %s: %w", dir, err)
	}
	defer root.Close()
	return ExtractRoot(ctx, r, root, opts)
}

// ExtractRoot is Extract into a directory the caller has opened as root
// (say, by a descriptor it resolved itself).
func ExtractRoot(ctx context.Context, r io.Reader, root *os.Root, opts ExtractOptions) error {
	x := newExtractor(root, opts, nil)
	err := x.stream(ctx, r)
	if ferr := x.fixDirs(); err == nil {
		err = ferr
	}
	return err
}

type dirFixup struct {
	mode         fs.FileMode
	atime, mtime time.Time
}

// extractor writes tar members under a root. It has two sets of rules:
// a workspace's (Extract: CheckHeader's refusals, no setuid bits, hard
// links within the stream) and, when layer is set, an image layer's
// (Layers: whiteouts, setuid bits and absolute symlink targets kept,
// device nodes skipped, later layers replacing whole trees). What keeps
// writes inside the root is the same for both: clean relative names, no
// parent that is a symlink, O_EXCL|O_NOFOLLOW creation, an os.Root.
type extractor struct {
	ctx   context.Context // of the stream being read; set by stream
	root  *os.Root
	opts  ExtractOptions
	layer *layerState // nil for a workspace

	total int64               // regular file bytes written so far
	files map[string]bool     // regular files written by this stream: hard link targets
	dirs  map[string]dirFixup // directory members, their mode and time set at the end
}

func newExtractor(root *os.Root, opts ExtractOptions, layer *layerState) *extractor {
	return &extractor{
		root:  root,
		opts:  opts,
		layer: layer,
		files: make(map[string]bool),
		dirs:  make(map[string]dirFixup),
	}
}

// stream extracts every member of r, stopping at the first error.
func (x *extractor) stream(ctx context.Context, r io.Reader) error {
	x.ctx = ctx
	tr := tar.NewReader(r)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return x.streamError(err)
		}
		if err := x.member(hdr, tr); err != nil {
			return memberError(hdr, err)
		}
	}
}

// streamError wraps an error from the tar reader. A layer is read from a
// blob already on disk, through a decompressor whose errors also mean a
// damaged blob: any error is bad input.
func (x *extractor) streamError(err error) error {
	if x.layer != nil {
		return fmt.Errorf("reading the layer's tar stream: %v: %w", err, sandbox.ErrInvalid)
	}
	return streamError(err)
}

// streamError wraps an error from the tar reader: a corrupt stream is the
// caller's bad input, anything else (a failing reader) is passed on.
func streamError(err error) error {
	if errors.Is(err, tar.ErrHeader) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, tar.ErrFieldTooLong) || strings.HasPrefix(err.Error(), "archive/tar:") {
		return fmt.Errorf("reading tar stream: %w: %w", err, sandbox.ErrInvalid)
	}
	return fmt.Errorf("reading tar stream: %w", err)
}

// memberError names the member in err unless err already does.
func memberError(hdr *tar.Header, err error) error {
	if strings.HasPrefix(err.Error(), "tar member ") || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("tar member %q: %w", hdr.Name, err)
}

func (x *extractor) member(hdr *tar.Header, tr io.Reader) error {
	var name string
	var err error
	if x.layer != nil {
		var done bool
		if name, done, err = x.layerMember(hdr); err != nil || done {
			return err
		}
	} else if name, err = CheckHeader(hdr); err != nil {
		return err
	}
	if name == "." {
		return nil // the root stays as the caller made it
	}
	if err := x.parents(hdr, path.Dir(name), true); err != nil {
		return err
	}
	switch {
	case hdr.Typeflag == tar.TypeDir || (hdr.Typeflag == tar.TypeRegA && strings.HasSuffix(hdr.Name, "/")):
		err = x.mkdir(hdr, name)
	case hdr.Typeflag == tar.TypeSymlink:
		err = x.symlink(hdr, name)
	case hdr.Typeflag == tar.TypeLink:
		err = x.link(hdr, name)
	default:
		// CheckHeader and layerMember let only regular files through here.
		err = x.writeFile(hdr, name, tr)
	}
	if err != nil {
		return err
	}
	if x.layer != nil {
		x.layer.written[name] = true
	}
	return nil
}

// mode is the permission bits a member gets: a workspace never gets
// setuid, setgid or sticky bits; a root filesystem keeps them (su, /tmp).
func (x *extractor) mode(hdr *tar.Header) fs.FileMode {
	if x.layer != nil {
		return hdr.FileInfo().Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
	}
	return fs.FileMode(hdr.Mode) & fs.ModePerm
}

// atime is the access time a member gets: the header's when it has one,
// else its modification time. A layer's entries always get the latter,
// so the same image gives the same tree.
func (x *extractor) atime(hdr *tar.Header) time.Time {
	if x.layer != nil || hdr.AccessTime.IsZero() {
		return hdr.ModTime
	}
	return hdr.AccessTime
}

func (x *extractor) chown(hdr *tar.Header, name string) error {
	if x.opts.Chown == nil {
		return nil
	}
	if err := x.opts.Chown(x.root, name, hdr); err != nil {
		return fmt.Errorf("tar member %q: setting owner: %w", hdr.Name, err)
	}
	return nil
}

// parents makes sure every directory of dir (a clean root-relative name)
// is a real directory, not a symlink, creating missing ones when create is
// set; when it is not, a missing one is an error wrapping fs.ErrNotExist.
func (x *extractor) parents(hdr *tar.Header, dir string, create bool) error {
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
		fi, err := x.root.Lstat(cur)
		if errors.Is(err, fs.ErrNotExist) && create {
			err = x.mkdirParent(cur)
			if errors.Is(err, fs.ErrExist) {
				fi, err = x.root.Lstat(cur) // raced with someone else
			} else if err == nil {
				continue
			}
		}
		if err != nil {
			return fmt.Errorf("tar member %q: %w", hdr.Name, err)
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			return fmt.Errorf("tar member %q: parent %q is a symlink; refusing to write through it: %w", hdr.Name, cur, sandbox.ErrInvalid)
		case !fi.IsDir():
			return fmt.Errorf("tar member %q: parent %q is not a directory: %w", hdr.Name, cur, sandbox.ErrInvalid)
		}
	}
	return nil
}

// mkdirParent makes a missing parent directory, mode 0755 (in a layer
// exactly, whatever the umask: the tree's digest depends on it).
func (x *extractor) mkdirParent(name string) error {
	if x.layer == nil {
		return x.root.Mkdir(name, 0o755)
	}
	if err := mkdirMode(x.root, name, 0o755); err != nil {
		return err
	}
	x.layer.written[name] = true
	return nil
}

// clear removes whatever is at name so that a new entry can take its
// place. In a workspace a non-empty directory stays and is an error; a
// layer's entry replaces a lower layer's whole tree.
func (x *extractor) clear(hdr *tar.Header, name string) error {
	delete(x.files, name)
	delete(x.dirs, name)
	if x.layer != nil {
		err := x.root.RemoveAll(name) // removes a final symlink itself
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	fi, err := x.root.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := x.root.Remove(name); err != nil {
		if fi.IsDir() {
			return fmt.Errorf("tar member %q: a directory that is not empty is in the way: %w", hdr.Name, sandbox.ErrExist)
		}
		return err
	}
	return nil
}

func (x *extractor) mkdir(hdr *tar.Header, name string) error {
	fi, err := x.root.Lstat(name)
	switch {
	case err == nil && fi.IsDir():
	case err == nil || errors.Is(err, fs.ErrNotExist):
		if err := x.clear(hdr, name); err != nil {
			return err
		}
		perm := fs.FileMode(0o755)
		if x.layer != nil {
			perm = 0o700
		}
		if err := x.root.Mkdir(name, perm); err != nil {
			return err
		}
	default:
		return err
	}
	if err := x.chown(hdr, name); err != nil {
		return err
	}
	if x.layer != nil {
		// Writable and searchable for us until fixDirs sets the real
		// mode: later layers may fill a directory this one makes
		// read-only.
		if err := x.root.Chmod(name, 0o700); err != nil {
			return err
		}
	}
	x.dirs[name] = dirFixup{mode: x.mode(hdr), atime: x.atime(hdr), mtime: hdr.ModTime}
	return nil
}

func (x *extractor) writeFile(hdr *tar.Header, name string, tr io.Reader) error {
	if hdr.Size < 0 {
		return fmt.Errorf("tar member %q: negative size %d: %w", hdr.Name, hdr.Size, sandbox.ErrInvalid)
	}
	if x.opts.MaxBytes > 0 && hdr.Size > x.opts.MaxBytes-x.total {
		return fmt.Errorf("tar member %q: its %d bytes would take the extraction past the %d-byte limit: %w", hdr.Name, hdr.Size, x.opts.MaxBytes, sandbox.ErrLimit)
	}
	if err := x.clear(hdr, name); err != nil {
		return err
	}
	// O_EXCL|O_NOFOLLOW: clear removed what was there, so a symlink that
	// appears in between is refused rather than followed.
	f, err := x.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	n, err := io.Copy(f, ctxReader{x.ctx, tr})
	x.total += n
	if err == nil {
		err = x.chown(hdr, name)
	}
	if err == nil {
		err = f.Chmod(x.mode(hdr)) // after the chown, which clears setuid bits
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("tar member %q: the stream ends inside it: %w: %w", hdr.Name, err, sandbox.ErrInvalid)
		}
		return err
	}
	x.files[name] = true
	if hdr.ModTime.IsZero() {
		return nil
	}
	return x.root.Chtimes(name, x.atime(hdr), hdr.ModTime)
}

func (x *extractor) symlink(hdr *tar.Header, name string) error {
	if err := x.clear(hdr, name); err != nil {
		return err
	}
	if err := x.root.Symlink(hdr.Linkname, name); err != nil {
		return err
	}
	return x.chown(hdr, name)
}

// link makes a hard link to a member name (tar names a link's target
// relative to the root), which CheckHeader or layerMember has vetted.
// In a workspace the target must be a regular file this stream wrote; in
// a layer, any file or symlink already in the tree (this layer's or a
// lower one's). Either way it is reached through real directories only.
func (x *extractor) link(hdr *tar.Header, name string) error {
	target := path.Clean(hdr.Linkname)
	if x.layer == nil && !x.files[target] {
		return fmt.Errorf("tar member %q: hard link target %q is not a regular file written earlier by this stream: %w", hdr.Name, hdr.Linkname, sandbox.ErrInvalid)
	}
	if target == name {
		return fmt.Errorf("tar member %q: hard link to itself: %w", hdr.Name, sandbox.ErrInvalid)
	}
	if err := x.parents(hdr, path.Dir(target), false); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("tar member %q: hard link target %q does not exist: %w", hdr.Name, hdr.Linkname, sandbox.ErrInvalid)
		}
		return err
	}
	fi, err := x.root.Lstat(target)
	switch {
	case err != nil:
		return fmt.Errorf("tar member %q: hard link target %q does not exist: %w", hdr.Name, hdr.Linkname, sandbox.ErrInvalid)
	case fi.IsDir():
		return fmt.Errorf("tar member %q: hard link target %q is a directory: %w", hdr.Name, hdr.Linkname, sandbox.ErrInvalid)
	case x.layer == nil && !fi.Mode().IsRegular():
		return fmt.Errorf("tar member %q: hard link target %q is no longer a regular file: %w", hdr.Name, hdr.Linkname, sandbox.ErrInvalid)
	}
	if err := x.clear(hdr, name); err != nil {
		return err
	}
	if err := x.root.Link(target, name); err != nil {
		return err
	}
	x.files[name] = true
	if x.layer != nil {
		// The link shares its target's inode, which has its owner
		// already; a chown would clear the target's setuid bit.
		return nil
	}
	return x.chown(hdr, name)
}

// fixDirs gives directory members their mode and times, children before
// parents so that a parent made read-only does not stop the child's change.
func (x *extractor) fixDirs() error {
	names := make([]string, 0, len(x.dirs))
	for n := range x.dirs {
		names = append(names, n)
	}
	sort.Sort(sort.Reverse(sort.StringSlice(names)))
	var first error
	for _, n := range names {
		d := x.dirs[n]
		fi, err := x.root.Lstat(n)
		if err != nil || !fi.IsDir() {
			continue // replaced since; Chmod would follow a symlink
		}
		err = x.root.Chmod(n, d.mode)
		if err == nil && !d.mtime.IsZero() {
			err = x.root.Chtimes(n, d.atime, d.mtime)
		}
		if err != nil && first == nil {
			first = fmt.Errorf("tar member %q: %w", n+"/", err)
		}
	}
	return first
}

// mkdirMode makes a directory with exactly this mode, whatever the umask.
func mkdirMode(root *os.Root, name string, mode fs.FileMode) error {
	if err := root.Mkdir(name, 0o700); err != nil {
		return err
	}
	return root.Chmod(name, mode)
}
