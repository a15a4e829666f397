package local

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/local/internal/runsc"
	"github.com/cove-sandbox/cove/template"
)

// The gVisor tier's benchmarks (issue 17's targets; `cove bench` prints
// the same measures side by side in one table):
//
//	go test ./sandbox/local -run '^$' -bench 'GVisor|RunscRun' -benchtime 20x
//
// Pause/resume and fork hold 512 MB and four copies: run them with a
// small -benchtime (3x).

// reportPercentiles reports times' p50 and p90 in milliseconds.
func reportPercentiles(b *testing.B, times []time.Duration) {
	if len(times) == 0 {
		return
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	b.ReportMetric(float64(times[(len(times)-1)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(times[(len(times)-1)*9/10].Microseconds())/1000, "p90-ms")
}

// benchExec runs script in s and returns its output, failing b on error
// or a non-zero exit.
func benchExec(b *testing.B, s sandbox.Session, script string) string {
	b.Helper()
	var out strings.Builder
	st, err := s.Exec(context.Background(), sandbox.ExecRequest{Cmd: "sh", Args: []string{"-c", script}, Stdout: &out, Stderr: &out})
	if err != nil || st.Code != 0 {
		b.Fatalf("exec %q: %v (exit %d): %s", script, err, st.Code, out.String())
	}
	return out.String()
}

// BenchmarkGVisorCreateFirstOutput times create -> the first command's
// output of a gVisor sandbox with the host template (target: p50 within
// 1.5x of BenchmarkRunscRunFloor's).
func BenchmarkGVisorCreateFirstOutput(b *testing.B) {
	rt := newGVisor(b)
	ctx := context.Background()
	var times, creates []time.Duration
	for b.Loop() {
		t0 := time.Now()
		s, err := rt.Create(ctx, sandbox.Spec{})
		if err != nil {
			b.Fatal(err)
		}
		creates = append(creates, time.Since(t0))
		var out strings.Builder
		if _, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "echo", Args: []string{"hi"}, Stdout: &out}); err != nil || out.String() != "hi\n" {
			b.Fatalf("%q %v", out.String(), err)
		}
		times = append(times, time.Since(t0))
		b.StopTimer()
		rt.Delete(ctx, s.ID())
		b.StartTimer()
	}
	reportPercentiles(b, times)
	// Of which the create, until the daemon answers.
	b.ReportMetric(float64(median(creates).Microseconds())/1000, "create-p50-ms")
}

// BenchmarkRunscRunFloor times a bare `runsc run` of the host template's
// root printing "hi", with the tier's flags: the floor a gVisor
// sandbox's create -> first output is compared with.
func BenchmarkRunscRunFloor(b *testing.B) {
	rt := newGVisor(b)
	tm, err := rt.cfg.Templates.Resolve(context.Background(), template.HostName)
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	// runsc --network none binds an empty namespace in its state
	// directory, and leaves it there.
	b.Cleanup(func() { unix.Unmount(filepath.Join(dir, "state", "null-netns"), unix.MNT_DETACH) })
	if err := WriteFloorBundle(filepath.Join(dir, "bundle"), tm.Lower, tm.Binds); err != nil {
		b.Fatal(err)
	}
	path := runsc.Installed("")
	var times []time.Duration
	i := 0
	for b.Loop() {
		i++
		t0 := time.Now()
		out, err := exec.Command(path, "--root", filepath.Join(dir, "state"), "--platform", "systrap", "--network", "none",
			"--overlay2", "none", "--ignore-cgroups", "run", "--bundle", filepath.Join(dir, "bundle"), fmt.Sprintf("cove-floor-%d", i)).CombinedOutput()
		if err != nil || string(out) != "hi\n" {
			b.Fatalf("runsc run: %v: %s", err, out)
		}
		times = append(times, time.Since(t0))
	}
	reportPercentiles(b, times)
}

// BenchmarkGVisorExecTrue times an exec round trip in a running gVisor
// sandbox (target: within 2x of BenchmarkExecTrue, the native tier's).
func BenchmarkGVisorExecTrue(b *testing.B) {
	rt := newGVisor(b)
	ctx := context.Background()
	s, err := rt.Create(ctx, sandbox.Spec{})
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Delete(ctx, s.ID())
	s.Exec(ctx, sandbox.ExecRequest{Cmd: "true"})
	var times []time.Duration
	for b.Loop() {
		t0 := time.Now()
		if _, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "true"}); err != nil {
			b.Fatal(err)
		}
		times = append(times, time.Since(t0))
	}
	reportPercentiles(b, times)
}

// holdMemory is a shell command that starts a process keeping mb
// megabytes resident (random bytes, which neither a zero-page check nor
// compression can shrink) and returns once it holds them.
func holdMemory(mb int) string {
	return fmt.Sprintf(`rm -f /tmp/held; python3 -c 'import os,time
b=os.urandom(%d<<20)
open("/tmp/held","w").write(str(os.getpid()))
time.sleep(1e9)' >/dev/null 2>&1 &
while ! test -s /tmp/held; do sleep 0.05; done`, mb)
}

// BenchmarkGVisorPauseResume512MB times a pause with memory and its resume
// of a gVisor sandbox whose process holds 512 MB (target: under 2 s
// each).
func BenchmarkGVisorPauseResume512MB(b *testing.B) {
	if _, err := exec.LookPath("python3"); err != nil {
		b.Skip("python3 is not installed: it holds the memory")
	}
	rt := newGVisor(b)
	ctx := context.Background()
	s, err := rt.Create(ctx, sandbox.Spec{})
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Delete(ctx, s.ID())
	benchExec(b, s, holdMemory(512))
	var pauses, resumes []time.Duration
	for b.Loop() {
		t0 := time.Now()
		if err := rt.Pause(ctx, s.ID()); err != nil {
			b.Fatal(err)
		}
		pauses = append(pauses, time.Since(t0))
		t0 = time.Now()
		if s, err = rt.Resume(ctx, s.ID()); err != nil {
			b.Fatal(err)
		}
		resumes = append(resumes, time.Since(t0))
		b.StopTimer()
		benchExec(b, s, "kill -0 $(cat /tmp/held)")
		b.StartTimer()
	}
	b.ReportMetric(median(pauses).Seconds(), "pause-s")
	b.ReportMetric(median(resumes).Seconds(), "resume-s")
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[(len(s)-1)/2]
}

// BenchmarkGVisorForkMemory4 times a fork with memory of a running gVisor
// sandbox into 4 copies (one checkpoint, four restores, the source
// resumed), each copy's shell still running.
func BenchmarkGVisorForkMemory4(b *testing.B) {
	rt := newGVisor(b)
	ctx := context.Background()
	s, err := rt.Create(ctx, sandbox.Spec{})
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Delete(ctx, s.ID())
	benchExec(b, s, "sleep 1000000 >/dev/null 2>&1 & echo $! > /tmp/held")
	var times []time.Duration
	for b.Loop() {
		t0 := time.Now()
		copies, err := rt.ForkMemory(ctx, s.ID(), 4)
		if err != nil {
			b.Fatal(err)
		}
		times = append(times, time.Since(t0))
		b.StopTimer()
		for _, c := range copies {
			benchExec(b, c, "kill -0 $(cat /tmp/held)")
			rt.Delete(ctx, c.ID())
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(median(times).Microseconds())/1000, "total-ms")
	b.ReportMetric(float64(median(times).Microseconds())/4000, "per-copy-ms")
}
