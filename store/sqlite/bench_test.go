package sqlite

import (
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/store"
)

func benchStore(b *testing.B) *Store {
	b.Helper()
	s, err := Open(b.Context(), filepath.Join(b.TempDir(), "cove.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	if err := s.CreateTeam(b.Context(), teamA); err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkTouchSandboxSkipped is a touch within a second of the last:
// a read, no write.
func BenchmarkTouchSandboxSkipped(b *testing.B) {
	s := benchStore(b)
	if err := s.PutSandbox(b.Context(), sb("sb-1", teamA.ID, 0)); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := s.TouchSandbox(b.Context(), "sb-1", t0.Add(time.Millisecond)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPutSandbox is one write transaction with an fsync of the WAL
// (synchronous=FULL).
func BenchmarkPutSandbox(b *testing.B) {
	s := benchStore(b)
	for i := 0; b.Loop(); i++ {
		if err := s.PutSandbox(b.Context(), sb(fmt.Sprint("sb-", i), teamA.ID, i, "env", "prod")); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTouchSandboxParallel is the hottest write (every exec, file
// operation, port connection) from many goroutines, queued on the one
// writer, each touch a second after the last so that every one is
// written: the worst case.
func BenchmarkTouchSandboxParallel(b *testing.B) {
	s := benchStore(b)
	if err := s.PutSandbox(b.Context(), sb("sb-1", teamA.ID, 0)); err != nil {
		b.Fatal(err)
	}
	var n atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := s.TouchSandbox(b.Context(), "sb-1", t0.Add(time.Duration(n.Add(1))*touchEvery)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkKeyByHashParallel is the read on every request; it writes at
// most once a minute.
func BenchmarkKeyByHashParallel(b *testing.B) {
	s := benchStore(b)
	if err := s.CreateKey(b.Context(), store.APIKey{ID: "k", TeamID: teamA.ID, Hash: "h"}); err != nil {
		b.Fatal(err)
	}
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.KeyByHash(b.Context(), "h"); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkListSandboxesByLabel pages through 1000 sandboxes of which a
// tenth have the label.
func BenchmarkListSandboxesByLabel(b *testing.B) {
	s := benchStore(b)
	for i := range 1000 {
		env := "dev"
		if i%10 == 0 {
			env = "prod"
		}
		if err := s.PutSandbox(b.Context(), sb(fmt.Sprint("sb-", i), teamA.ID, i, "env", env)); err != nil {
			b.Fatal(err)
		}
	}
	f := store.SandboxFilter{TeamID: teamA.ID, Labels: map[string]string{"env": "prod"}, Limit: 20}
	for b.Loop() {
		page, _, err := s.ListSandboxes(b.Context(), f)
		if err != nil || len(page) != 20 {
			b.Fatal(len(page), err)
		}
	}
}
