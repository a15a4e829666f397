package storetest

import (
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
)

// at is t0 plus m minutes.
func at(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }

func use(team, sandbox string, from, to int, cpu float64, bytesIn int64) store.Usage {
	return store.Usage{
		TeamID: team, SandboxID: sandbox, Start: at(from), End: at(to),
		CPUSeconds: cpu, MemoryGiBSecs: 2 * cpu, DiskGiBHours: cpu / 10, BytesIn: bytesIn, BytesOut: 2 * bytesIn,
	}
}

func (h *harness) testAddUsage(t *testing.T) {
	s := h.withTeams(t)
	ctx := t.Context()
	for _, tc := range []struct {
		name    string
		u       store.Usage
		wantErr error
		msg     []string
	}{
		// The sandbox need not exist: usage is billed after it is deleted.
		{"ok", use(teamA.ID, "sb-gone", 0, 1, 1, 1), nil, nil},
		{"zero amounts", use(teamA.ID, "sb-1", 0, 1, 0, 0), nil, nil},
		{"no such team", use("nope", "sb-1", 0, 1, 1, 1), sandbox.ErrNotFound, []string{"team nope not found"}},
		{"empty team", use("", "sb-1", 0, 1, 1, 1), sandbox.ErrInvalid, nil},
		{"empty sandbox", use(teamA.ID, "", 0, 1, 1, 1), sandbox.ErrInvalid, nil},
		{"empty interval", use(teamA.ID, "sb-1", 1, 1, 1, 1), sandbox.ErrInvalid, []string{"not after"}},
		{"backwards", use(teamA.ID, "sb-1", 2, 1, 1, 1), sandbox.ErrInvalid, nil},
		{"no start", store.Usage{TeamID: teamA.ID, SandboxID: "sb-1", End: t0}, sandbox.ErrInvalid, nil},
		{"negative", use(teamA.ID, "sb-1", 0, 1, -1, 1), sandbox.ErrInvalid, nil},
		{"negative bytes", use(teamA.ID, "sb-1", 0, 1, 1, -1), sandbox.ErrInvalid, nil},
		{"NaN", use(teamA.ID, "sb-1", 0, 1, math.NaN(), 1), sandbox.ErrInvalid, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkErr(t, s.AddUsage(ctx, tc.u), tc.wantErr, tc.msg...)
		})
	}
}

