// Package tarball moves a workspace in and out of a host directory as a tar
// stream, safely: Write archives a directory tree, CheckHeader vets one tar
// member against escaping the workspace, and Extract unpacks a stream into a
// directory without ever writing outside it. Runtimes use it for
// Session.SnapshotWorkspace and Session.RestoreWorkspace.
//
// Member names are relative to the workspace root ("src/main.go", never
// "/src/main.go" or "./src/main.go"); directories carry a trailing "/".
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

	"github.com/cove-sandbox/cove/sandbox"
)

// Write writes the tree under the host directory dir to w as a tar stream
// and finishes the stream. Members are named relative to dir, directories
// before their contents and siblings in byte order, so the same tree always
// gives the same stream. Directories, regular files and symlinks are
// archived with their permission bits, owner ids and modification time
// (truncated to the second); sockets, devices and fifos are skipped without
// an error, as they cannot be restored into a workspace anyway. The root
// directory itself is not a member. Hard links are archived as separate
// regular files. Symlinks are archived, never followed.
//
// A file that shrinks while it is being archived is an error; entries that
// vanish during the walk are skipped.
func Write(ctx context.Context, w io.Writer, dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("archiving %s: %w", dir, err)
	}
	defer root.Close()
	if err := WriteRoot(ctx, w, root); err != nil {
		return fmt.Errorf("archiving %s: %w", dir, err)
	}
	return nil
}

// WriteRoot is Write for a directory the caller has opened as root (say,
// by a descriptor it resolved itself): members are named relative to it.
func WriteRoot(ctx context.Context, w io.Writer, root *os.Root) error {
	tw := tar.NewWriter(w)
	if err := writeDir(ctx, tw, root, "."); err != nil {
		return err
	}
	return tw.Close()
}

// writeDir archives the children of the directory rel (root-relative,
// "." for the root), recursing into subdirectories.
func writeDir(ctx context.Context, tw *tar.Writer, root *os.Root, rel string) error {
	// O_NOFOLLOW: the directory was seen as a directory by Lstat; if it has
	// since been swapped for a symlink, refuse rather than archive the
	// link's target under this name.
	d, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_DIRECTORY, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) && rel != "." {
			return nil
		}
		return err
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return err
	}
	sort.Strings(names)
	for _, n := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		name := n
		if rel != "." {
			name = rel + "/" + n
		}
		if err := writeEntry(ctx, tw, root, name); err != nil {
			return err
		}
	}
	return nil
}

func writeEntry(ctx context.Context, tw *tar.Writer, root *os.Root, name string) error {
	fi, err := root.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // vanished since the directory was read
	}
	if err != nil {
		return err
	}
	hdr := &tar.Header{
		Name:    name,
		Mode:    int64(fi.Mode().Perm()),
		ModTime: fi.ModTime().Truncate(1e9),
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		hdr.Uid, hdr.Gid = int(st.Uid), int(st.Gid)
	}
	switch fi.Mode().Type() {
	case fs.ModeDir:
		hdr.Typeflag = tar.TypeDir
		hdr.Name += "/"
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		return writeDir(ctx, tw, root, name)
	case fs.ModeSymlink:
		target, err := root.Readlink(name)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		hdr.Typeflag = tar.TypeSymlink
		hdr.Linkname = target
		return tw.WriteHeader(hdr)
	case 0:
		return writeFile(ctx, tw, root, name, hdr)
	default:
		return nil // socket, device, fifo: not part of a workspace
	}
}

func writeFile(ctx context.Context, tw *tar.Writer, root *os.Root, name string, hdr *tar.Header) error {
	// O_NONBLOCK so that a file swapped for a fifo does not hang the open;
	// O_NOFOLLOW so that one swapped for a symlink is not followed.
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return nil // swapped for something else since Lstat
	}
	hdr.Typeflag = tar.TypeReg
	hdr.Size = fi.Size()
	hdr.Mode = int64(fi.Mode().Perm())
	hdr.ModTime = fi.ModTime().Truncate(1e9)
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	n, err := io.CopyN(tw, ctxReader{ctx, f}, hdr.Size)
	if err == io.EOF {
		return fmt.Errorf("file %q shrank from %d to %d bytes while being archived", name, hdr.Size, n)
	}
	return err
}

