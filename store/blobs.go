package store

import (
	"context"
	"io"
)

// Blobs keeps large byte streams (snapshot tars) where every process
// sharing the store finds them: in PostgreSQL itself, so replicas on
// several hosts, each with a data directory of its own, serve each
// other's snapshots; or in files of one data directory (store/blobdir),
// for a server alone or replicas on one host.
//
// A name is one or more path segments of letters, digits and . _ -
// separated by "/" ("snapshots/TEAM/ID.tar"); no segment is "." or ".."
// or starts with a dot. Names are not reused while a reader may be
// reading (a replaced blob read at the same time may read a mix).
type Blobs interface {
	// PutBlob stores r's bytes under name, replacing any blob of that
	// name, whole or not at all: a failed or cancelled put leaves the
	// old blob (or none). It returns the size.
	PutBlob(ctx context.Context, name string, r io.Reader) (int64, error)
	// OpenBlob opens the blob name for reading; ErrNotFound if none.
	OpenBlob(ctx context.Context, name string) (Blob, error)
	// DeleteBlob removes the blob name; no error if there is none.
	DeleteBlob(ctx context.Context, name string) error
}

// Blob is an open blob: it seeks, so a download can resume at a range.
type Blob interface {
	io.ReadSeekCloser
	// Size is the blob's length in bytes.
	Size() int64
}
