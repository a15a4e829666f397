package fleet

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/store"
)

// Metering. A sandbox is billed by the second: while running, for the
// CPU time it used (CPUSeconds; see cpu.go: the runtime's measure, or,
// when the runtime cannot measure or Config.CPUByAllocation says so, its
// CPU limit x seconds, which is what CPUSeconds meant before) and its
// memory limit in GiB x seconds (MemoryGiBSecs: what it keeps from
// others); while stopped, its disk limit in GiB x hours (DiskGiBHours);
// and the bytes through the API and the port proxy (BytesIn into the
// sandbox, BytesOut out of it: the egress).
//
// Each sandbox's use is one unbroken line of store.Usage intervals from
// its creation: each starts where the last recorded one ended. The
// lifecycle loop extends the line every tick, writing an interval once it
// is MeterInterval long, or at once when the sandbox stopped or resumed
// since (the interval is cut at StoppedAt or StartedAt, so each part is
// billed for its state; see split). A restarted server reads where each line ends
// from the store, so nothing is billed twice and nothing is skipped; a
// server that shuts down records everything up to then first.
//
// Known inexactness: a sandbox deleted through the API is billed up to
// the last tick that saw it (at most a lifecycle interval short: never for
// time after its deletion); one made
// and deleted between two ticks is not billed; one stopped and resumed
// between two ticks is billed stopped from the end of its recorded usage
// up to the resume, though it ran for part of that time (resuming clears
// StoppedAt).

// MeterInterval is the longest use is held in memory before it is
// recorded (one row per sandbox per MeterInterval).
var MeterInterval = time.Minute

// gib is a GiB in bytes.
const gib = 1 << 30

// meter extends each sandbox's line of usage. Only the lifecycle loop's
// goroutine uses it.
type meter struct {
	f *Fleet
	// last is where each sandbox's recorded usage ends.
	last map[string]time.Time
	// seen is each sandbox's record at the last run and when that was,
	// to bill one that was deleted since, whose record is gone.
	seen map[string]seen
}

type seen struct {
	rec store.Sandbox
	at  time.Time
}

func newMeter(f *Fleet) *meter {
	return &meter{f: f, last: map[string]time.Time{}, seen: map[string]seen{}}
}

// run meters recs (every sandbox there is) up to now; force records even
// intervals shorter than MeterInterval. A sandbox seen last run and gone
// now (deleted through the API) is billed up to when it was last seen,
// and forgotten.
func (m *meter) run(ctx context.Context, recs []store.Sandbox, now time.Time, force bool) {
	m.load(ctx, recs)
	present := make(map[string]bool, len(recs))
	for _, rec := range recs {
		present[rec.ID] = true
		m.record(ctx, rec, now, force)
		m.seen[rec.ID] = seen{rec, now}
	}
	for id, sn := range m.seen {
		if !present[id] {
			m.record(ctx, sn.rec, sn.at, true)
			m.forget(id)
		}
	}
	m.f.dropCPUExcept(func(id string) bool { return present[id] })
}

// load finds where the recorded usage of sandboxes new to this meter
// ends: the end of the last interval in the store, or, when there is
// none, the sandbox's creation. A sandbox whose usage cannot be read is
// left out (and not metered) until it can.
func (m *meter) load(ctx context.Context, recs []store.Sandbox) {
	byTeam := map[string][]store.Sandbox{}
	for _, rec := range recs {
		if _, ok := m.last[rec.ID]; !ok {
			byTeam[rec.TeamID] = append(byTeam[rec.TeamID], rec)
		}
	}
	for team, news := range byTeam {
		from := news[0].CreatedAt
		for _, rec := range news {
			if rec.CreatedAt.Before(from) {
				from = rec.CreatedAt
			}
		}
		// All of the team's usage since the oldest: one query a team.
		sums, err := m.f.cfg.Store.UsageByTeam(ctx, team, from, farFuture)
		if err != nil {
			m.f.log.Error("metering: reading recorded usage", "team", team, "err", err)
			continue
		}
		ends := map[string]time.Time{}
		for _, u := range sums {
			ends[u.SandboxID] = u.End
		}
		for _, rec := range news {
			if end, ok := ends[rec.ID]; ok && end.After(rec.CreatedAt) {
				m.last[rec.ID] = end
			} else {
				m.last[rec.ID] = rec.CreatedAt
			}
		}
	}
}

