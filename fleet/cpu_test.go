package fleet

import (
	"math"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/store"
)

// TestSpreadCPU: the CPU time read for an interval goes to its running
// parts, by their length (runningAt agrees with split on which parts
// ran), and to the first part when none ran (read at a stop).
func TestSpreadCPU(t *testing.T) {
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
	for _, tc := range []struct {
		name     string
		rec      store.Sandbox
		from, to int
		want     []float64 // CPU-seconds per part, of 12 used
	}{
		{"running", rec("running", 0, -1), 0, 10, []float64{12}},
		{"resumed inside", rec("running", 5, -1), 0, 10, []float64{0, 12}},
		{"stopped inside", rec("stopped", 0, 4), 0, 10, []float64{12, 0}},
		{"stopped before", rec("stopped", 0, 3), 5, 10, []float64{12}},
		{"resumed and stopped inside", rec("stopped", 4, 7), 2, 10, []float64{0, 12, 0}},
		{"stopped and resumed", rec("running", 6, 2), 0, 10, []float64{0, 12}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parts := split(tc.rec, at(tc.from), at(tc.to))
			running := make([]bool, len(parts))
			for i, u := range parts {
				running[i] = runningAt(tc.rec, u.Start)
				if running[i] != (u.CPUSeconds > 0) {
					t.Errorf("part %d: runningAt says %v, split priced it %+v", i, running[i], u)
				}
			}
			spreadCPU(parts, running, 12*time.Second)
			if len(parts) != len(tc.want) {
				t.Fatalf("got %d parts, want %d", len(parts), len(tc.want))
			}
			for i, w := range tc.want {
				if math.Abs(parts[i].CPUSeconds-w) > 1e-9 {
					t.Errorf("part %d: %v CPU-seconds, want %v", i, parts[i].CPUSeconds, w)
				}
			}
		})
	}
	// Two running parts share by length.
	parts := []store.Usage{{Start: at(0), End: at(1)}, {Start: at(1), End: at(4)}}
	spreadCPU(parts, []bool{true, true}, 8*time.Second)
	if parts[0].CPUSeconds != 2 || parts[1].CPUSeconds != 6 {
		t.Errorf("shared by length: %v and %v, want 2 and 6", parts[0].CPUSeconds, parts[1].CPUSeconds)
	}
}
