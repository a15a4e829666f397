package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5"

	"github.com/cove-sandbox/cove/store"
	"github.com/cove-sandbox/cove/store/internal/check"
)

var _ store.Blobs = (*Store)(nil)

// blobChunk is the size of a blob's chunks: a row each, so neither a put
// nor a read holds more than this in memory.
const blobChunk = 1 << 20

// PutBlob stores r's bytes as the blob name (store.Blobs): its row and
// its chunks in one transaction, so the blob is whole or absent, and a
// reader of the blob it replaces reads the old one until the commit.
func (s *Store) PutBlob(ctx context.Context, name string, r io.Reader) (int64, error) {
	if err := check.BlobName(name); err != nil {
		return 0, err
	}
	var size int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		size = 0
		if _, err := tx.Exec(ctx, `DELETE FROM blobs WHERE name = $1`, name); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO blobs (name, size, chunks, created_at) VALUES ($1, 0, 0, $2)`, name, s.now().UnixNano()); err != nil {
			return err
		}
		buf := make([]byte, blobChunk)
		seq := 0
		for {
			n, rerr := io.ReadFull(r, buf)
			if n > 0 {
				if _, err := tx.Exec(ctx, `INSERT INTO blob_chunks (name, seq, data) VALUES ($1, $2, $3)`, name, seq, buf[:n]); err != nil {
					return err
				}
				seq++
				size += int64(n)
			}
			if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
				break
			}
			if rerr != nil {
				return &readError{rerr}
			}
		}
		_, err := tx.Exec(ctx, `UPDATE blobs SET size = $2, chunks = $3 WHERE name = $1`, name, size, seq)
		return err
	})
	var re *readError
	if errors.As(err, &re) {
		return 0, re.err // the source's error, as it was
	}
	if err != nil {
		return 0, wrap(err, "storing blob %s", name)
	}
	return size, nil
}

// readError is the source's error in PutBlob, kept apart from the
// database's.
type readError struct{ err error }

func (e *readError) Error() string { return e.err.Error() }

// OpenBlob opens the blob name (store.Blobs).
func (s *Store) OpenBlob(ctx context.Context, name string) (store.Blob, error) {
	if err := check.BlobName(name); err != nil {
		return nil, err
	}
	b := &blob{s: s, ctx: context.WithoutCancel(ctx), name: name, cur: -1}
	err := s.pool.QueryRow(ctx, `SELECT size, chunks FROM blobs WHERE name = $1`, name).Scan(&b.size, &b.chunks)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, check.NotFound("blob " + name)
	}
	if err != nil {
		return nil, wrap(err, "opening blob %s", name)
	}
	return b, nil
}

// DeleteBlob removes the blob name and its chunks (store.Blobs).
func (s *Store) DeleteBlob(ctx context.Context, name string) error {
	if err := check.BlobName(name); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, `DELETE FROM blobs WHERE name = $1`, name)
	return wrap(err, "deleting blob %s", name)
}

// blob reads a stored blob a chunk at a time, each chunk by its number,
// so a seek costs nothing and a read at most one query.
type blob struct {
	s      *Store
	ctx    context.Context
	name   string
	size   int64
	chunks int
	pos    int64
	cur    int    // the chunk in data; -1 for none
	data   []byte // chunk cur
}

func (b *blob) Size() int64 { return b.size }

func (b *blob) Read(p []byte) (int, error) {
	if b.pos >= b.size {
		return 0, io.EOF
	}
	seq := int(b.pos / blobChunk)
	if seq != b.cur {
		err := b.s.pool.QueryRow(b.ctx, `SELECT data FROM blob_chunks WHERE name = $1 AND seq = $2`, b.name, seq).Scan(&b.data)
		if errors.Is(err, pgx.ErrNoRows) {
			return 0, fmt.Errorf("blob %s was deleted while it was read", b.name)
		}
		if err != nil {
			return 0, wrap(err, "reading blob %s", b.name)
		}
		b.cur = seq
	}
	off := int(b.pos - int64(seq)*blobChunk)
	if off >= len(b.data) {
		return 0, fmt.Errorf("blob %s is shorter than its recorded size", b.name)
	}
	n := copy(p, b.data[off:])
	b.pos += int64(n)
	return n, nil
}

func (b *blob) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += b.pos
	case io.SeekEnd:
		offset += b.size
	default:
		return 0, fmt.Errorf("blob %s: seek: whence %d", b.name, whence)
	}
	if offset < 0 {
		return 0, fmt.Errorf("blob %s: seek to %d, before its start", b.name, offset)
	}
	b.pos = offset
	return offset, nil
}

func (b *blob) Close() error {
	b.data = nil
	return nil
}