// farFuture bounds "all usage from then on"; the store takes times up
// to the year 2262.
var farFuture = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)

// record extends rec's usage to now, when due (see the package comment
// on metering) or when force.
func (m *meter) record(ctx context.Context, rec store.Sandbox, now time.Time, force bool) {
	last, ok := m.last[rec.ID]
	if !ok || !now.After(last) {
		return
	}
	changed := rec.StartedAt.After(last) || rec.StoppedAt.After(last)
	if !force && !changed && now.Sub(last) < MeterInterval {
		return
	}
	parts := split(rec, last, now)
	in, out := m.f.takeTraffic(rec.ID)
	parts[len(parts)-1].BytesIn, parts[len(parts)-1].BytesOut = in, out
	if m.f.measuresCPU() {
		m.f.readCPU(ctx, rec)
		running := make([]bool, len(parts))
		for i, u := range parts {
			running[i] = runningAt(rec, u.Start)
		}
		spreadCPU(parts, running, m.f.takeCPU(rec.ID))
	}
	for i, u := range parts {
		if err := m.f.cfg.Store.AddUsage(ctx, u); err != nil {
			m.f.log.Error("metering: recording usage", "sandbox", rec.ID, "err", err)
			// Not lost: the bytes and CPU wait for the next try;
			// the time is still after last.
			m.f.CountIn(rec.ID, u.BytesIn)
			m.f.CountOut(rec.ID, u.BytesOut)
			var cpu float64
			for _, p := range parts[i:] {
				cpu += p.CPUSeconds
			}
			m.f.giveBackCPU(rec.ID, time.Duration(cpu*float64(time.Second)))
			return
		}
		m.last[rec.ID] = u.End
	}
}

// runningAt says whether rec was running at t, by the changes split
// knows (StartedAt, and StoppedAt when it is stopped now).
func runningAt(rec store.Sandbox, t time.Time) bool {
	stopped := rec.State != store.StateRunning && !rec.StoppedAt.IsZero() && !rec.StoppedAt.After(t)
	started := !rec.StartedAt.After(t)
	if stopped && started {
		return rec.StartedAt.After(rec.StoppedAt)
	}
	return started
}

// split prices [from, to) for the states rec was in then. The record
// knows two changes: it became running at StartedAt and, if it is
// stopped now, stopped at StoppedAt (before StartedAt it was stopped, or
// not yet made: a new sandbox's usage starts at its creation, which is
// its StartedAt). Changes inside the interval cut it.
func split(rec store.Sandbox, from, to time.Time) []store.Usage {
	type change struct {
		at      time.Time
		running bool
	}
	changes := []change{{rec.StartedAt, true}}
	if rec.State != store.StateRunning && !rec.StoppedAt.IsZero() {
		changes = append(changes, change{rec.StoppedAt, false})
	}
	slices.SortStableFunc(changes, func(a, b change) int { return a.at.Compare(b.at) })
	running := false
	for _, c := range changes {
		if !c.at.After(from) {
			running = c.running
		}
	}
	var parts []store.Usage
	for _, c := range changes {
		if c.at.After(from) && c.at.Before(to) && c.running != running {
			parts = append(parts, usageOf(rec, running, from, c.at))
			from, running = c.at, c.running
		}
	}
	return append(parts, usageOf(rec, running, from, to))
}

// usageOf is rec's allocation over [from, to) in one state.
func usageOf(rec store.Sandbox, running bool, from, to time.Time) store.Usage {
	u := store.Usage{TeamID: rec.TeamID, SandboxID: rec.ID, Start: from, End: to}
	secs := to.Sub(from).Seconds()
	l := rec.Spec.Limits
	if running {
		u.CPUSeconds = l.CPUs * secs
		u.MemoryGiBSecs = float64(l.MemoryBytes) / gib * secs
	} else {
		u.DiskGiBHours = float64(l.DiskBytes) / gib * secs / 3600
	}
	return u
}

func (m *meter) forget(id string) {
	delete(m.last, id)
	delete(m.seen, id)
	m.f.forgetCPU(id)
}

// Usage is team's metered use over [from, to) per sandbox (deleted ones
// too) and in total, priced with Config.Prices; with byDay, also per UTC
// day (at most maxUsageDays of them). Intervals that straddle from or to
// count pro rata. Use of the last minute or so may not be recorded yet.
func (f *Fleet) Usage(ctx context.Context, team string, from, to time.Time, byDay bool) (api.UsageReport, error) {
	if !to.After(from) {
		return api.UsageReport{}, invalid("to (%s) must be after from (%s)", to.Format(time.RFC3339), from.Format(time.RFC3339))
	}
	if byDay && to.Sub(from) > maxUsageDays*24*time.Hour {
		return api.UsageReport{}, invalid("by=day covers at most %d days; narrow from and to", maxUsageDays)
	}
	sums, err := f.cfg.Store.UsageByTeam(ctx, team, from, to)
	if err != nil {
		return api.UsageReport{}, fmt.Errorf("usage of team %s: %w", team, err)
	}
	rep := api.UsageReport{From: from, To: to, Sandboxes: make([]api.SandboxUsage, 0, len(sums)), Total: f.cfg.Prices.total(sums)}
	for _, u := range sums {
		su := api.SandboxUsage{SandboxID: u.SandboxID, CPUSeconds: u.CPUSeconds, MemoryGiBSecs: u.MemoryGiBSecs,
			DiskGiBHours: u.DiskGiBHours, BytesIn: u.BytesIn, BytesOut: u.BytesOut}
		su.CostUSD = f.cfg.Prices.cost(su)
		rep.Sandboxes = append(rep.Sandboxes, su)
	}
	if byDay {
		if rep.Days, err = f.usageDays(ctx, team, from, to); err != nil {
			return api.UsageReport{}, fmt.Errorf("usage of team %s per day: %w", team, err)
		}
	}
	return rep, nil
}

// maxUsageDays bounds a by=day report (a query per day).
const maxUsageDays = 400

// usageDays is team's use per UTC day over [from, to). The store prices
// intervals that straddle a bound pro rata, so asking it day by day
// splits the use exactly.
func (f *Fleet) usageDays(ctx context.Context, team string, from, to time.Time) ([]api.UsageDay, error) {
	var days []api.UsageDay
	from, to = from.UTC(), to.UTC()
	for day := time.Date(from.Year(), from.Month(), from.Day(), 0, 0, 0, 0, time.UTC); day.Before(to); day = day.AddDate(0, 0, 1) {
		start, end := day, day.AddDate(0, 0, 1)
		if start.Before(from) {
			start = from
		}
		if end.After(to) {
			end = to
		}
		sums, err := f.cfg.Store.UsageByTeam(ctx, team, start, end)
		if err != nil {
			return nil, err
		}
		t := f.cfg.Prices.total(sums)
		days = append(days, api.UsageDay{Date: day.Format(time.DateOnly), CPUSeconds: t.CPUSeconds, MemoryGiBSecs: t.MemoryGiBSecs,
			DiskGiBHours: t.DiskGiBHours, BytesIn: t.BytesIn, BytesOut: t.BytesOut, CostUSD: t.CostUSD})
	}
	return days, nil
}

// Prices are USD per unit of metered use.
type Prices struct {
	CPUSecond    float64 `json:"cpu_second"`
	MemoryGiBSec float64 `json:"memory_gib_second"`
	DiskGiBHour  float64 `json:"disk_gib_hour"`
	EgressGiB    float64 `json:"egress_gib"`
}

// DefaultPrices are in the range of hosted sandbox providers' list prices
// (per vCPU-second and GiB-second), for a self-hoster to replace with
// their own costs.
var DefaultPrices = Prices{CPUSecond: 0.000014, MemoryGiBSec: 0.0000045, DiskGiBHour: 0.0001, EgressGiB: 0.05}

// total is the sum of sandboxes' use, priced.
func (p Prices) total(sums []store.Usage) api.SandboxUsage {
	var t api.SandboxUsage
	for _, u := range sums {
		t.CPUSeconds += u.CPUSeconds
		t.MemoryGiBSecs += u.MemoryGiBSecs
		t.DiskGiBHours += u.DiskGiBHours
		t.BytesIn += u.BytesIn
		t.BytesOut += u.BytesOut
	}
	t.CostUSD = p.cost(t)
	return t
}

// cost prices use; egress is the bytes out of the sandbox.
func (p Prices) cost(u api.SandboxUsage) float64 {
	return u.CPUSeconds*p.CPUSecond + u.MemoryGiBSecs*p.MemoryGiBSec +
		u.DiskGiBHours*p.DiskGiBHour + float64(u.BytesOut)/gib*p.EgressGiB
}
