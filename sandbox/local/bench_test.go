package local

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
)

// BenchmarkCreateFirstOutput times create -> the first command's output
// with the host template (target: p50 under 15 ms, p99 under 50 ms).
func BenchmarkCreateFirstOutput(b *testing.B) {
	if testing.Short() {
		b.Skip()
	}
	rt := newRuntime(b)
	ctx := context.Background()
	var times []time.Duration
	for b.Loop() {
		t0 := time.Now()
		s, err := rt.Create(ctx, sandbox.Spec{})
		if err != nil {
			b.Fatal(err)
		}
		var out strings.Builder
		if _, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "echo", Args: []string{"hi"}, Stdout: &out}); err != nil || out.String() != "hi\n" {
			b.Fatalf("%q %v", out.String(), err)
		}
		times = append(times, time.Since(t0))
		b.StopTimer()
		rt.Delete(ctx, s.ID())
		b.StartTimer()
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(times[len(times)*99/100].Microseconds())/1000, "p99-ms")
}

// BenchmarkExecTrue times an exec round trip in a running sandbox
// (target: p50 under 2 ms).
func BenchmarkExecTrue(b *testing.B) {
	rt := newRuntime(b)
	ctx := context.Background()
	s, err := rt.Create(ctx, sandbox.Spec{})
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Delete(ctx, s.ID())
	var times []time.Duration
	for b.Loop() {
		t0 := time.Now()
		if _, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "true"}); err != nil {
			b.Fatal(err)
		}
		times = append(times, time.Since(t0))
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(times[len(times)*99/100].Microseconds())/1000, "p99-ms")
}