func (h *harness) testUsageByTeam(t *testing.T) {
	s := h.withTeams(t)
	ctx := t.Context()
	// The range is minutes [60, 120).
	for _, u := range []store.Usage{
		use(teamA.ID, "sb-1", 70, 80, 10, 100),   // inside: all of it
		use(teamA.ID, "sb-1", 50, 70, 20, 101),   // half inside: 10, 50.5 bytes -> 51
		use(teamA.ID, "sb-1", 110, 150, 40, 400), // a quarter inside: 10, 100
		use(teamA.ID, "sb-2", 0, 180, 30, 300),   // a third inside: 10, 100
		use(teamA.ID, "sb-2", 0, 60, 99, 999),    // ends as the range starts: none
		use(teamA.ID, "sb-3", 120, 130, 99, 999), // starts as it ends: none
		use(teamB.ID, "sb-9", 60, 120, 5, 5),     // another team's
	} {
		if err := s.AddUsage(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	approx := cmpopts.EquateApprox(0, 1e-9)

	for _, tc := range []struct {
		name     string
		team     string
		from, to int
		want     []store.Usage
	}{
		{"pro rata", teamA.ID, 60, 120, []store.Usage{
			{TeamID: teamA.ID, SandboxID: "sb-1", Start: at(60), End: at(120), CPUSeconds: 30, MemoryGiBSecs: 60, DiskGiBHours: 3, BytesIn: 100 + 51 + 100, BytesOut: 200 + 101 + 200},
			{TeamID: teamA.ID, SandboxID: "sb-2", Start: at(60), End: at(120), CPUSeconds: 10, MemoryGiBSecs: 20, DiskGiBHours: 1, BytesIn: 100, BytesOut: 200},
		}},
		{"covered part of the range", teamA.ID, 75, 200, []store.Usage{
			{TeamID: teamA.ID, SandboxID: "sb-1", Start: at(75), End: at(150), CPUSeconds: 5 + 40, MemoryGiBSecs: 90, DiskGiBHours: 4.5, BytesIn: 50 + 400, BytesOut: 100 + 800},
			{TeamID: teamA.ID, SandboxID: "sb-2", Start: at(75), End: at(180), CPUSeconds: 17.5, MemoryGiBSecs: 35, DiskGiBHours: 1.75, BytesIn: 175, BytesOut: 350},
			{TeamID: teamA.ID, SandboxID: "sb-3", Start: at(120), End: at(130), CPUSeconds: 99, MemoryGiBSecs: 198, DiskGiBHours: 9.9, BytesIn: 999, BytesOut: 1998},
		}},
		{"other team", teamB.ID, 60, 120, []store.Usage{
			{TeamID: teamB.ID, SandboxID: "sb-9", Start: at(60), End: at(120), CPUSeconds: 5, MemoryGiBSecs: 10, DiskGiBHours: 0.5, BytesIn: 5, BytesOut: 10},
		}},
		{"every team", "", 100, 120, []store.Usage{
			{TeamID: teamA.ID, SandboxID: "sb-1", Start: at(110), End: at(120), CPUSeconds: 10, MemoryGiBSecs: 20, DiskGiBHours: 1, BytesIn: 100, BytesOut: 200},
			{TeamID: teamA.ID, SandboxID: "sb-2", Start: at(100), End: at(120), CPUSeconds: 30.0 / 9, MemoryGiBSecs: 60.0 / 9, DiskGiBHours: 3.0 / 9, BytesIn: 33, BytesOut: 67},
			{TeamID: teamB.ID, SandboxID: "sb-9", Start: at(100), End: at(120), CPUSeconds: 5.0 / 3, MemoryGiBSecs: 10.0 / 3, DiskGiBHours: 0.5 / 3, BytesIn: 2, BytesOut: 3},
		}},
		{"nothing", teamA.ID, 1000, 2000, []store.Usage{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.UsageByTeam(ctx, tc.team, at(tc.from), at(tc.to))
			checkErr(t, err, nil)
			if diff := cmp.Diff(tc.want, got, approx); diff != "" {
				t.Errorf("UsageByTeam(%q, %d, %d) (-want +got):\n%s", tc.team, tc.from, tc.to, diff)
			}
		})
	}

	t.Run("adjacent ranges add up to the whole", func(t *testing.T) {
		whole, err := s.UsageByTeam(ctx, teamA.ID, at(0), at(200))
		checkErr(t, err, nil)
		sum := map[string]float64{}
		for _, cut := range [][2]int{{0, 65}, {65, 111}, {111, 200}} {
			part, err := s.UsageByTeam(ctx, teamA.ID, at(cut[0]), at(cut[1]))
			checkErr(t, err, nil)
			for _, u := range part {
				sum[u.SandboxID] += u.CPUSeconds
			}
		}
		for _, u := range whole {
			if math.Abs(sum[u.SandboxID]-u.CPUSeconds) > 1e-9 {
				t.Errorf("sandbox %s: parts sum to %v CPU seconds, the whole is %v", u.SandboxID, sum[u.SandboxID], u.CPUSeconds)
			}
		}
	})

	for _, tc := range []struct {
		name     string
		from, to time.Time
	}{
		{"empty range", at(60), at(60)},
		{"backwards", at(60), at(0)},
		{"no from", time.Time{}, at(0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.UsageByTeam(ctx, teamA.ID, tc.from, tc.to)
			checkErr(t, err, sandbox.ErrInvalid)
			if got != nil {
				t.Errorf("got %v with the error", got)
			}
		})
	}
}
