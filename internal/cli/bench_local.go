package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/cove-sandbox/cove/internal/app/runtimes"
	"github.com/cove-sandbox/cove/sandbox"
)

// benchLocal measures the local runtime against its peers run side by side
// (bubblewrap, runc, gVisor's runsc when installed) and prints a table.
// It installs nothing: a missing peer is skipped with how to get it.
func benchLocal(ctx context.Context, n int, stdout, stderr io.Writer) error {
	if os.Geteuid() != 0 {
		fmt.Fprintln(stderr, "local runtime: skipped (needs root)")
		return nil
	}
	dir, err := os.MkdirTemp("", "cove-bench-local-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	rt, err := runtimes.BenchLocal(filepath.Join(dir, "sb"), 0)
	if err != nil {
		return err
	}
	b := &localBench{rt: rt}
	fmt.Fprintf(stderr, "→ create -> first output, %d runs each\n", n)
	if err := b.createFirstOutput(ctx, n, dir, stderr); err != nil {
		return err
	}
	if err := b.execAndSnapshot(ctx, n, dir, stderr); err != nil {
		return err
	}
	fmt.Fprintln(stderr, "→ 100 sandboxes at once")
	b.hundred(ctx)

	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "measure\truntime\tp50\tp99\tvs cove\ttarget")
	for _, r := range b.rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// benchRuntime is what the bench uses of the local runtime beyond the
// contract: its pool, and the processes and memory of a sandbox.
type benchRuntime interface {
	sandbox.Runtime
	WaitPool()
	DrainPool(ctx context.Context) error
	Processes(id string) ([]int, error)
	MemoryUsage(id string) (int64, error)
}

// localBench is a run of the local runtime's bench: the runtime and the
// table's rows so far.
type localBench struct {
	rt   benchRuntime
	rows [][]string
}

func (b *localBench) add(cols ...string) { b.rows = append(b.rows, cols) }

// createFirstOutput times create -> the first output of `echo hi` on the
// local runtime, on one with a warm pool, and on each peer.
func (b *localBench) createFirstOutput(ctx context.Context, n int, dir string, stderr io.Writer) error {
	rt := b.rt
	coveT, err := timeN(n, func() error { return createAndEcho(ctx, rt) }, func() { deleteAll(ctx, rt) })
	if err != nil {
		return err
	}
	b.add("create→first output (host)", "cove local", ms(coveT.p50), ms(coveT.p99), "1.00x", "p50 < 15ms, p99 < 50ms")
	// With a warm pool of 2, refilled between runs (untimed).
	prt, err := runtimes.BenchLocal(filepath.Join(dir, "pool"), 2)
	if err != nil {
		return err
	}
	prt.Create(ctx, sandbox.Spec{}) // fills the pool
	poolT, err := timeN(n, func() error { return createAndEcho(ctx, prt) }, func() {
		deleteAll(ctx, prt)
		prt.WaitPool()
	})
	prt.DrainPool(ctx)
	if err != nil {
		return err
	}
	b.add("", "cove local, warm pool", ms(poolT.p50), ms(poolT.p99), fmt.Sprintf("%.2fx", float64(poolT.p50)/float64(coveT.p50)), "")
	for _, peer := range peers(dir) {
		if peer.missing != "" {
			fmt.Fprintf(stderr, "  %s: skipped: %s\n", peer.name, peer.missing)
			continue
		}
		i := 0
		pt, err := timeN(n, func() error {
			i++
			out, err := peer.run(i)
			if err == nil && strings.TrimSpace(out) != "hi" {
				err = fmt.Errorf("%s printed %q", peer.name, out)
			}
			return err
		}, nil)
		if err != nil {
			fmt.Fprintf(stderr, "  %s: failed: %v\n", peer.name, err)
			continue
		}
		b.add("", peer.name, ms(pt.p50), ms(pt.p99), fmt.Sprintf("%.2fx", float64(pt.p50)/float64(coveT.p50)), "")
	}
	return nil
}

// deleteAll deletes every sandbox of rt.
func deleteAll(ctx context.Context, rt sandbox.Runtime) {
	infos, _ := rt.List(ctx)
	for _, in := range infos {
		rt.Delete(ctx, in.ID)
	}
}

// execAndSnapshot times exec round trips in a running sandbox, then a
// snapshot of 100 MB in 1000 files and its restore into another.
func (b *localBench) execAndSnapshot(ctx context.Context, n int, dir string, stderr io.Writer) error {
	rt := b.rt
	s, err := rt.Create(ctx, sandbox.Spec{})
	if err != nil {
		return err
	}
	s.Exec(ctx, sandbox.ExecRequest{Cmd: "true"})
	et, err := timeN(max(n, 200), func() error {
		_, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "true"})
		return err
	}, nil)
	if err != nil {
		return err
	}
	b.add("exec true (running sandbox)", "cove local", ms(et.p50), ms(et.p99), "", "p50 < 2ms")

	fmt.Fprintln(stderr, "→ writing 100 MB in 1000 files for the snapshot test")
	if _, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "sh", Args: []string{"-c",
		"mkdir -p data && i=0; while [ $i -lt 1000 ]; do head -c 104857 /dev/urandom > data/f$i; i=$((i+1)); done"}}); err != nil {
		return err
	}
	// To a file and back, as `cove sandbox snapshot -o` does: a growing
	// in-memory buffer measures this VM's page faults, not Cove.
	snapFile, err := os.Create(filepath.Join(dir, "snap.tar"))
	if err != nil {
		return err
	}
	defer snapFile.Close()
	t0 := time.Now()
	if err := s.SnapshotWorkspace(ctx, snapFile); err != nil {
		return err
	}
	snapT := time.Since(t0)
	s2, err := rt.Create(ctx, sandbox.Spec{})
	if err != nil {
		return err
	}
	size, _ := snapFile.Seek(0, io.SeekCurrent)
	snapFile.Seek(0, io.SeekStart)
	t0 = time.Now()
	if err := s2.RestoreWorkspace(ctx, snapFile); err != nil {
		return err
	}
	restT := time.Since(t0)
	b.add("snapshot 100 MB / 1000 files", "cove local", fmt.Sprintf("%.0f MB/s", float64(size)/snapT.Seconds()/1e6), "", "", ">= 200 MB/s")
	b.add("restore 100 MB / 1000 files", "cove local", fmt.Sprintf("%.0f MB/s", float64(size)/restT.Seconds()/1e6), "", "", ">= 200 MB/s")
	rt.Delete(ctx, s.ID())
	rt.Delete(ctx, s2.ID())
	return nil
}

