package postgres

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
	"github.com/cove-sandbox/cove/store/postgres/pgtest"
)

// The same benchmarks as store/sqlite's, on the test server (a unix
// socket, fsync on).

var benchT0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func benchStore(b *testing.B) *Store {
	b.Helper()
	s, err := Open(b.Context(), pgtest.NewDatabase(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	if err := s.CreateTeam(b.Context(), store.Team{ID: "team-a", CreatedAt: benchT0}); err != nil {
		b.Fatal(err)
	}
	return s
}

func benchSandbox(id string, i int, labels map[string]string) store.Sandbox {
	at := benchT0.Add(time.Duration(i) * time.Second)
	return store.Sandbox{ID: id, TeamID: "team-a", Spec: sandbox.Spec{Labels: labels}, State: store.StateRunning,
		CreatedAt: at, StartedAt: at, LastActivity: at, OnExpire: store.ExpireStop}
}

// BenchmarkPutSandbox is one write transaction (upsert and labels),
// committed with a WAL flush.
func BenchmarkPutSandbox(b *testing.B) {
	s := benchStore(b)
	for i := 0; b.Loop(); i++ {
		if err := s.PutSandbox(b.Context(), benchSandbox(fmt.Sprint("sb-", i), i, map[string]string{"env": "prod"})); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTouchSandboxParallel: every touch a second after the last, so
// each is written.
func BenchmarkTouchSandboxParallel(b *testing.B) {
	s := benchStore(b)
	if err := s.PutSandbox(b.Context(), benchSandbox("sb-1", 0, nil)); err != nil {
		b.Fatal(err)
	}
	var n atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := s.TouchSandbox(b.Context(), "sb-1", benchT0.Add(time.Duration(n.Add(1))*touchEvery)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkKeyByHashParallel is the read on every request.
func BenchmarkKeyByHashParallel(b *testing.B) {
	s := benchStore(b)
	if err := s.CreateKey(b.Context(), store.APIKey{ID: "k", TeamID: "team-a", Hash: "h"}); err != nil {
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

// BenchmarkAcquireLease is a holder's renewal.
func BenchmarkAcquireLease(b *testing.B) {
	s := benchStore(b)
	for b.Loop() {
		if ok, err := s.AcquireLease(b.Context(), "lifecycle", "me", time.Minute); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
}

// BenchmarkUpdateSandbox is a locked read-modify-write.
func BenchmarkUpdateSandbox(b *testing.B) {
	s := benchStore(b)
	if err := s.PutSandbox(b.Context(), benchSandbox("sb-1", 0, map[string]string{"env": "prod"})); err != nil {
		b.Fatal(err)
	}
	for i := 0; b.Loop(); i++ {
		if _, err := s.UpdateSandbox(b.Context(), "", "sb-1", func(r *store.Sandbox) error {
			r.LastActivity = benchT0.Add(time.Duration(i) * time.Second)
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
}
