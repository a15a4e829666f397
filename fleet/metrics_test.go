package fleet

import (
	"testing"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
)

// TestMetricRing: CPU use is the share of the sandbox's CPUs used since
// the sample before (the first: since it started), 0 while stopped, at
// most 100; memory without page cache; the ring keeps MetricsKeep.
func TestMetricRing(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rec := store.Sandbox{ID: "sb", State: store.StateRunning, StartedAt: t0}
	rec.Spec.Limits.CPUs, rec.Spec.Limits.MemoryBytes = 2, 1<<30
	r := &metricRing{started: t0}
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

	r.add(rec, sandbox.Stats{At: at(10), CPUTime: 5 * time.Second, MemoryBytes: 300, MemoryCache: 100}, at(10))
	r.add(rec, sandbox.Stats{At: at(20), CPUTime: 25 * time.Second}, at(20))
	r.add(rec, sandbox.Stats{At: at(30), CPUTime: 90 * time.Second}, at(30)) // more than 2 CPUs can give: clamped
	for i, want := range []float64{25, 100, 100} {
		if got := r.samples[i].CPUPercent; got != want {
			t.Errorf("sample %d: cpu %v%%, want %v%%", i, got, want)
		}
	}
	if s := r.samples[0]; s.CPUCount != 2 || s.MemUsed != 200 || s.MemCache != 100 || s.MemTotal != 1<<30 {
		t.Errorf("first sample %+v", s)
	}
	rec.State = store.StateStopped
	r.add(rec, sandbox.Stats{At: at(40)}, at(40))
	if got := r.samples[3].CPUPercent; got != 0 {
		t.Errorf("stopped: cpu %v%%, want 0", got)
	}
	for i := range MetricsKeep + 10 {
		r.add(rec, sandbox.Stats{At: at(50 + i)}, at(50+i))
	}
	if len(r.samples) != MetricsKeep || !r.samples[len(r.samples)-1].At.Equal(at(50+MetricsKeep+9)) {
		t.Errorf("ring of %d ending %v, want the newest %d", len(r.samples), r.samples[len(r.samples)-1].At, MetricsKeep)
	}
}
