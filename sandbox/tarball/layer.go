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
	"strings"

	"github.com/cove-sandbox/cove/sandbox"
)

// Whiteout markers of the OCI image layer format (and Docker's, which it
// took them from).
const (
	whiteoutPrefix = ".wh."
	whiteoutOpaque = ".wh..wh..opq"
	whiteoutMeta   = ".wh..wh." // AUFS bookkeeping (.wh..wh.plnk, ...)
)

// LayerOptions tunes Layers.
type LayerOptions struct {
	// Chown gives every entry but hard links the owner its header names
	// (which needs root); else entries belong to the extracting user.
	Chown bool
	// Note, when set, is told what was skipped (device nodes, fifos).
	Note func(string)
}

// Layers applies the layers of a container image (OCI, or docker save's
// form), bottom first, to a root filesystem directory: Apply each layer in
// turn, then Finish.
//
// A layer is a root filesystem's tar, not a workspace's, so its rules are
// not Extract's: setuid, setgid and sticky bits are kept; symlink targets
// may be absolute or climb (they resolve inside the sandbox's own root,
// and nothing here follows them); a hard link may point to any file or
// symlink already in the tree, a lower layer's included; an entry
// replaces a lower layer's entry of the same name, a whole directory tree
// included; device nodes and fifos are skipped (the runtime provides
// /dev); the whiteouts (".wh.NAME" removes NAME, ".wh..wh..opq" empties
// its directory) hide what lower layers made, never what the current one
// wrote. Missing parent directories get mode 0755 whatever the umask.
//
// What keeps every write inside the root is Extract's: member names are
// vetted as CheckHeader vets them (no absolute name, no ".."), every
// parent directory must be a real directory, never a symlink, whichever
// layer planted it, and every operation goes through the os.Root. Errors
// about a member name it and wrap sandbox.ErrInvalid; sparse files,
// unknown member types and hard links to directories or to names outside
// the root are refused.
type Layers struct {
	x *extractor
}

// layerState is what an extractor keeps for Layers.
type layerState struct {
	note func(string)
	// written holds the entries the current layer created or replaced:
	// its whiteouts and opaque markers hide only what lower layers made.
	written map[string]bool
}

// NewLayers returns a Layers that writes into root.
func NewLayers(root *os.Root, opts LayerOptions) *Layers {
	st := &layerState{note: opts.Note}
	if st.note == nil {
		st.note = func(string) {}
	}
	var eo ExtractOptions
	if opts.Chown {
		eo.Chown = func(root *os.Root, name string, hdr *tar.Header) error {
			return root.Lchown(name, hdr.Uid, hdr.Gid)
		}
	}
	return &Layers{x: newExtractor(root, eo, st)}
}

// Apply extracts one uncompressed layer. When ctx ends it stops and
// returns ctx.Err().
func (l *Layers) Apply(ctx context.Context, r io.Reader) error {
	l.x.layer.written = map[string]bool{}
	return l.x.stream(ctx, r)
}

// Finish gives the directories the layers made their mode and time, once
// every layer is applied: until then they stay writable so that a
// read-only directory can still be filled by a later layer.
func (l *Layers) Finish() error { return l.x.fixDirs() }

