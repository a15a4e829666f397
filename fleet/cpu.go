package fleet

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
)

// CPU used. A runtime that measures its sandboxes (sandbox.StatsReader:
// the local runtime reads the sandbox cgroup's cpu.stat usage_usec) has
// a counter of CPU time per sandbox that starts at 0 when the sandbox
// starts. The meter reads it each time it records a running sandbox's
// use, and the fleet reads it once more just before it stops or deletes
// one (after that the counter is gone); what the counter gained since
// the last read is the CPU used in between. A restarted server finds
// how much of the counter is already recorded in the store (the CPU
// recorded since the sandbox last started), so nothing is counted twice.
//
// Known inexactness: CPU used between the last read and a stop that the
// fleet did not make (the runtime's supervisor died, the host rebooted)
// is not counted. With a runtime that cannot measure, or with
// Config.CPUByAllocation, CPU is billed by allocation (CPU limit x
// running seconds) as before.

// cpuCounts holds the reads of sandboxes' CPU counters. The zero value
// is ready.
type cpuCounts struct {
	// mu guards marks and pending.
	mu sync.Mutex
	// marks is, per sandbox, how far its counter has been counted.
	marks map[string]cpuMark
	// pending is CPU time read and not yet recorded in the store.
	pending map[string]time.Duration
}

// cpuMark is where a sandbox's counter was last read: started is the
// start the counter counts from, counted its value then.
type cpuMark struct {
	started time.Time
	counted time.Duration
}

// measuresCPU says whether use records CPU used (else allocated).
func (f *Fleet) measuresCPU() bool {
	_, ok := f.cfg.Runtime.(sandbox.StatsReader)
	return ok && !f.cfg.CPUByAllocation
}

// readCPU reads running sandbox rec's CPU counter and adds what it
// gained since the last read to the sandbox's pending CPU. A read that
// fails adds nothing: the counter keeps it for the next one.
func (f *Fleet) readCPU(ctx context.Context, rec store.Sandbox) {
	if !f.measuresCPU() || rec.State != store.StateRunning {
		return
	}
	c := &f.cpu
	c.mu.Lock()
	_, known := c.marks[rec.ID]
	c.mu.Unlock()
	var recorded time.Duration
	if !known {
		// New to this process: the store has what earlier ones counted
		// of this start (intervals are cut at StartedAt).
		sums, err := f.cfg.Store.UsageByTeam(ctx, rec.TeamID, rec.StartedAt, farFuture)
		if err != nil {
			f.log.Warn("metering: reading recorded CPU", "sandbox", rec.ID, "err", err)
			return
		}
		for _, u := range sums {
			if u.SandboxID == rec.ID {
				recorded = time.Duration(u.CPUSeconds * float64(time.Second))
			}
		}
	}
	st, err := f.cfg.Runtime.(sandbox.StatsReader).Stats(ctx, rec.ID)
	if err != nil {
		if !errors.Is(err, sandbox.ErrNotFound) {
			f.log.Warn("metering: reading CPU time", "sandbox", rec.ID, "err", err)
		}
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.marks == nil {
		c.marks, c.pending = map[string]cpuMark{}, map[string]time.Duration{}
	}
	m, ok := c.marks[rec.ID]
	if !ok {
		m = cpuMark{started: rec.StartedAt, counted: recorded}
	}
	if !m.started.Equal(rec.StartedAt) {
		// Started again since: the counter starts over.
		m = cpuMark{started: rec.StartedAt}
	}
	if st.CPUTime > m.counted {
		c.pending[rec.ID] += st.CPUTime - m.counted
		m.counted = st.CPUTime
	}
	c.marks[rec.ID] = m
}

// takeCPU returns and resets a sandbox's pending CPU time.
func (f *Fleet) takeCPU(id string) time.Duration {
	c := &f.cpu
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.pending[id]
	delete(c.pending, id)
	return d
}

// giveBackCPU returns CPU time taken but not recorded.
func (f *Fleet) giveBackCPU(id string, d time.Duration) {
	if d <= 0 {
		return
	}
	c := &f.cpu
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending == nil {
		c.pending = map[string]time.Duration{}
	}
	c.pending[id] += d
}

// forgetCPU drops a deleted sandbox's counter marks.
func (f *Fleet) forgetCPU(id string) {
	c := &f.cpu
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.marks, id)
	delete(c.pending, id)
}

// dropCPUExcept forgets the counters of sandboxes keep says no to (one
// made and deleted between two meter runs was never metered: its CPU
// read at the delete has no line to go on).
func (f *Fleet) dropCPUExcept(keep func(id string) bool) {
	c := &f.cpu
	c.mu.Lock()
	defer c.mu.Unlock()
	for id := range c.marks {
		if !keep(id) {
			delete(c.marks, id)
		}
	}
	for id := range c.pending {
		if !keep(id) {
			delete(c.pending, id)
		}
	}
}

// spreadCPU sets the CPU-seconds of parts (a sandbox's use over
// consecutive intervals) to used, shared among the running parts by
// their length; with no running part, the first part has it all (CPU
// read at a stop, recorded after it).
func spreadCPU(parts []store.Usage, running []bool, used time.Duration) {
	var runSecs float64
	for i, u := range parts {
		parts[i].CPUSeconds = 0
		if running[i] {
			runSecs += u.End.Sub(u.Start).Seconds()
		}
	}
	secs := used.Seconds()
	if runSecs <= 0 {
		parts[0].CPUSeconds = secs
		return
	}
	for i, u := range parts {
		if running[i] {
			parts[i].CPUSeconds = secs * u.End.Sub(u.Start).Seconds() / runSecs
		}
	}
}