// hundred starts 100 sandboxes at once, each answering an exec, and
// measures the time and their idle memory.
func (b *localBench) hundred(ctx context.Context) {
	rt := b.rt
	t0 := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	ids := make(chan string, 100)
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := rt.Create(ctx, sandbox.Spec{})
			if err != nil {
				errs <- err
				return
			}
			ids <- s.ID()
			if _, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "true"}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	all := time.Since(t0)
	close(errs)
	close(ids)
	failed := len(errs)
	// Idle means idle: give the supervisors and daemons the moment they
	// take to settle (they return their start-up pages after a second).
	time.Sleep(2 * time.Second)
	var rss, pss, cg int64
	count, cgCount := 0, 0
	for id := range ids {
		if st, err := rt.Processes(id); err == nil {
			for _, pid := range st {
				rss += memOf(pid, "status", "VmRSS:")
				pss += memOf(pid, "smaps_rollup", "Pss:")
			}
			count++
		}
		if n, err := rt.MemoryUsage(id); err == nil {
			cg += n
			cgCount++
		}
	}
	b.add("100 sandboxes at once, all answering", "cove local", all.Round(time.Millisecond).String(), fmt.Sprintf("%d failed", failed), "", "< 2s")
	if count > 0 {
		// RSS counts the binary's pages that all sandboxes share; PSS
		// splits them, so it is what one more sandbox costs.
		b.add("idle memory per sandbox (shim+init)", "cove local", fmt.Sprintf("PSS %.1f MB", float64(pss)/float64(count)/1e6), fmt.Sprintf("RSS %.1f MB", float64(rss)/float64(count)/1e6), "", "< 10 MB")
	}
	if cgCount > 0 {
		// pid 1's cgroup (the supervisor stays outside it).
		b.add("idle memory per sandbox (its cgroup)", "cove local", fmt.Sprintf("%.1f MB", float64(cg)/float64(cgCount)/1e6), "", "", "< 10 MB")
	}
	deleteAll(ctx, rt)
}

