package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/cove-sandbox/cove/internal/app/runtimes"
	"github.com/cove-sandbox/cove/internal/cli/clibase"
	"github.com/cove-sandbox/cove/sandbox"
)

// bench measures the daemon's hot paths from a real sandbox and prints a
// table, with a direct fork/exec of the same program on the host as the
// floor to compare against.
func bench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	clibase.SetUsage(fs, "Usage: cove bench [flags]\n\nMeasures exec round trips and file throughput through the daemon, the local runtime, or a server.\n")
	n := fs.Int("n", 500, "exec round trips to time")
	mb := fs.Int("mb", 256, "megabytes to upload and download")
	runs := fs.Int("runs", 100, "runs per measure for the local runtime and its peers")
	guestOnly := fs.Bool("guest-only", false, "measure only the daemon, not the local runtime")
	gvisorOnly := fs.Bool("gvisor-only", false, "measure only the local runtime's gVisor tier, beside a bare runsc run and the native tier")
	cliOnly := fs.Bool("cli-only", false, "measure only cove sandbox exec run as a command against the same exec in process")
	serverMode := fs.Bool("server", false, "measure a Cove server through its API: the one in COVE_SERVER (with COVE_API_KEY), or one started here")
	clients := fs.Int("clients", 50, "with --server: concurrent clients")
	load := fs.Duration("load", 0, "with --server: also run a create/exec/delete load this long (e.g. 30s)")
	replicas := fs.Int("replicas", 1, "with --server and no COVE_SERVER: start this many `cove serve --replicas` on one data directory behind a round-robin balancer, and SIGKILL and restart one during --load")
	if err := clibase.ParseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	if *gvisorOnly {
		return benchGVisor(ctx, *runs, stdout, stderr)
	}
	if *cliOnly {
		return benchCLI(ctx, *runs, stdout, stderr)
	}
	if *serverMode {
		return benchServer(ctx, os.Getenv("COVE_SERVER"), os.Getenv("COVE_API_KEY"), *runs, *clients, *replicas, *load, stdout, stderr)
	}
	dir, err := os.MkdirTemp("", "cove-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	rt, err := runtimes.BenchHostproc(filepath.Join(dir, "rt"))
	if err != nil {
		return err
	}
	t0 := time.Now()
	s, err := rt.Create(ctx, sandbox.Spec{})
	if err != nil {
		return err
	}
	createTime := time.Since(t0)
	defer rt.Delete(context.WithoutCancel(ctx), s.ID())

	guestTimes, hostTimes, err := timeExecs(ctx, s, *n)
	if err != nil {
		return err
	}

	size := int64(*mb) << 20
	t := time.Now()
	if err := s.WriteFile(ctx, "bench.bin", io.LimitReader(zeroReader{}, size), 0o644); err != nil {
		return err
	}
	up := time.Since(t)
	t = time.Now()
	rc, err := s.ReadFile(ctx, "bench.bin")
	if err != nil {
		return err
	}
	got, err := io.Copy(io.Discard, rc)
	rc.Close()
	if err != nil || got != size {
		return fmt.Errorf("download: got %d bytes, want %d (%v)", got, size, err)
	}
	down := time.Since(t)

	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "measure\tcove guest\thost fork/exec\tratio\ttarget")
	gp50, gp90 := pct(guestTimes, 50), pct(guestTimes, 90)
	hp50, hp90 := pct(hostTimes, 50), pct(hostTimes, 90)
	fmt.Fprintf(tw, "exec true p50\t%s\t%s\t%.2fx\t< 1.5ms\n", fmtDur(gp50), fmtDur(hp50), float64(gp50)/float64(hp50))
	fmt.Fprintf(tw, "exec true p90\t%s\t%s\t%.2fx\t\n", fmtDur(gp90), fmtDur(hp90), float64(gp90)/float64(hp90))
	fmt.Fprintf(tw, "upload %d MiB\t%.0f MB/s\t\t\t>= 300 MB/s\n", *mb, float64(size)/up.Seconds()/1e6)
	fmt.Fprintf(tw, "download %d MiB\t%.0f MB/s\t\t\t\n", *mb, float64(size)/down.Seconds()/1e6)
	fmt.Fprintf(tw, "sandbox create\t%s\t\t\t\n", fmtDur(createTime))
	if err := tw.Flush(); err != nil {
		return err
	}
	if *guestOnly {
		return nil
	}
	fmt.Fprintln(stdout)
	if err := benchCLI(ctx, *runs, stdout, stderr); err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	if err := benchLocal(ctx, *runs, stdout, stderr); err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	return benchGVisor(ctx, *runs, stdout, stderr)
}

// timeExecs times n exec round trips of true in s beside n fork/execs
// of true on the host.
func timeExecs(ctx context.Context, s sandbox.Session, n int) (guest, host []time.Duration, err error) {
	s.Exec(ctx, sandbox.ExecRequest{Cmd: "true"}) // warm up the connection
	guest = make([]time.Duration, n)
	for i := range guest {
		t := time.Now()
		if _, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "true"}); err != nil {
			return nil, nil, err
		}
		guest[i] = time.Since(t)
	}
	host = make([]time.Duration, n)
	truePath, _ := exec.LookPath("true")
	for i := range host {
		t := time.Now()
		if err := exec.Command(truePath).Run(); err != nil {
			return nil, nil, err
		}
		host[i] = time.Since(t)
	}
	return guest, host, nil
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func pct(d []time.Duration, p int) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[(len(s)-1)*p/100]
}

func fmtDur(d time.Duration) string {
	return fmt.Sprintf("%.3fms", float64(d.Microseconds())/1000)
}
