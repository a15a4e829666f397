package tarball

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
)

// maxListDepth is how deep ReadDir lists a tree through Session.List.
const maxListDepth = 1 << 10

// ReadDir writes the tree under the sandbox directory dir to w as a tar
// stream, members relative to dir, directories before their contents.
// A session that is a sandbox.Archiver archives it itself, in one
// request; any other is read through List and ReadFile: directories,
// regular files and symlinks, with their permission bits and
// modification time, and a file that changes size while it is read is an
// error wrapping sandbox.ErrState. The caller checks that dir is a
// directory; the workspace root as a whole is Session.SnapshotWorkspace.
func ReadDir(ctx context.Context, sess sandbox.Session, dir string, w io.Writer) error {
	if ar, ok := sess.(sandbox.Archiver); ok {
		return ar.ReadDirTar(ctx, dir, w)
	}
	fis, err := sess.List(ctx, dir, maxListDepth)
	if err != nil {
		return err
	}
	sort.Slice(fis, func(i, j int) bool { return fis[i].Path < fis[j].Path })
	tw := tar.NewWriter(w)
	for _, fi := range fis {
		name, ok := strings.CutPrefix(fi.Path, strings.TrimSuffix(dir, "/")+"/")
		if !ok || name == "" {
			continue
		}
		if err := readMember(ctx, sess, tw, name, fi); err != nil {
			return err
		}
	}
	return tw.Close()
}

// readMember writes one listed entry, named name, to tw.
func readMember(ctx context.Context, sess sandbox.Session, tw *tar.Writer, name string, fi sandbox.FileInfo) error {
	hdr := &tar.Header{Name: name, Mode: int64(fi.Mode & 0o7777), ModTime: fi.ModTime.Truncate(time.Second), Format: tar.FormatPAX}
	switch fi.Type {
	case sandbox.TypeDir:
		hdr.Typeflag, hdr.Name = tar.TypeDir, name+"/"
	case sandbox.TypeSymlink:
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, fi.SymlinkTarget
	default:
		hdr.Typeflag, hdr.Size = tar.TypeReg, fi.Size
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if hdr.Typeflag != tar.TypeReg {
		return nil
	}
	rc, err := sess.ReadFile(ctx, fi.Path)
	if err != nil {
		return err
	}
	defer rc.Close()
	n, err := io.Copy(tw, io.LimitReader(rc, fi.Size))
	if err == nil && n != fi.Size {
		err = fmt.Errorf("%s changed size while it was archived: %w", fi.Path, sandbox.ErrState)
	}
	return err
}

// WriteDir extracts the tar stream r into the sandbox directory dir,
// creating it. A session that is a sandbox.Archiver extracts it itself,
// in one request, with RestoreWorkspace's refusals; any other gets it
// through Mkdir and WriteFile, every member vetted by CheckHeader first,
// and can make no links that way: a symlink or hard link member is
// refused with sandbox.ErrInvalid (such a session makes links only when
// the whole workspace is restored). Members before a refused one may have
// been written; a caller that wants all or nothing checks the stream
// first. The workspace root as a whole is Session.RestoreWorkspace.
func WriteDir(ctx context.Context, sess sandbox.Session, dir string, r io.Reader) error {
	if ar, ok := sess.(sandbox.Archiver); ok {
		return ar.WriteDirTar(ctx, dir, r)
	}
	if err := sess.Mkdir(ctx, dir); err != nil {
		return err
	}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return streamError(err)
		}
		name, err := CheckHeader(hdr)
		if err != nil {
			return err
		}
		if name == "." {
			continue
		}
		p := path.Join(dir, name)
		switch hdr.Typeflag {
		case tar.TypeDir:
			err = sess.Mkdir(ctx, p)
		case tar.TypeReg, tar.TypeRegA, tar.TypeCont, tar.TypeGNUSparse:
			if strings.HasSuffix(hdr.Name, "/") {
				err = sess.Mkdir(ctx, p)
			} else {
				err = sess.WriteFile(ctx, p, tr, uint32(hdr.Mode)&0o777)
			}
		default:
			err = fmt.Errorf("tar member %q: this runtime makes links only when the whole workspace is restored; write the tar to the workspace root: %w", hdr.Name, sandbox.ErrInvalid)
		}
		if err != nil {
			return err
		}
	}
}
