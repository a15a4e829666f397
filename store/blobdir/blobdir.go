// Package blobdir keeps store.Blobs as files under one directory: a
// server's data directory, for a server alone or replicas on one host
// sharing it (PostgreSQL keeps them itself, for replicas on several
// hosts). A blob's name is its path under the directory; a put writes a
// temporary file beside it, synced and renamed into place.
package blobdir

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cove-sandbox/cove/store"
	"github.com/cove-sandbox/cove/store/internal/check"
)

// Dir is store.Blobs in the files of a directory.
type Dir struct{ root string }

var _ store.Blobs = (*Dir)(nil)

// New keeps blobs under root (made when the first is put).
func New(root string) *Dir { return &Dir{root: root} }

func (d *Dir) path(name string) (string, error) {
	if err := check.BlobName(name); err != nil {
		return "", err
	}
	return filepath.Join(d.root, filepath.FromSlash(name)), nil
}

// PutBlob writes r to the blob name (store.Blobs).
func (d *Dir) PutBlob(ctx context.Context, name string, r io.Reader) (int64, error) {
	p, err := d.path(name)
	if err != nil {
		return 0, err
	}
	n, err := WriteAtomic(p, func(w io.Writer) error {
		_, err := io.Copy(w, readerCtx{ctx, r})
		return err
	})
	if err == nil {
		SweepTemps(filepath.Dir(p), time.Now())
	}
	return n, err
}

// readerCtx stops a copy when its context ends.
type readerCtx struct {
	ctx context.Context
	r   io.Reader
}

func (rc readerCtx) Read(p []byte) (int, error) {
	if err := rc.ctx.Err(); err != nil {
		return 0, err
	}
	return rc.r.Read(p)
}

// OpenBlob opens the blob name (store.Blobs).
func (d *Dir) OpenBlob(_ context.Context, name string) (store.Blob, error) {
	p, err := d.path(name)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, check.NotFound("blob " + name)
	}
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	return file{f, fi.Size()}, nil
}

type file struct {
	*os.File
	size int64
}

func (f file) Size() int64 { return f.size }

// DeleteBlob removes the blob name (store.Blobs).
func (d *Dir) DeleteBlob(_ context.Context, name string) error {
	p, err := d.path(name)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// WriteAtomic writes a file through a temp file in its directory, synced
// and renamed into place, so the name holds a whole file or nothing. It
// returns the size.
func WriteAtomic(name string, write func(io.Writer) error) (n int64, err error) {
	dir := filepath.Dir(name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, err
	}
	f, err := os.CreateTemp(dir, ".tmp-"+filepath.Base(name)+"-*")
	if err != nil {
		return 0, err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err := write(f); err != nil {
		return 0, err
	}
	if err := f.Sync(); err != nil {
		return 0, err
	}
	// The file is new, so its size is what write wrote.
	info, err := f.Stat()
	if err != nil {
		return 0, err
	}
	if err := f.Close(); err != nil {
		return 0, err
	}
	if err := os.Rename(f.Name(), name); err != nil {
		return 0, err
	}
	// The rename itself must survive a crash before the record is made.
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return info.Size(), nil
}

// staleTemp is how old a temp file must be before SweepTemps removes it:
// older than any write still going on.
const staleTemp = 24 * time.Hour

// SweepTemps removes temp files (".tmp-*") left in dir by writes a crash
// cut short: blobs here, uploads the front doors spool.
func SweepTemps(dir string, now time.Time) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), ".tmp-") {
			continue
		}
		if info, err := e.Info(); err == nil && now.Sub(info.ModTime()) > staleTemp {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}
