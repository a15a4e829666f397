package guest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"testing"
)

// The file benchmarks below time the small operations an agent makes by
// the hundred (a stat, a short write, a short read, a listing) through
// the Session on the daemon's unix socket: there, resolving the path is a
// visible part of the cost, unlike in the 64 MiB transfers.

// BenchmarkSmallFileOps writes, stats and reads back a 1 KiB file three
// directories below the workspace.
func BenchmarkSmallFileOps(b *testing.B) {
	s := benchSession(b)
	ctx := context.Background()
	data := bytes.Repeat([]byte("x"), 1024)
	const p = "a/b/c/small.txt"
	if err := s.WriteFile(ctx, p, bytes.NewReader(data), 0o644); err != nil {
		b.Fatal(err)
	}
	b.Run("write", func(b *testing.B) {
		for b.Loop() {
			if err := s.WriteFile(ctx, p, bytes.NewReader(data), 0); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("stat", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.Stat(ctx, p); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("read", func(b *testing.B) {
		for b.Loop() {
			rc, err := s.ReadFile(ctx, p)
			if err != nil {
				b.Fatal(err)
			}
			if n, _ := io.Copy(io.Discard, rc); n != int64(len(data)) {
				b.Fatalf("read %d bytes, want %d", n, len(data))
			}
			rc.Close()
		}
	})
}

// BenchmarkListTree lists a tree of 10 directories of 20 files each, two
// levels deep.
func BenchmarkListTree(b *testing.B) {
	s := benchSession(b)
	ctx := context.Background()
	for d := range 10 {
		for f := range 20 {
			if err := s.WriteFile(ctx, fmt.Sprintf("tree/d%d/f%d", d, f), bytes.NewReader(nil), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	for b.Loop() {
		fis, err := s.List(ctx, "tree", 2)
		if err != nil {
			b.Fatal(err)
		}
		if len(fis) != 210 {
			b.Fatalf("listed %d entries, want 210", len(fis))
		}
	}
}
