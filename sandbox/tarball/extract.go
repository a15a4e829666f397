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
	"time"

	"github.com/cove-sandbox/cove/sandbox"
)

// ExtractOptions tunes Extract.
type ExtractOptions struct {
	// MaxBytes caps the total size of the regular files extracted; 0 means
	// no cap. A member that would pass it is refused, before any of its
	// bytes are written, with an error wrapping sandbox.ErrLimit.
	MaxBytes int64
	// Chown, when set, is called after each member is created with the
	// root the extraction works in, the member's clean name relative to
	// it and its header, to set ownership; not for the root "./", which
	// Extract leaves alone. The member may be a symlink: use root.Lchown.
	// An error stops the extraction.
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
	var err error
	x := &extractor{
		ctx:   ctx,
		root:  root,
		opts:  opts,
		files: make(map[string]bool),
		dirs:  make(map[string]dirFixup),
	}
	tr := tar.NewReader(r)
	for {
		if err = ctx.Err(); err != nil {
			break
		}
		var hdr *tar.Header
		hdr, err = tr.Next()
		if err == io.EOF {
			err = nil
			break
		}
		if err != nil {
			err = streamError(err)
			break
		}
		if err = x.member(hdr, tr); err != nil {
			break
		}
	}
	if ferr := x.fixDirs(); err == nil {
		err = ferr
	}
	return err
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

type dirFixup struct {
	mode         fs.FileMode
	atime, mtime time.Time
}

type extractor struct {
	ctx  context.Context
	root *os.Root
	opts ExtractOptions

	total int64               // regular file bytes written so far
	files map[string]bool     // regular files written by this stream: hard link targets
	dirs  map[string]dirFixup // directory members, their mode and time set at the end
}

func (x *extractor) member(hdr *tar.Header, tr io.Reader) error {
	name, err := CheckHeader(hdr)
	if err != nil {
		return err
	}
	if name == "." {
		return nil // the root stays as the caller made it
	}
	if err := x.parents(hdr, path.Dir(name), true); err != nil {
		return err
	}
	mode := fs.FileMode(hdr.Mode) & fs.ModePerm
	switch hdr.Typeflag {
	case tar.TypeDir:
		err = x.mkdir(hdr, name)
	case tar.TypeRegA:
		if strings.HasSuffix(hdr.Name, "/") {
			err = x.mkdir(hdr, name)
			break
		}
		err = x.writeFile(hdr, name, mode, tr)
	case tar.TypeReg, tar.TypeCont, tar.TypeGNUSparse:
		err = x.writeFile(hdr, name, mode, tr)
	case tar.TypeSymlink:
		if err = x.clear(hdr, name); err == nil {
			err = x.root.Symlink(hdr.Linkname, name)
		}
	case tar.TypeLink:
		err = x.link(hdr, name)
	default:
		// CheckHeader lets no other type through.
		err = fmt.Errorf("tar member %q: unsupported member type %q: %w", hdr.Name, string(hdr.Typeflag), sandbox.ErrInvalid)
	}
	if err != nil {
		return x.memberError(hdr, err)
	}
	if x.opts.Chown != nil {
		if err := x.opts.Chown(x.root, name, hdr); err != nil {
			return fmt.Errorf("tar member %q: setting owner: %w", hdr.Name, err)
		}
	}
	return nil
}

// memberError names the member in err unless err already does.
func (x *extractor) memberError(hdr *tar.Header, err error) error {
	if strings.HasPrefix(err.Error(), "tar member ") || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("tar member %q: %w", hdr.Name, err)
}

// parents makes sure every directory of dir (a clean root-relative name)
// is a real directory, not a symlink, creating missing ones when create is
// set.
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
			err = x.root.Mkdir(cur, 0o755)
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

// clear removes whatever is at name so that a new entry can take its place;
// a non-empty directory stays and is an error.
func (x *extractor) clear(hdr *tar.Header, name string) error {
	delete(x.files, name)
	delete(x.dirs, name)
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
		if err := x.root.Mkdir(name, 0o755); err != nil {
			return err
		}
	default:
		return err
	}
	atime := hdr.AccessTime
	if atime.IsZero() {
		atime = hdr.ModTime
	}
	x.dirs[name] = dirFixup{mode: fs.FileMode(hdr.Mode) & fs.ModePerm, atime: atime, mtime: hdr.ModTime}
	return nil
}

func (x *extractor) writeFile(hdr *tar.Header, name string, mode fs.FileMode, tr io.Reader) error {
	if hdr.Size < 0 {
		return fmt.Errorf("tar member %q: negative size %d: %w", hdr.Name, hdr.Size, sandbox.ErrInvalid)
	}
	if x.opts.MaxBytes > 0 && hdr.Size > x.opts.MaxBytes-x.total {
		return fmt.Errorf("tar member %q: its %d bytes would take the extraction past the %d-byte limit: %w", hdr.Name, hdr.Size, x.opts.MaxBytes, sandbox.ErrLimit)
	}
	if err := x.clear(hdr, name); err != nil {
		return err
	}
	// O_EXCL: clear removed what was there, so a symlink that appears in
	// between is refused rather than followed.
	f, err := x.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	n, err := io.Copy(f, ctxReader{x.ctx, tr})
	x.total += n
	if err == nil {
		err = f.Chmod(mode)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("tar member %q: %w: %w", hdr.Name, err, sandbox.ErrInvalid)
		}
		return err
	}
	x.files[name] = true
	return x.chtimes(hdr, name)
}

func (x *extractor) chtimes(hdr *tar.Header, name string) error {
	if hdr.ModTime.IsZero() {
		return nil
	}
	atime := hdr.AccessTime
	if atime.IsZero() {
		atime = hdr.ModTime
	}
	return x.root.Chtimes(name, atime, hdr.ModTime)
}

func (x *extractor) link(hdr *tar.Header, name string) error {
	target := path.Clean(hdr.Linkname)
	if !x.files[target] {
		return fmt.Errorf("tar member %q: hard link target %q is not a regular file written earlier by this stream: %w", hdr.Name, hdr.Linkname, sandbox.ErrInvalid)
	}
	if target == name {
		return fmt.Errorf("tar member %q: hard link to itself: %w", hdr.Name, sandbox.ErrInvalid)
	}
	if err := x.parents(hdr, path.Dir(target), false); err != nil {
		return err
	}
	fi, err := x.root.Lstat(target)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("tar member %q: hard link target %q is no longer a regular file: %w", hdr.Name, hdr.Linkname, sandbox.ErrInvalid)
	}
	if err := x.clear(hdr, name); err != nil {
		return err
	}
	if err := x.root.Link(target, name); err != nil {
		return err
	}
	x.files[name] = true
	return nil
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