// createAndEcho creates a sandbox and waits for a command's output: what
// "create -> first output" measures.
func createAndEcho(ctx context.Context, rt sandbox.Runtime) error {
	return createAndEchoSpec(ctx, rt, sandbox.Spec{})
}

type timing struct{ p50, p99 time.Duration }

// timeN runs fn n times (cleanup, untimed, after each) and returns the
// percentiles.
func timeN(n int, fn func() error, cleanup func()) (timing, error) {
	d := make([]time.Duration, 0, n)
	for range n {
		t := time.Now()
		if err := fn(); err != nil {
			return timing{}, err
		}
		d = append(d, time.Since(t))
		if cleanup != nil {
			cleanup()
		}
	}
	return timing{pct(d, 50), pct(d, 99)}, nil
}

func ms(d time.Duration) string { return fmtDur(d) }

type peer struct {
	name    string
	missing string
	run     func(i int) (string, error)
}

// peers are the isolation tools the local runtime is compared with, each
// running `echo hi` in a fresh sandbox of its own.
func peers(dir string) []peer {
	var out []peer
	if p, err := exec.LookPath("bwrap"); err == nil {
		out = append(out, peer{name: "bwrap --unshare-all", run: func(int) (string, error) {
			b, err := exec.Command(p, "--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr",
				"--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
				"--symlink", "usr/sbin", "/sbin", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
				"echo", "hi").Output()
			return string(b), err
		}})
	} else {
		out = append(out, peer{name: "bwrap", missing: "not installed (apt-get install bubblewrap)"})
	}
	runcPeer := peer{name: "runc run (busybox bundle)"}
	runcPath, err1 := exec.LookPath("runc")
	busybox, err2 := exec.LookPath("busybox")
	switch {
	case err1 != nil:
		runcPeer.missing = "not installed (apt-get install runc)"
	case err2 != nil:
		runcPeer.missing = "needs a static busybox for its bundle (apt-get install busybox-static)"
	default:
		bundle := filepath.Join(dir, "runc-bundle")
		if err := makeBusyboxBundle(runcPath, busybox, bundle); err != nil {
			runcPeer.missing = "could not make a bundle: " + err.Error()
		} else {
			runcPeer.run = func(i int) (string, error) {
				b, err := exec.Command(runcPath, "--root", filepath.Join(dir, "runc-state"), "run", "--bundle", bundle, "cove-bench-"+strconv.Itoa(i)).Output()
				return string(b), err
			}
		}
	}
	out = append(out, runcPeer)
	if p, err := exec.LookPath("runsc"); err == nil {
		out = append(out, peer{name: "runsc do (gVisor)", run: func(int) (string, error) {
			b, err := exec.Command(p, "--network=none", "do", "echo", "hi").Output()
			return string(b), err
		}})
	} else {
		out = append(out, peer{name: "runsc", missing: "not installed (scripts/deps.sh builds and installs the pinned one)"})
	}
	return out
}

// makeBusyboxBundle makes an OCI bundle whose process is `echo hi`.
func makeBusyboxBundle(runc, busybox, bundle string) error {
	rootfs := filepath.Join(bundle, "rootfs")
	if err := os.MkdirAll(filepath.Join(rootfs, "bin"), 0o755); err != nil {
		return err
	}
	data, err := os.ReadFile(busybox)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(rootfs, "bin/busybox"), data, 0o755); err != nil {
		return err
	}
	os.Symlink("busybox", filepath.Join(rootfs, "bin/echo"))
	cmd := exec.Command(runc, "spec")
	cmd.Dir = bundle
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("runc spec: %s", out)
	}
	spec, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		return err
	}
	s := strings.Replace(string(spec), `"sh"`, `"echo", "hi"`, 1)
	s = strings.Replace(s, `"terminal": true`, `"terminal": false`, 1)
	return os.WriteFile(filepath.Join(bundle, "config.json"), []byte(s), 0o644)
}

// memOf reads a memory figure (kB in /proc/PID/FILE, line KEY) in bytes.
func memOf(pid int, file, key string) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, file))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, key); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}
