package sqlite

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
	"github.com/cove-sandbox/cove/store/internal/check"
	"github.com/cove-sandbox/cove/store/storetest"
)

// TestContract runs the store contract suite (store/storetest), which
// store/postgres passes too, on SQLite files.
func TestContract(t *testing.T) {
	t.Parallel()
	storetest.Run(t, storetest.Target{
		NewDB: func(t *testing.T) string { return filepath.Join(t.TempDir(), "cove.db") },
		Open: func(t *testing.T, path string, now func() time.Time) (store.Store, error) {
			s, err := Open(t.Context(), path)
			if err != nil {
				return nil, err
			}
			s.now = now
			return s, nil
		},
		KeptDeleted: func(t *testing.T, s store.Store) int {
			var n int
			if err := s.(*Store).queryRow(t.Context(), `SELECT count(*) FROM deleted_sandboxes`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		},
	})
}

// Helpers of the SQLite-specific tests (crash safety, benchmarks).

var (
	teamA = store.Team{ID: "team-a", Name: "A", Quota: store.Quota{Sandboxes: 5, CPUs: 2.5, MemoryBytes: 8 << 30}, CreatedAt: t0}
)

// sb returns a running sandbox of team, made i seconds after t0, with
// labels from pairs ("k", "v", ...).
func sb(id, team string, i int, pairs ...string) store.Sandbox {
	var labels map[string]string
	for j := 0; j+1 < len(pairs); j += 2 {
		if labels == nil {
			labels = map[string]string{}
		}
		labels[pairs[j]] = pairs[j+1]
	}
	at := t0.Add(time.Duration(i) * time.Second)
	return store.Sandbox{
		ID: id, TeamID: team, Spec: sandbox.Spec{Template: "host", Labels: labels},
		State: store.StateRunning, CreatedAt: at, StartedAt: at, OnExpire: store.ExpireStop, LastActivity: at,
	}
}

// at is t0 plus m minutes.
func at(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }

func use(team, sandbox string, from, to int, cpu float64, bytesIn int64) store.Usage {
	return store.Usage{
		TeamID: team, SandboxID: sandbox, Start: at(from), End: at(to),
		CPUSeconds: cpu, MemoryGiBSecs: 2 * cpu, DiskGiBHours: cpu / 10, BytesIn: bytesIn, BytesOut: 2 * bytesIn,
	}
}

func TestPageLimit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, want int
		wantErr  error
	}{
		{0, 100, nil},
		{1, 1, nil},
		{1000, 1000, nil},
		{1001, 1000, nil},
		{1 << 40, 1000, nil},
		{-1, 0, sandbox.ErrInvalid},
	} {
		got, err := check.PageLimit(tc.in)
		checkErr(t, err, tc.wantErr)
		if got != tc.want {
			t.Errorf("check.PageLimit(%d): got %d, want %d", tc.in, got, tc.want)
		}
	}
}