// layerMember vets a layer's member and carries out the ones that are not
// entries: whiteouts, opaque markers, skipped device nodes. It returns the
// clean name of an entry to write, or done.
func (x *extractor) layerMember(hdr *tar.Header) (name string, done bool, err error) {
	name, err = checkName(hdr.Name, "root filesystem")
	if err != nil {
		return "", true, fmt.Errorf("tar member %q: %w", hdr.Name, err)
	}
	if name == "." {
		return "", true, nil // the root keeps the mode the caller gave it
	}
	dir, base := path.Split(name)
	dir = path.Clean(dir)
	switch {
	case base == whiteoutOpaque:
		if err := x.parents(hdr, dir, true); err != nil {
			return "", true, err
		}
		return "", true, x.opaque(dir)
	case strings.HasPrefix(base, whiteoutMeta):
		return "", true, nil
	case strings.HasPrefix(base, whiteoutPrefix):
		return "", true, x.whiteout(hdr, dir, strings.TrimPrefix(base, whiteoutPrefix))
	}

	bad := func(format string, args ...any) (string, bool, error) {
		return "", true, fmt.Errorf("tar member %q: %s: %w", hdr.Name, fmt.Sprintf(format, args...), sandbox.ErrInvalid)
	}
	switch hdr.Typeflag {
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		kind := map[byte]string{tar.TypeChar: "character device", tar.TypeBlock: "block device", tar.TypeFifo: "fifo"}[hdr.Typeflag]
		x.layer.note(fmt.Sprintf("skipping %s /%s: the runtime provides /dev", kind, name))
		return "", true, nil
	case tar.TypeXGlobalHeader:
		return "", true, nil
	case tar.TypeDir:
	case tar.TypeReg, tar.TypeRegA, tar.TypeCont:
		if _, sparse := hdr.PAXRecords["GNU.sparse.major"]; sparse {
			return bad("sparse files are not supported in layers")
		}
	case tar.TypeSymlink:
		t := hdr.Linkname
		switch {
		case t == "":
			return bad("symlink with an empty target")
		case strings.IndexByte(t, 0) >= 0:
			return bad("symlink target contains a NUL byte")
		case len(t) > sandbox.MaxPathLen:
			return bad("symlink target longer than %d bytes", sandbox.MaxPathLen)
		}
	case tar.TypeLink:
		target, err := checkName(hdr.Linkname, "root filesystem")
		if err != nil {
			return bad("hard link target %q is not a name inside the root", hdr.Linkname)
		}
		if target == "." || target == name {
			return bad("hard link to %q", hdr.Linkname)
		}
	default:
		return bad("unsupported member type %q", string(hdr.Typeflag))
	}
	return name, false, nil
}

// whiteout removes the entry hidden in dir (a clean root-relative name)
// unless the current layer wrote it: a whiteout hides lower layers only.
// hidden is checked before it is joined to dir, which would clean
// ".wh.." into dir itself and ".wh..." into its parent.
func (x *extractor) whiteout(hdr *tar.Header, dir, hidden string) error {
	if hidden == "" || hidden == "." || hidden == ".." {
		return fmt.Errorf("tar member %q: whiteout of %q: %w", hdr.Name, hidden, sandbox.ErrInvalid)
	}
	target := path.Join(dir, hidden)
	if x.layer.written[target] {
		return nil
	}
	if err := x.parents(hdr, path.Dir(target), false); errors.Is(err, fs.ErrNotExist) {
		return nil // nothing to hide
	} else if err != nil {
		return err
	}
	if err := x.root.RemoveAll(target); err != nil { // removes a final symlink itself
		return err
	}
	delete(x.dirs, target)
	delete(x.files, target)
	return nil
}

// opaque empties dir of everything lower layers put there, keeping what
// the current layer wrote.
func (x *extractor) opaque(dir string) error {
	if dir == "." {
		dir = ""
	}
	open := dir
	if open == "" {
		open = "."
	}
	fi, err := x.root.Lstat(open)
	if errors.Is(err, fs.ErrNotExist) {
		if err := mkdirMode(x.root, open, 0o755); err != nil {
			return err
		}
		x.layer.written[open] = true
		return nil
	}
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("opaque marker in /%s, which is not a directory: %w", dir, sandbox.ErrInvalid)
	}
	f, err := x.root.Open(open)
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
		if !x.layer.written[child] {
			if err := x.root.RemoveAll(child); err != nil {
				return err
			}
			delete(x.dirs, child)
			continue
		}
		if fi, err := x.root.Lstat(child); err == nil && fi.IsDir() {
			if err := x.opaque(child); err != nil {
				return err
			}
		}
	}
	return nil
}
