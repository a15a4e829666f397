package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/internal/app/runtimes"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/local"
)

// The gVisor tier's bench: each measure beside what it is compared with,
// run in turn in the same run (this VM's speed moves within minutes):
// create -> first output against a bare `runsc run` of the same root,
// exec round trips against the native tier's, and pause, resume and fork
// with memory of a sandbox whose process holds heldMB.

// heldMB is what the pause, resume and fork with memory are timed with.
const heldMB = 512

// memRounds is how many pauses, resumes and forks are timed: each moves
// hundreds of megabytes, so their rows give the p50 and the slowest.
const memRounds = 5

// forkCopies is how many copies a timed fork with memory makes.
const forkCopies = 4

// gvisorRuntime is what the gVisor bench uses of the local runtime.
type gvisorRuntime interface {
	sandbox.Runtime
	sandbox.Pauser
	sandbox.MemoryForker
	MemoryUsage(id string) (int64, error)
}

// gvisorBench is a run of the gVisor tier's bench: the runtime, runsc,
// a scratch directory and the table's rows so far.
type gvisorBench struct {
	rt    gvisorRuntime
	runsc string
	dir   string
	rows  [][]string
}

func (b *gvisorBench) add(cols ...string) { b.rows = append(b.rows, cols) }

// benchGVisor measures the local runtime's gVisor tier and prints a
// table. It installs nothing: without runsc it says how to get it.
func benchGVisor(ctx context.Context, n int, stdout, stderr io.Writer) error {
	if os.Geteuid() != 0 {
		fmt.Fprintln(stderr, "gVisor tier: skipped (needs root)")
		return nil
	}
	path := findRunsc()
	if path == "" {
		fmt.Fprintln(stderr, "gVisor tier: skipped: runsc is not installed (scripts/deps.sh builds and installs the pinned one)")
		return nil
	}
	dir, err := os.MkdirTemp("", "cove-bench-gvisor-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	lrt, err := runtimes.BenchLocal(filepath.Join(dir, "sb"), 0)
	if err != nil {
		return err
	}
	b := &gvisorBench{rt: lrt, runsc: path, dir: dir}
	defer deleteAll(context.WithoutCancel(ctx), lrt)
	// A measure that fails ends the run; what came before is printed.
	err = b.run(ctx, n, stderr)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "gVisor tier\truntime\tp50\tp90\tratio\ttarget")
	for _, r := range b.rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return errors.Join(err, tw.Flush())
}

// run takes the measures in turn, n runs each where they are cheap.
func (b *gvisorBench) run(ctx context.Context, n int, stderr io.Writer) error {
	fmt.Fprintf(stderr, "→ gVisor: create -> first output beside a bare runsc run, %d runs each\n", n)
	if err := b.createVsFloor(ctx, n); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "→ gVisor: exec true beside the native tier, %d runs each\n", max(n, 200))
	if err := b.execVsNative(ctx, max(n, 200)); err != nil {
		return err
	}
	if err := b.idleMemory(ctx); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "→ gVisor: pause, resume and fork with %d MB held\n", heldMB)
	return b.memory(ctx, stderr)
}

// idleMemory reads the memory an idle gVisor sandbox's cgroup holds (the
// supervisor stays outside it; runsc, its gofer and Sentry and what they
// run are in it) beside a native one's.
func (b *gvisorBench) idleMemory(ctx context.Context) error {
	var ids [2]string
	for i, iso := range []string{sandbox.IsolationGVisor, sandbox.IsolationNative} {
		s, err := b.rt.Create(ctx, sandbox.Spec{Isolation: iso})
		if err != nil {
			return err
		}
		if err := shell(ctx, s, "true"); err != nil {
			return err
		}
		ids[i] = s.ID()
	}
	// As for the native tier's row: start-up pages go back after a second.
	time.Sleep(2 * time.Second)
	gv, err1 := b.rt.MemoryUsage(ids[0])
	nat, err2 := b.rt.MemoryUsage(ids[1])
	deleteAll(ctx, b.rt)
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	b.add("idle memory per sandbox (its cgroup)", "cove gvisor", fmt.Sprintf("%.1f MB", float64(gv)/1e6), "", fmt.Sprintf("%.1fx native", float64(gv)/float64(nat)), "")
	b.add("", "cove native", fmt.Sprintf("%.1f MB", float64(nat)/1e6), "", "1.00x", "")
	return nil
}

