package server

import (
	"math"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/fleet"
	"github.com/cove-sandbox/cove/store"
)

// usageOver is GET /v1/usage over [from, to) for key.
func (ts *testServer) usageOver(t *testing.T, key string, from, to time.Time) api.UsageReport {
	t.Helper()
	var rep api.UsageReport
	q := url.Values{"from": {from.Format(time.RFC3339)}, "to": {to.Format(time.RFC3339)}}
	ts.must(t, 200, "GET", "/v1/usage?"+q.Encode(), key, nil, &rep)
	return rep
}

// near: equal but for float rounding.
func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// TestMetering: a sandbox's use is billed by the second for its
// allocation, running and stopped, and a restarted server carries on
// from where the last one stopped recording: the total is exactly the
// time that passed, not more (counted twice) or less (a gap).
func TestMetering(t *testing.T) {
	clock := newFakeClock()
	prices := Prices{CPUSecond: 0.001, MemoryGiBSec: 0.0001, DiskGiBHour: 0.5, EgressGiB: 2}
	ts := newTestServer(t, Config{Now: clock.Now, Prices: prices, CPUByAllocation: true})
	keyA, keyB := ts.teamKey(t, "team-a"), ts.teamKey(t, "team-b")
	t0 := clock.Now()
	from, to := t0.Add(-time.Hour), t0.Add(24*time.Hour)
	// 2 CPUs, 1 GiB of memory, 4 GiB of disk.
	sb := ts.create(t, keyA, api.CreateSandbox{CPUs: 2, MemoryBytes: 1 << 30, DiskBytes: 4 << 30, TTLSeconds: 86400})
	ts.create(t, keyB, api.CreateSandbox{})

	want := func(what string, cpu, memGiBs, diskGiBh float64) {
		t.Helper()
		var got api.UsageReport
		eventually(t, what, func() bool {
			got = ts.usageOver(t, keyA, from, to)
			return len(got.Sandboxes) == 1 && near(got.Total.CPUSeconds, cpu) && near(got.Total.DiskGiBHours, diskGiBh)
		})
		if got.Sandboxes[0].SandboxID != sb.ID || !near(got.Total.MemoryGiBSecs, memGiBs) {
			t.Fatalf("%s: %+v", what, got)
		}
	}

	// Running for 10 minutes: 2 CPUs x 600 s, 1 GiB x 600 s. Bytes
	// through the API or the proxy go into the interval.
	ts.countIn(sb.ID, 1000)
	ts.countOut(sb.ID, 3<<29) // 1.5 GiB out
	clock.Add(10 * time.Minute)
	want("10 minutes running", 1200, 600, 0)
	rep := ts.usageOver(t, keyA, from, to)
	if rep.Total.BytesIn != 1000 || rep.Total.BytesOut != 3<<29 {
		t.Errorf("bytes: %+v", rep.Total)
	}
	wantCost := 1200*0.001 + 600*0.0001 + 1.5*2
	if math.Abs(rep.Total.CostUSD-wantCost) > 1e-9 || rep.Sandboxes[0].CostUSD != rep.Total.CostUSD {
		t.Errorf("cost %v, want %v", rep.Total.CostUSD, wantCost)
	}

	// Stopped for 30 minutes: 4 GiB x 0.5 h of disk, no CPU.
	ts.must(t, 200, "POST", "/v1/sandboxes/"+sb.ID+"/stop", keyA, nil, nil)
	clock.Add(30 * time.Minute)
	want("30 minutes stopped", 1200, 600, 2)

	// Resumed for 5 minutes; the interval since the last record is cut
	// at the resume: stopped before, running after.
	clock.Add(5 * time.Minute)
	ts.must(t, 200, "POST", "/v1/sandboxes/"+sb.ID+"/resume", keyA, nil, nil)
	clock.Add(5 * time.Minute)
	want("resumed", 1800, 900, 2+4*(5.0/60))

	// A restart: the new server reads where the recorded usage ends.
	ts = ts.restart(t)
	clock.Add(15 * time.Minute)
	want("15 more minutes after a restart", 3600, 1800, 2+4*(5.0/60))

	// Team B sees only its own sandbox; an admin may ask for team A's.
	repB := ts.usageOver(t, keyB, from, to)
	for _, u := range repB.Sandboxes {
		if u.SandboxID == sb.ID {
			t.Errorf("team B sees team A's usage: %+v", repB)
		}
	}
	if code, _ := ts.call(t, "GET", "/v1/usage?team=team-a", keyB, nil); code != http.StatusForbidden {
		t.Errorf("team B asking for team A's usage: %d", code)
	}
	var adm api.UsageReport
	q := url.Values{"team": {"team-a"}, "from": {from.Format(time.RFC3339)}, "to": {to.Format(time.RFC3339)}}
	ts.must(t, 200, "GET", "/v1/usage?"+q.Encode(), ts.Admin, nil, &adm)
	if adm.Total.CPUSeconds != 3600 {
		t.Errorf("admin's view of team A: %+v", adm.Total)
	}

	// Deleted, it stays on the bill up to the last tick that saw it
	// (the one that recorded the 3600 s above), and no further.
	ts.must(t, 204, "DELETE", "/v1/sandboxes/"+sb.ID, keyA, nil, nil)
	clock.Add(time.Minute)
	want("deleted", 3600, 1800, 2+4*(5.0/60))
}

