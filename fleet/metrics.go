package fleet

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
)

// Metrics: what a sandbox uses (CPU, memory, disk), as E2B's getMetrics
// shows it. The runtime measures a sandbox from outside
// (sandbox.StatsReader: the host's cgroup and the sandbox's disk) when
// asked; nothing samples in the background. Each answer is a sample,
// kept in a small ring per sandbox in this process (MetricsKeep samples,
// at most one per MetricsMinGap), so a caller that asks now and then
// gets a history; CPU use is the share of the sandbox's CPUs used
// between a sample and the one before it (the first of a run: since the
// sandbox started). The ring starts over when the sandbox starts again,
// is dropped MetricsForget after its last sample, and is this replica's
// own: a caller whose requests reach several replicas sees each one's
// samples.

var (
	// MetricsKeep is how many samples a sandbox's ring keeps.
	MetricsKeep = 120
	// MetricsMinGap is the least time between two kept samples: asking
	// more often answers the ring as it is.
	MetricsMinGap = time.Second
	// MetricsForget drops a ring this long after its last sample.
	MetricsForget = time.Hour
)

// Sample is one measurement of a sandbox.
type Sample struct {
	At time.Time
	// CPUCount is the sandbox's CPUs (its limit rounded up; the host's
	// when it has none), CPUPercent the share of them used since the
	// sample before, 0 to 100.
	CPUCount   int
	CPUPercent float64
	// MemUsed is the memory it is charged without page cache, MemCache
	// the page cache, MemTotal its limit (0: none).
	MemUsed, MemCache, MemTotal int64
	// DiskUsed and DiskTotal are its own disk's bytes in use and size.
	DiskUsed, DiskTotal int64
	// cpuTime is the sandbox's CPU time at At; running, whether it ran.
	cpuTime time.Duration
	running bool
}

// metricRing is one sandbox's samples since it last started.
type metricRing struct {
	started time.Time
	samples []Sample
}

// metricRings holds a Fleet's rings. The zero value is ready.
type metricRings struct {
	// mu guards rings (by sandbox id) and the rings in it.
	mu    sync.Mutex
	rings map[string]*metricRing
}

// Metrics measures team's sandbox id now and returns its samples kept
// between from and to (zero: unbounded), oldest first. A runtime that
// cannot measure gives none. ErrNotFound when team has no such sandbox;
// ErrUnavailable, naming nothing of the host, when the measure failed
// (the detail goes to the log).
func (f *Fleet) Metrics(ctx context.Context, team, id string, from, to time.Time) ([]Sample, error) {
	rec, err := f.Get(ctx, team, id)
	if err != nil {
		return nil, err
	}
	samples, err := f.sample(ctx, rec)
	if err != nil {
		return nil, err
	}
	out := samples[:0:0]
	for _, s := range samples {
		if (from.IsZero() || !s.At.Before(from)) && (to.IsZero() || !s.At.After(to)) {
			out = append(out, s)
		}
	}
	return out, nil
}

// LatestMetrics measures each of team's sandboxes named in ids that is
// running and returns its newest sample by id; ids that are not the
// team's, not running or cannot be measured are left out.
func (f *Fleet) LatestMetrics(ctx context.Context, team string, ids []string) (map[string]Sample, error) {
	out := make(map[string]Sample, len(ids))
	for _, id := range ids {
		rec, err := f.Get(ctx, team, id)
		if errors.Is(err, sandbox.ErrNotFound) || err == nil && (rec.State != store.StateRunning || f.Expired(rec)) {
			continue
		}
		if err != nil {
			return nil, err
		}
		samples, err := f.sample(ctx, rec)
		if err == nil && len(samples) > 0 {
			out[id] = samples[len(samples)-1]
		}
	}
	return out, nil
}

// sample measures rec's sandbox into its ring, unless the ring's newest
// sample is under MetricsMinGap old, and returns a copy of the ring.
func (f *Fleet) sample(ctx context.Context, rec store.Sandbox) ([]Sample, error) {
	sr, ok := f.cfg.Runtime.(sandbox.StatsReader)
	if !ok {
		return nil, nil
	}
	mr := &f.metrics
	now := f.cfg.Now()
	mr.mu.Lock()
	if mr.rings == nil {
		mr.rings = map[string]*metricRing{}
	}
	mr.forget(now)
	r := mr.rings[rec.ID]
	if r == nil || !r.started.Equal(rec.StartedAt) {
		r = &metricRing{started: rec.StartedAt}
		mr.rings[rec.ID] = r
	}
	// A sample of the same state under MetricsMinGap old is the answer;
	// one from before a stop is not.
	running := rec.State == store.StateRunning
	fresh := false
	if n := len(r.samples); n > 0 {
		last := r.samples[n-1]
		fresh = last.running == running && now.Sub(last.At) < MetricsMinGap
	}
	mr.mu.Unlock()
	if !fresh {
		st, err := sr.Stats(ctx, rec.ID)
		if errors.Is(err, sandbox.ErrNotFound) {
			return nil, fmt.Errorf("sandbox %s: %w", rec.ID, sandbox.ErrNotFound)
		}
		if err != nil {
			f.log.Warn("measuring a sandbox", "sandbox", rec.ID, "err", err)
			return nil, fmt.Errorf("sandbox %s could not be measured right now; retry: %w", rec.ID, sandbox.ErrUnavailable)
		}
		mr.mu.Lock()
		r.add(rec, st, now)
		mr.mu.Unlock()
	}
	mr.mu.Lock()
	defer mr.mu.Unlock()
	return append([]Sample(nil), r.samples...), nil
}

// add turns st into a sample and keeps it; mu is held.
func (r *metricRing) add(rec store.Sandbox, st sandbox.Stats, now time.Time) {
	if st.At.IsZero() {
		st.At = now
	}
	cpus := rec.Spec.Limits.CPUs
	if cpus <= 0 {
		cpus = float64(runtime.NumCPU())
	}
	s := Sample{
		At: st.At, CPUCount: max(1, int(math.Ceil(cpus))),
		MemUsed: max(0, st.MemoryBytes-st.MemoryCache), MemCache: st.MemoryCache, MemTotal: rec.Spec.Limits.MemoryBytes,
		DiskUsed: st.DiskUsed, DiskTotal: st.DiskTotal, cpuTime: st.CPUTime, running: rec.State == store.StateRunning,
	}
	prevAt, prevCPU := rec.StartedAt, time.Duration(0)
	if n := len(r.samples); n > 0 {
		prevAt, prevCPU = r.samples[n-1].At, r.samples[n-1].cpuTime
	}
	if wall := s.At.Sub(prevAt); wall > 0 && s.cpuTime >= prevCPU && rec.State == store.StateRunning {
		s.CPUPercent = min(100, 100*float64(s.cpuTime-prevCPU)/(float64(wall)*cpus))
	}
	r.samples = append(r.samples, s)
	if len(r.samples) > MetricsKeep {
		r.samples = r.samples[len(r.samples)-MetricsKeep:]
	}
}

// forget drops the rings not sampled for MetricsForget; mu is held.
func (mr *metricRings) forget(now time.Time) {
	for id, r := range mr.rings {
		if n := len(r.samples); n == 0 || now.Sub(r.samples[n-1].At) > MetricsForget {
			delete(mr.rings, id)
		}
	}
}