// findRunsc finds runsc as the local runtime does: on PATH, else
// /usr/local/bin/runsc; "" when there is none.
func findRunsc() string {
	if p, err := exec.LookPath("runsc"); err == nil {
		return p
	}
	if fi, err := os.Stat("/usr/local/bin/runsc"); err == nil && fi.Mode().IsRegular() {
		return "/usr/local/bin/runsc"
	}
	return ""
}

// createVsFloor times create -> first output of a gVisor sandbox and a
// bare `runsc run` of the same root with the tier's flags, in turn.
func (b *gvisorBench) createVsFloor(ctx context.Context, n int) error {
	gv := sandbox.Spec{Isolation: sandbox.IsolationGVisor}
	// The first create makes the host template the floor runs from.
	if err := createAndEchoSpec(ctx, b.rt, gv); err != nil {
		return fmt.Errorf("a gVisor sandbox: %w", err)
	}
	deleteAll(ctx, b.rt)
	floor, cleanup, err := b.floorRunner(filepath.Join(b.dir, "sb"))
	if err != nil {
		return err
	}
	defer cleanup()
	var coveT, createT, floorT []time.Duration
	for i := range n {
		d, err := timed(func() error { return floor(i) })
		if err != nil {
			return fmt.Errorf("bare runsc run: %w", err)
		}
		floorT = append(floorT, d)
		t0 := time.Now()
		s, err := b.rt.Create(ctx, gv)
		if err != nil {
			return fmt.Errorf("a gVisor sandbox: %w", err)
		}
		createT = append(createT, time.Since(t0))
		if err := echoHi(ctx, s); err != nil {
			return fmt.Errorf("a gVisor sandbox: %w", err)
		}
		coveT = append(coveT, time.Since(t0))
		deleteAll(ctx, b.rt)
	}
	b.add("create→first output (host)", "cove gvisor", ms(pct(coveT, 50)), ms(pct(coveT, 90)), ratio(coveT, floorT)+" runsc run", "p50 ≤ 1.5x runsc run")
	b.add("", "  of which the create (daemon answering)", ms(pct(createT, 50)), ms(pct(createT, 90)), "", "")
	b.add("", "runsc run, same root (floor)", ms(pct(floorT, 50)), ms(pct(floorT, 90)), "1.00x", "")
	return nil
}

// floorRunner writes a bundle over the host template's root whose
// process is `echo hi`, and returns what runs it once with runsc (the
// tier's flags) and what removes what runsc leaves.
func (b *gvisorBench) floorRunner(rtDir string) (run func(i int) error, cleanup func(), err error) {
	root, binds, err := runtimes.BenchHostRoot(rtDir)
	if err != nil {
		return nil, nil, err
	}
	bundle, state := filepath.Join(b.dir, "floor-bundle"), filepath.Join(b.dir, "floor-state")
	if err := local.WriteFloorBundle(bundle, root, binds); err != nil {
		return nil, nil, err
	}
	run = func(i int) error {
		out, err := exec.Command(b.runsc, "--root", state, "--platform", "systrap", "--network", "none",
			"--overlay2", "none", "--ignore-cgroups", "run", "--bundle", bundle, fmt.Sprintf("cove-bench-%d", i)).CombinedOutput()
		if err == nil && string(out) != "hi\n" {
			err = errors.New("it did not print hi")
		}
		if err != nil {
			return fmt.Errorf("%w: %s", err, bytes.TrimSpace(out))
		}
		return nil
	}
	// runsc --network none binds an empty namespace in its state
	// directory and leaves it there.
	cleanup = func() { unix.Unmount(filepath.Join(state, "null-netns"), unix.MNT_DETACH) }
	return run, cleanup, nil
}