// TestMeteringWrites: while nothing changes, use is held and recorded
// once it is fleet.MeterInterval long (not every tick), and a server that
// shuts down records what it holds.
func TestMeteringWrites(t *testing.T) {
	clock := newFakeClock()
	ts := newTestServer(t, Config{Now: clock.Now, CPUByAllocation: true})
	key := ts.teamKey(t, "writes")
	sb := ts.create(t, key, api.CreateSandbox{TTLSeconds: 86400})
	recorded := func() store.Usage {
		t.Helper()
		us, err := ts.cfg.Store.UsageByTeam(t.Context(), "writes", sb.CreatedAt, clock.Now().Add(time.Hour))
		if err != nil || len(us) > 1 {
			t.Fatalf("usage: %+v %v", us, err)
		}
		if len(us) == 0 {
			return store.Usage{}
		}
		return us[0]
	}
	step := func(n int) {
		for range n {
			clock.Add(10 * time.Second)
			time.Sleep(2 * lifecycleInterval)
		}
	}
	step(5)
	if u := recorded(); u.CPUSeconds != 0 {
		t.Errorf("50 s recorded as they passed: %+v", u)
	}
	step(1)
	eventually(t, "a minute's interval", func() bool { return recorded().CPUSeconds >= 60 })
	first := recorded()
	// 40 s more: still held, not written tick by tick.
	step(4)
	if u := recorded(); !u.Start.Equal(sb.CreatedAt) || !u.End.Equal(first.End) || u.End.Sub(u.Start) < fleet.MeterInterval {
		t.Errorf("recorded %v to %v, want one interval of a minute or more from %v, ending at %v", u.Start, u.End, sb.CreatedAt, first.End)
	}
	ts.restart(t) // the old server records what it holds
	if u := recorded(); u.CPUSeconds != 100 || !u.End.Equal(clock.Now()) {
		t.Errorf("after shutting down: %+v, want 100 s up to %v", u, clock.Now())
	}
}

func TestUsageBadRange(t *testing.T) {
	ts := newTestServer(t, Config{})
	key := ts.teamKey(t, "ranges")
	for _, q := range []string{"from=yesterday", "to=2026-13-01T00:00:00Z", "from=2026-02-01T00:00:00Z&to=2026-01-01T00:00:00Z"} {
		if code, data := ts.call(t, "GET", "/v1/usage?"+q, key, nil); code != 400 {
			t.Errorf("%s: %d %s", q, code, data)
		}
	}
	var rep api.UsageReport
	ts.must(t, 200, "GET", "/v1/usage", key, nil, &rep)
	now := time.Now().UTC()
	if rep.From.Day() != 1 || rep.From.Month() != now.Month() || rep.To.Sub(rep.From) < 28*24*time.Hour || rep.Sandboxes == nil {
		t.Errorf("default range: %+v", rep)
	}
}

// TestUsageByDay: by=day splits the team's use at UTC midnights, and the
// days add up to the total.
func TestUsageByDay(t *testing.T) {
	clock := newFakeClock()
	ts := newTestServer(t, Config{Now: clock.Now, CPUByAllocation: true})
	key := ts.teamKey(t, "daily")
	t0 := clock.Now()
	ts.create(t, key, api.CreateSandbox{CPUs: 1, TTLSeconds: 3 * 86400})
	clock.Add(25 * time.Hour)
	day0 := t0.Truncate(24 * time.Hour)
	q := url.Values{"from": {day0.Format(time.RFC3339)}, "to": {day0.AddDate(0, 0, 3).Format(time.RFC3339)}, "by": {"day"}}
	var rep api.UsageReport
	eventually(t, "25 hours recorded", func() bool {
		ts.must(t, 200, "GET", "/v1/usage?"+q.Encode(), key, nil, &rep)
		return near(rep.Total.CPUSeconds, 25*3600)
	})
	if len(rep.Days) != 3 {
		t.Fatalf("got %d days, want 3: %+v", len(rep.Days), rep.Days)
	}
	sum := 0.0
	for i, d := range rep.Days {
		if want := day0.AddDate(0, 0, i).Format(time.DateOnly); d.Date != want {
			t.Errorf("day %d is %s, want %s", i, d.Date, want)
		}
		sum += d.CPUSeconds
	}
	if first := day0.AddDate(0, 0, 1).Sub(t0).Seconds(); !near(rep.Days[0].CPUSeconds, first) {
		t.Errorf("first day: %v CPU-seconds, want %v (creation to midnight)", rep.Days[0].CPUSeconds, first)
	}
	if !near(sum, rep.Total.CPUSeconds) || rep.Days[1].CostUSD <= 0 {
		t.Errorf("days %+v do not add up to the total %+v", rep.Days, rep.Total)
	}
	for _, bad := range []string{"by=week", "by=day&from=2020-01-01T00:00:00Z&to=2026-01-01T00:00:00Z"} {
		if code, data := ts.call(t, "GET", "/v1/usage?"+bad, key, nil); code != 400 {
			t.Errorf("%s: %d %s, want 400", bad, code, data)
		}
	}
}