// CheckHeader vets one tar member for extraction into a workspace and
// returns its clean name relative to the workspace root ("." for the root
// directory itself, which only a directory member may name). It refuses,
// with an error wrapping sandbox.ErrInvalid that names the member:
//
//   - an empty name, a NUL byte, an absolute name, or any ".." component;
//   - names longer than sandbox.MaxPathLen or with a component longer than
//     sandbox.MaxNameLen;
//   - character and block devices, fifos, and member types it does not
//     know (it accepts regular files, including sparse and contiguous ones,
//     directories, symlinks and hard links);
//   - a symlink whose target is empty, absolute, climbs above the root
//     when resolved from the member's directory, or has a ".." after a
//     name ("a/../b"): through another symlink that "a" could be, such a
//     target can climb out even when its lexical form stays inside;
//   - a hard link whose target (a member name, relative to the root as tar
//     stores it) is empty, absolute, contains "..", or is the root.
//
// It looks at the header only; Extract adds the checks that need the tree.
func CheckHeader(hdr *tar.Header) (clean string, err error) {
	bad := func(format string, args ...any) (string, error) {
		return "", fmt.Errorf("tar member %q: %s: %w", hdr.Name, fmt.Sprintf(format, args...), sandbox.ErrInvalid)
	}
	if clean, err = checkName(hdr.Name, "workspace"); err != nil {
		return "", fmt.Errorf("tar member %q: %w", hdr.Name, err)
	}
	name := hdr.Name

	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeRegA, tar.TypeCont, tar.TypeGNUSparse:
		if hdr.Typeflag == tar.TypeRegA && strings.HasSuffix(name, "/") {
			break // a legacy directory
		}
		if clean == "." {
			return bad("only a directory may name the workspace root")
		}
	case tar.TypeDir:
	case tar.TypeSymlink:
		if clean == "." {
			return bad("only a directory may name the workspace root")
		}
		if err := checkSymlinkTarget(clean, hdr.Linkname); err != "" {
			return bad("%s", err)
		}
	case tar.TypeLink:
		if clean == "." {
			return bad("only a directory may name the workspace root")
		}
		if err := checkHardlinkTarget(hdr.Linkname); err != "" {
			return bad("%s", err)
		}
	case tar.TypeChar, tar.TypeBlock:
		return bad("device nodes are not allowed in a workspace")
	case tar.TypeFifo:
		return bad("fifos are not allowed in a workspace")
	default:
		return bad("unsupported member type %q", string(hdr.Typeflag))
	}
	return clean, nil
}

// checkName vets a member name and returns it clean and relative to the
// root ("." for the root itself): not empty, no NUL byte, not absolute,
// no ".." component, within sandbox.MaxPathLen and sandbox.MaxNameLen.
// where names the tree for the error ("workspace"), which wraps
// sandbox.ErrInvalid and leaves naming the member to the caller.
func checkName(name, where string) (string, error) {
	bad := func(format string, args ...any) (string, error) {
		return "", fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), sandbox.ErrInvalid)
	}
	switch {
	case name == "":
		return bad("empty name")
	case strings.IndexByte(name, 0) >= 0:
		return bad("name contains a NUL byte")
	case strings.HasPrefix(name, "/"):
		return bad("name is absolute; members must be relative to the %s's root", where)
	case len(name) > sandbox.MaxPathLen:
		return bad("name of %d bytes is longer than the %d-byte limit", len(name), sandbox.MaxPathLen)
	}
	for _, c := range strings.Split(name, "/") {
		if c == ".." {
			return bad("name climbs out of the %s with \"..\"", where)
		}
		if len(c) > sandbox.MaxNameLen {
			return bad("name component of %d bytes is longer than the %d-byte limit", len(c), sandbox.MaxNameLen)
		}
	}
	return path.Clean(name), nil
}

// checkSymlinkTarget returns why the symlink at the clean member name
// may not point at target, or "".
func checkSymlinkTarget(name, target string) string {
	switch {
	case target == "":
		return "symlink has an empty target"
	case strings.IndexByte(target, 0) >= 0:
		return "symlink target contains a NUL byte"
	case strings.HasPrefix(target, "/"):
		return fmt.Sprintf("symlink target %q is absolute and so points out of the workspace; use a relative target", target)
	case len(target) > sandbox.MaxPathLen:
		return fmt.Sprintf("symlink target of %d bytes is longer than the %d-byte limit", len(target), sandbox.MaxPathLen)
	}
	// The link resolves from its own directory: that many ".." may lead
	// up, no more, and only before the first name.
	depth := strings.Count(name, "/") // components of path.Dir(name)
	seenName := false
	for _, c := range strings.Split(target, "/") {
		switch c {
		case "", ".":
		case "..":
			if seenName {
				return fmt.Sprintf("symlink target %q has \"..\" after a name; through another symlink it could point out of the workspace", target)
			}
			depth--
			if depth < 0 {
				return fmt.Sprintf("symlink target %q points out of the workspace", target)
			}
		default:
			seenName = true
		}
	}
	return ""
}

// checkHardlinkTarget returns why a hard link may not point at target, or
// "". Tar stores a hard link's target as a member name, relative to the
// root, not to the link's directory.
func checkHardlinkTarget(target string) string {
	switch {
	case target == "":
		return "hard link has an empty target"
	case strings.IndexByte(target, 0) >= 0:
		return "hard link target contains a NUL byte"
	case strings.HasPrefix(target, "/"):
		return fmt.Sprintf("hard link target %q is absolute and so points out of the workspace", target)
	case len(target) > sandbox.MaxPathLen:
		return fmt.Sprintf("hard link target of %d bytes is longer than the %d-byte limit", len(target), sandbox.MaxPathLen)
	}
	for _, c := range strings.Split(target, "/") {
		if c == ".." {
			return fmt.Sprintf("hard link target %q climbs out of the workspace with \"..\"", target)
		}
	}
	if path.Clean(target) == "." {
		return "hard link target is the workspace root"
	}
	return ""
}

// ContextReader returns a reader that fails once ctx has ended, so a long
// copy (a tar member, an upload) stops promptly when its caller gives up.
func ContextReader(ctx context.Context, r io.Reader) io.Reader { return ctxReader{ctx, r} }

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (r ctxReader) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.r.Read(p)
}