// execVsNative times exec round trips of `true` in a running gVisor
// sandbox and a native one, in turn.
func (b *gvisorBench) execVsNative(ctx context.Context, n int) error {
	nat, err := b.rt.Create(ctx, sandbox.Spec{})
	if err != nil {
		return err
	}
	gv, err := b.rt.Create(ctx, sandbox.Spec{Isolation: sandbox.IsolationGVisor})
	if err != nil {
		return err
	}
	execTrue := func(s sandbox.Session) func() error {
		return func() error { _, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "true"}); return err }
	}
	execTrue(nat)()
	execTrue(gv)()
	var natT, gvT []time.Duration
	for range n {
		d, err := timed(execTrue(nat))
		if err != nil {
			return err
		}
		natT = append(natT, d)
		if d, err = timed(execTrue(gv)); err != nil {
			return err
		}
		gvT = append(gvT, d)
	}
	b.add("exec true (running sandbox)", "cove gvisor", ms(pct(gvT, 50)), ms(pct(gvT, 90)), ratio(gvT, natT)+" native", "p50 ≤ 2x native")
	b.add("", "cove native", ms(pct(natT, 50)), ms(pct(natT, 90)), "1.00x", "")
	// What an exec cannot go below: starting the process inside.
	gvF, err := forkExecInside(ctx, gv)
	if err != nil {
		return err
	}
	natF, err := forkExecInside(ctx, nat)
	if err != nil {
		return err
	}
	b.add("fork/exec of true inside (sh loop, mean)", "gvisor", ms(gvF), "", fmt.Sprintf("%.2fx native", float64(gvF)/float64(natF)), "")
	b.add("", "native", ms(natF), "", "1.00x", "")
	deleteAll(ctx, b.rt)
	return nil
}

// forkExecInside is the mean time a shell in s takes to run /bin/true,
// over 200 runs: the floor of an exec in s.
func forkExecInside(ctx context.Context, s sandbox.Session) (time.Duration, error) {
	const runs = 200
	var out bytes.Buffer
	script := fmt.Sprintf(`s=$(date +%%s%%N); i=0; while [ $i -lt %d ]; do /bin/true; i=$((i+1)); done; echo $(( $(date +%%s%%N) - s ))`, runs)
	if _, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "sh", Args: []string{"-c", script}, Stdout: &out}); err != nil {
		return 0, err
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(out.String()), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("timing fork/exec in a sandbox: got %q", out.String())
	}
	return time.Duration(ns / runs), nil
}

// holdMemoryScript starts a process that keeps mb megabytes resident
// (random bytes, which neither a zero-page check nor compression can
// shrink) and returns once it holds them; /tmp/held has its pid.
func holdMemoryScript(mb int) string {
	return fmt.Sprintf(`rm -f /tmp/held; python3 -c 'import os,time
b=os.urandom(%d<<20)
open("/tmp/held","w").write(str(os.getpid()))
time.sleep(1e9)' >/dev/null 2>&1 &
while ! test -s /tmp/held; do sleep 0.05; done`, mb)
}

// memory times pause and resume with memory of a gVisor sandbox whose
// process holds heldMB, then forks with memory of an idle one and of it.
func (b *gvisorBench) memory(ctx context.Context, stderr io.Writer) error {
	idle, err := b.rt.Create(ctx, sandbox.Spec{Isolation: sandbox.IsolationGVisor})
	if err != nil {
		return err
	}
	if err := shell(ctx, idle, "sleep 1000000 >/dev/null 2>&1 & echo $! > /tmp/held"); err != nil {
		return err
	}
	if err := b.fork(ctx, idle, "idle sandbox", memRounds); err != nil {
		return err
	}
	b.rt.Delete(ctx, idle.ID())
	s, err := b.rt.Create(ctx, sandbox.Spec{Isolation: sandbox.IsolationGVisor})
	if err != nil {
		return err
	}
	if err := shell(ctx, s, "command -v python3"); err != nil {
		fmt.Fprintln(stderr, "  pause and resume with memory: skipped: the host template has no python3 to hold the memory")
		return nil
	}
	if err := shell(ctx, s, holdMemoryScript(heldMB)); err != nil {
		return err
	}
	if err := b.pauseResume(ctx, s); err != nil {
		return err
	}
	return b.fork(ctx, s, fmt.Sprintf("%d MB held", heldMB), 1)
}

// pauseResume times memRounds pauses and resumes of s, checking after
// each that its process is still there.
func (b *gvisorBench) pauseResume(ctx context.Context, s sandbox.Session) error {
	held, _ := b.rt.MemoryUsage(s.ID())
	var pauses, resumes []time.Duration
	for range memRounds {
		d, err := timed(func() error { return b.rt.Pause(ctx, s.ID()) })
		if err != nil {
			return err
		}
		pauses = append(pauses, d)
		d, err = timed(func() (err error) { s, err = b.rt.Resume(ctx, s.ID()); return err })
		if err != nil {
			return err
		}
		resumes = append(resumes, d)
		if err := shell(ctx, s, "kill -0 $(cat /tmp/held)"); err != nil {
			return fmt.Errorf("after a resume, the process holding the memory is gone: %w", err)
		}
	}
	gib := float64(heldMB) / 1024
	for _, m := range []struct {
		name string
		d    []time.Duration
	}{{"pause", pauses}, {"resume", resumes}} {
		p50 := pct(m.d, 50)
		b.add(fmt.Sprintf("%s with memory, %d MB held (cgroup %.0f MB), %d runs", m.name, heldMB, float64(held)/1e6, memRounds), "cove gvisor", secs(p50), "max "+secs(pct(m.d, 100)),
			fmt.Sprintf("%.2f s/GiB", p50.Seconds()/gib), "< 2 s")
	}
	return nil
}

// fork times rounds forks with memory of s into forkCopies copies,
// checking that each copy runs the process in /tmp/held.
func (b *gvisorBench) fork(ctx context.Context, s sandbox.Session, what string, rounds int) error {
	var times []time.Duration
	for range rounds {
		var copies []sandbox.Session
		d, err := timed(func() (err error) { copies, err = b.rt.ForkMemory(ctx, s.ID(), forkCopies); return err })
		if err != nil {
			return err
		}
		times = append(times, d)
		for _, c := range copies {
			err := shell(ctx, c, "kill -0 $(cat /tmp/held)")
			b.rt.Delete(ctx, c.ID())
			if err != nil {
				return fmt.Errorf("a fork's copy lacks the source's process: %w", err)
			}
		}
	}
	p50 := pct(times, 50)
	b.add(fmt.Sprintf("fork with memory ×%d, %s, %s", forkCopies, what, plural(rounds, "run")), "cove gvisor", secs(p50), "max "+secs(pct(times, 100)),
		fmt.Sprintf("%s per copy", secs(p50/forkCopies)), "")
	return nil
}

// createAndEchoSpec creates a sandbox of spec and waits for a command's
// output: what "create -> first output" measures.
func createAndEchoSpec(ctx context.Context, rt sandbox.Runtime, spec sandbox.Spec) error {
	s, err := rt.Create(ctx, spec)
	if err != nil {
		return err
	}
	return echoHi(ctx, s)
}

// echoHi runs `echo hi` in s and checks what it printed.
func echoHi(ctx context.Context, s sandbox.Session) error {
	var out bytes.Buffer
	_, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "echo", Args: []string{"hi"}, Stdout: &out})
	if err == nil && out.String() != "hi\n" {
		err = fmt.Errorf("got %q", out.String())
	}
	return err
}

// shell runs script in s; a non-zero exit is an error with its output.
func shell(ctx context.Context, s sandbox.Session, script string) error {
	var out bytes.Buffer
	st, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "sh", Args: []string{"-c", script}, Stdout: &out, Stderr: &out})
	if err == nil && st.Code != 0 {
		err = fmt.Errorf("%q exited %d: %s", script, st.Code, bytes.TrimSpace(out.Bytes()))
	}
	return err
}

// timed runs fn and returns how long it took.
func timed(fn func() error) (time.Duration, error) {
	t := time.Now()
	err := fn()
	return time.Since(t), err
}

// ratio is a's p50 over b's.
func ratio(a, b []time.Duration) string {
	return fmt.Sprintf("%.2fx", float64(pct(a, 50))/float64(pct(b, 50)))
}

// plural is "n thing" or "n things".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }
