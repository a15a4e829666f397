package storetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"testing"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
)

// RunBlobs runs the store.Blobs contract against the blobs open gives
// (a new, empty place each call; cleaned up when t ends): what a
// snapshot's upload, download (with ranges) and delete rely on.
func RunBlobs(t *testing.T, open func(t *testing.T) store.Blobs) {
	for _, c := range []struct {
		name string
		fn   func(*testing.T, store.Blobs)
	}{
		{"RoundTrip", testBlobRoundTrip},
		{"Seek", testBlobSeek},
		{"Replace", testBlobReplace},
		{"FailedPutKeepsOld", testBlobFailedPut},
		{"Missing", testBlobMissing},
		{"BadNames", testBlobBadNames},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.fn(t, open(t))
		})
	}
}

// random is n random bytes: more than one chunk of any chunked store
// when n is a few MiB.
func random(t *testing.T, n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

func readBlob(t *testing.T, bs store.Blobs, name string) []byte {
	t.Helper()
	b, err := bs.OpenBlob(context.Background(), name)
	if err != nil {
		t.Fatalf("opening blob %s: %v", name, err)
	}
	defer b.Close()
	data, err := io.ReadAll(b)
	if err != nil {
		t.Fatalf("reading blob %s: %v", name, err)
	}
	if int64(len(data)) != b.Size() {
		t.Errorf("blob %s: read %d bytes, its size says %d", name, len(data), b.Size())
	}
	return data
}

func testBlobRoundTrip(t *testing.T, bs store.Blobs) {
	ctx := context.Background()
	for _, n := range []int{0, 1, 5<<20 + 3} {
		want := random(t, n)
		name := "snapshots/team-a/snap-" + string(rune('a'+n%26)) + ".tar"
		size, err := bs.PutBlob(ctx, name, bytes.NewReader(want))
		if err != nil || size != int64(n) {
			t.Fatalf("put of %d bytes: %d, %v", n, size, err)
		}
		if got := readBlob(t, bs, name); !bytes.Equal(got, want) {
			t.Errorf("blob of %d bytes read back as %d bytes, not the same", n, len(got))
		}
	}
}

func testBlobSeek(t *testing.T, bs store.Blobs) {
	ctx := context.Background()
	want := random(t, 3<<20+17)
	if _, err := bs.PutBlob(ctx, "s/x.tar", bytes.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	b, err := bs.OpenBlob(ctx, "s/x.tar")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, off := range []int64{1<<20 + 5, 0, int64(len(want)) - 10, 2 << 20} {
		if pos, err := b.Seek(off, io.SeekStart); err != nil || pos != off {
			t.Fatalf("seek to %d: %d, %v", off, pos, err)
		}
		got := make([]byte, 10)
		if _, err := io.ReadFull(b, got); err != nil || !bytes.Equal(got, want[off:off+10]) {
			t.Errorf("10 bytes at %d: %v, not the blob's", off, err)
		}
	}
	if end, err := b.Seek(0, io.SeekEnd); err != nil || end != int64(len(want)) {
		t.Errorf("seek to the end: %d, %v; want %d", end, err, len(want))
	}
	if n, err := b.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Errorf("a read at the end: %d, %v; want io.EOF", n, err)
	}
}

func testBlobReplace(t *testing.T, bs store.Blobs) {
	ctx := context.Background()
	bs.PutBlob(ctx, "s/r.tar", bytes.NewReader(random(t, 2<<20)))
	want := []byte("the second")
	if _, err := bs.PutBlob(ctx, "s/r.tar", bytes.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	if got := readBlob(t, bs, "s/r.tar"); !bytes.Equal(got, want) {
		t.Errorf("replaced blob reads %d bytes, want %q", len(got), want)
	}
}

// failingReader gives n bytes, then err.
type failingReader struct {
	n   int
	err error
}

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n == 0 {
		return 0, f.err
	}
	k := min(len(p), f.n)
	f.n -= k
	return k, nil
}

// A put whose source fails (a snapshot cut short), or whose context
// ends, keeps the blob it would have replaced, or none.
func testBlobFailedPut(t *testing.T, bs store.Blobs) {
	ctx := context.Background()
	old := []byte("old and whole")
	bs.PutBlob(ctx, "s/f.tar", bytes.NewReader(old))
	boom := errors.New("the sandbox went away")
	if _, err := bs.PutBlob(ctx, "s/f.tar", &failingReader{n: 3 << 20, err: boom}); !errors.Is(err, boom) {
		t.Errorf("put from a failing source: %v, want its error", err)
	}
	if got := readBlob(t, bs, "s/f.tar"); !bytes.Equal(got, old) {
		t.Errorf("after a failed replace the blob reads %d bytes, want the old %q", len(got), old)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := bs.PutBlob(cctx, "s/g.tar", bytes.NewReader(random(t, 2<<20))); err == nil {
		t.Errorf("a put with its context ended succeeded")
	}
	if _, err := bs.OpenBlob(ctx, "s/g.tar"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("after a cancelled put: %v, want ErrNotFound", err)
	}
}

func testBlobMissing(t *testing.T, bs store.Blobs) {
	ctx := context.Background()
	if _, err := bs.OpenBlob(ctx, "s/none.tar"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("open of a missing blob: %v, want ErrNotFound", err)
	}
	if err := bs.DeleteBlob(ctx, "s/none.tar"); err != nil {
		t.Errorf("delete of a missing blob: %v, want none", err)
	}
	bs.PutBlob(ctx, "s/d.tar", bytes.NewReader([]byte("x")))
	if err := bs.DeleteBlob(ctx, "s/d.tar"); err != nil {
		t.Fatal(err)
	}
	if _, err := bs.OpenBlob(ctx, "s/d.tar"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("open after delete: %v, want ErrNotFound", err)
	}
}

// Names that would leave a data directory, or hide, are refused before
// anything is read or written.
func testBlobBadNames(t *testing.T, bs store.Blobs) {
	ctx := context.Background()
	for _, name := range []string{"", "/etc/passwd", "../x", "s/../../x", "s/./x", "s//x", "s/.hidden", "s/x\x00y", `s\x`, "s/x y"} {
		if _, err := bs.PutBlob(ctx, name, bytes.NewReader([]byte("x"))); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("put %q: %v, want ErrInvalid", name, err)
		}
		if _, err := bs.OpenBlob(ctx, name); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("open %q: %v, want ErrInvalid", name, err)
		}
		if err := bs.DeleteBlob(ctx, name); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("delete %q: %v, want ErrInvalid", name, err)
		}
	}
}
