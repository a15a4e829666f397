package guest

import (
	"context"
	"io"
	"sort"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
)

func benchSession(b *testing.B) *Session {
	b.Helper()
	_, c := startTestServer(b, Config{})
	return NewSession(c, SessionOptions{ID: "bench"})
}

// BenchmarkExecTrue times a whole Exec of `true` through the daemon on its
// unix socket: start stream, fork/exec, wait, end event. Target: p50 under
// 1.5 ms.
func BenchmarkExecTrue(b *testing.B) {
	s := benchSession(b)
	ctx := context.Background()
	s.Exec(ctx, sandbox.ExecRequest{Cmd: "true"})
	times := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for b.Loop() {
		t := time.Now()
		if _, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "true"}); err != nil {
			b.Fatal(err)
		}
		times = append(times, time.Since(t))
	}
	b.StopTimer()
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(times[len(times)*9/10].Microseconds())/1000, "p90-ms")
}

// BenchmarkUpload writes 64 MiB files through /files. Target: at least
// 300 MB/s.
func BenchmarkUpload(b *testing.B) {
	s := benchSession(b)
	ctx := context.Background()
	const size = 64 << 20
	b.SetBytes(size)
	for b.Loop() {
		if err := s.WriteFile(ctx, "big.bin", io.LimitReader(zeros{}, size), 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDownload reads a 64 MiB file through /files.
func BenchmarkDownload(b *testing.B) {
	s := benchSession(b)
	ctx := context.Background()
	const size = 64 << 20
	if err := s.WriteFile(ctx, "big.bin", io.LimitReader(zeros{}, size), 0o644); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(size)
	for b.Loop() {
		rc, err := s.ReadFile(ctx, "big.bin")
		if err != nil {
			b.Fatal(err)
		}
		if n, err := io.Copy(io.Discard, rc); err != nil || n != size {
			b.Fatalf("read %d bytes: %v", n, err)
		}
		rc.Close()
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }
