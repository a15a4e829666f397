package fleet

import (
	"math"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/store"
)

func TestUsageSplit(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	rec := func(state string, started, stopped int) store.Sandbox {
		r := store.Sandbox{ID: "sb", TeamID: "t", State: state, CreatedAt: t0, StartedAt: at(started)}
		r.Spec.Limits.CPUs, r.Spec.Limits.DiskBytes = 1, 1<<30
		if stopped >= 0 {
			r.StoppedAt = at(stopped)
		}
		return r
	}
	type part struct {
		from, to int
		running  bool
	}
	for _, tc := range []struct {
		name     string
		rec      store.Sandbox
		from, to int
		want     []part
	}{
		{"new and running", rec("running", 0, -1), 0, 10, []part{{0, 10, true}}},
		{"resumed inside", rec("running", 5, -1), 0, 10, []part{{0, 5, false}, {5, 10, true}}},
		{"stopped inside", rec("stopped", 0, 4), 0, 10, []part{{0, 4, true}, {4, 10, false}}},
		{"stopped at the end", rec("stopped", 0, 10), 0, 10, []part{{0, 10, true}}},
		{"stopped later than now", rec("stopped", 0, 12), 0, 10, []part{{0, 10, true}}},
		{"stopped before", rec("stopped", 0, 3), 5, 10, []part{{5, 10, false}}},
		{"resumed and stopped inside", rec("stopped", 4, 7), 2, 10, []part{{2, 4, false}, {4, 7, true}, {7, 10, false}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := split(tc.rec, at(tc.from), at(tc.to))
			if len(got) != len(tc.want) {
				t.Fatalf("got %d parts %+v, want %+v", len(got), got, tc.want)
			}
			for i, w := range tc.want {
				g := got[i]
				mins := float64(w.to - w.from)
				wantCPU, wantDisk := 0.0, 0.0
				if w.running {
					wantCPU = mins * 60
				} else {
					wantDisk = mins / 60
				}
				if !g.Start.Equal(at(w.from)) || !g.End.Equal(at(w.to)) || g.CPUSeconds != wantCPU || math.Abs(g.DiskGiBHours-wantDisk) > 1e-12 {
					t.Errorf("part %d: %v-%v cpu %v disk %v, want %+v", i, g.Start.Sub(t0), g.End.Sub(t0), g.CPUSeconds, g.DiskGiBHours, w)
				}
			}
		})
	}
}
