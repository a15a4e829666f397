package cgroup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
)

// testRoot returns the default root, or skips when cgroups cannot be
// managed here.
func testRoot(t *testing.T) *Root {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("managing cgroups needs root")
	}
	r, err := DefaultRoot()
	if err != nil {
		t.Skipf("no cgroups here: %v", err)
	}
	return r
}

var nameSeq struct {
	sync.Mutex
	n int
}

// uniqueName returns a group name no other test (or earlier run) uses.
func uniqueName(t *testing.T) string {
	nameSeq.Lock()
	defer nameSeq.Unlock()
	nameSeq.n++
	base := strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	return fmt.Sprintf("test-%s-%d-%d", base, os.Getpid(), nameSeq.n)
}

// newGroup makes a group that is deleted when the test ends.
func newGroup(t *testing.T, r *Root, l Limits) *Group {
	t.Helper()
	g, err := r.New(uniqueName(t), l)
	if err != nil {
		t.Fatalf("New(%+v): %v", l, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := g.Delete(ctx); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return g
}

// proc is a process started inside a group.
type proc struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	stderr bytes.Buffer
	done   chan struct{}
	err    error // from Wait, once done is closed
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.Write(b)
}

func (p *proc) errText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// start runs sh -c script inside g before it can fork: through the
// group's descriptor on v2, else blocked on a pipe until it is added.
func start(t *testing.T, g *Group, script string) *proc {
	t.Helper()
	p := &proc{done: make(chan struct{})}
	var gate io.WriteCloser
	if fd, ok := g.FD(); ok {
		p.cmd = exec.Command("sh", "-c", script)
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, UseCgroupFD: true, CgroupFD: fd}
	} else {
		p.cmd = exec.Command("sh", "-c", `read _ && exec sh -c "$0"`, script)
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		var err error
		if gate, err = p.cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
	}
	p.cmd.Stderr = p
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if gate != nil {
		if err := g.Add(p.cmd.Process.Pid); err != nil {
			p.cmd.Process.Kill()
			t.Fatalf("Add: %v", err)
		}
		gate.Write([]byte("go\n"))
		gate.Close()
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	})
	return p
}

// wait waits for p to end, failing the test after d.
func (p *proc) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(d):
		t.Fatalf("%v still running after %v; stderr: %s", p.cmd.Args, d, p.errText())
		return nil
	}
}

// eventually polls cond every few milliseconds until it holds or d passes.
func eventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func alive(pid int) bool {
	// A zombie has been killed already; only a running process counts.
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, after, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(after, "Z")
}

func TestDetect(t *testing.T) {
	m := Detect()
	t.Logf("cgroups here: %v", m)
	if m.Version == Unavailable {
		t.Skip("no cgroups here")
	}
	if got := hostVersion(); got != m.Version {
		t.Errorf("Detect().Version = %v, the mounts say %v", m.Version, got)
	}
	if !slices.IsSorted(m.Controllers) {
		t.Errorf("Controllers %v are not sorted", m.Controllers)
	}
	for _, c := range m.Controllers {
		if !m.Has(c) {
			t.Errorf("Has(%q) = false for a listed controller", c)
		}
	}
	if m.Has("nonesuch") {
		t.Error(`Has("nonesuch") = true`)
	}
}

func TestLimitFiles(t *testing.T) {
	r := testRoot(t)
	for _, tc := range []struct {
		name  string
		l     Limits
		quota int64 // microseconds per 100 ms period; 0 for none
	}{
		{"all", Limits{MemoryBytes: 32 << 20, CPUs: 1.5, Pids: 20}, 150_000},
		{"half a core", Limits{CPUs: 0.5}, 50_000},
		{"tiny quota", Limits{CPUs: 0.001}, 1000},
		{"none", Limits{}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, c := range []struct {
				name string
				need bool
			}{{Memory, tc.l.MemoryBytes > 0}, {CPU, tc.l.CPUs > 0}, {Pids, tc.l.Pids > 0}} {
				if c.need && !r.Mode().Has(c.name) {
					t.Skipf("the %s controller is unavailable here", c.name)
				}
			}
			g := newGroup(t, r, tc.l)
			want := map[string]string{}
			if r.Version() == V2 {
				dir := g.Path("")
				want[filepath.Join(dir, "memory.max")] = "max"
				want[filepath.Join(dir, "pids.max")] = "max"
				want[filepath.Join(dir, "cpu.max")] = "max 100000"
				if tc.l.MemoryBytes > 0 {
					want[filepath.Join(dir, "memory.max")] = strconv.FormatInt(tc.l.MemoryBytes, 10)
					if _, err := os.Stat(filepath.Join(dir, "memory.swap.max")); err == nil {
						want[filepath.Join(dir, "memory.swap.max")] = "0"
					}
				}
				if tc.quota > 0 {
					want[filepath.Join(dir, "cpu.max")] = fmt.Sprintf("%d 100000", tc.quota)
				}
				if tc.l.Pids > 0 {
					want[filepath.Join(dir, "pids.max")] = strconv.Itoa(tc.l.Pids)
				}
			} else {
				mem, cpu, pids := g.Path(Memory), g.Path(CPU), g.Path(Pids)
				unlimited := readFile(t, filepath.Join(filepath.Dir(filepath.Dir(mem)), "memory.limit_in_bytes"))
				want[filepath.Join(mem, "memory.limit_in_bytes")] = unlimited
				want[filepath.Join(cpu, "cpu.cfs_quota_us")] = "-1"
				want[filepath.Join(pids, "pids.max")] = "max"
				if tc.l.MemoryBytes > 0 {
					want[filepath.Join(mem, "memory.limit_in_bytes")] = strconv.FormatInt(tc.l.MemoryBytes, 10)
					if _, err := os.Stat(filepath.Join(mem, "memory.memsw.limit_in_bytes")); err == nil {
						want[filepath.Join(mem, "memory.memsw.limit_in_bytes")] = strconv.FormatInt(tc.l.MemoryBytes, 10)
					}
				}
				if tc.quota > 0 {
					want[filepath.Join(cpu, "cpu.cfs_quota_us")] = strconv.FormatInt(tc.quota, 10)
					want[filepath.Join(cpu, "cpu.cfs_period_us")] = "100000"
				}
				if tc.l.Pids > 0 {
					want[filepath.Join(pids, "pids.max")] = strconv.Itoa(tc.l.Pids)
				}
			}
			for file, w := range want {
				if _, err := os.Stat(filepath.Dir(file)); err != nil {
					continue // that hierarchy is absent here
				}
				if got := readFile(t, file); got != w {
					t.Errorf("%s = %q, want %q", file, got, w)
				}
			}
		})
	}
}

// TestOOM: a process that outgrows its group's memory is killed by the
// kernel, inside the group only, and the group counts it.
func TestOOM(t *testing.T) {
	r := testRoot(t)
	if !r.Mode().Has(Memory) {
		t.Skip("the memory controller is unavailable here")
	}
	const limit = 32 << 20
	g := newGroup(t, r, Limits{MemoryBytes: limit})
	p := start(t, g, `x=$(head -c 100000000 /dev/zero | tr "\000" a); echo survived ${#x} >&2`)
	err := p.wait(t, time.Minute)
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("the memory hog ended with %v, want it killed; stderr: %s", err, p.errText())
	}
	if ws := ee.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("the memory hog ended with %v, want SIGKILL", err)
	}
	s, err := g.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if s.OOMKills < 1 {
		t.Errorf("Stats().OOMKills = %d, want at least 1", s.OOMKills)
	}
	if s.MemoryPeak != 0 && (s.MemoryPeak > limit || s.MemoryPeak < limit/2) {
		t.Errorf("Stats().MemoryPeak = %d, want near the %d limit", s.MemoryPeak, limit)
	}
	// The test process, outside the group, was not touched.
	if out, err := exec.Command("true").CombinedOutput(); err != nil {
		t.Errorf("running a command outside the group: %v %s", err, out)
	}
}

// TestForkBomb: the pids limit stops a fork bomb, the host stays usable,
// and Kill then Delete leave nothing.
func TestForkBomb(t *testing.T) {
	r := testRoot(t)
	if !r.Mode().Has(Pids) {
		t.Skip("the pids controller is unavailable here")
	}
	const max = 20
	g := newGroup(t, r, Limits{Pids: max})
	p := start(t, g, `for i in $(seq 100); do sleep 60 & done; wait`)
	if !eventually(20*time.Second, func() bool { return strings.Contains(strings.ToLower(p.errText()), "fork") }) {
		t.Fatalf("no fork failure reported; stderr: %q", p.errText())
	}
	s, err := g.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if s.Pids > max || s.Pids < max/2 {
		t.Errorf("Stats().Pids = %d, want close to and at most %d", s.Pids, max)
	}
	pids, err := g.Pids()
	if err != nil {
		t.Fatal(err)
	}
	if len(pids) > max {
		t.Errorf("%d processes in the group, want at most %d", len(pids), max)
	}
	if out, err := exec.Command("sh", "-c", "true & wait").CombinedOutput(); err != nil {
		t.Errorf("the host cannot fork: %v %s", err, out)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.Kill(ctx); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if left, _ := g.Pids(); len(left) != 0 {
		t.Errorf("processes %v left after Kill", left)
	}
	for _, pid := range pids {
		if eventually(time.Second, func() bool { return !alive(pid) }) {
			continue
		}
		t.Errorf("pid %d still running after Kill", pid)
	}
	p.wait(t, 10*time.Second)

	if err := g.Delete(ctx); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	for _, c := range append([]string{""}, v1Controllers...) {
		if d := g.Path(c); d != "" {
			if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s left after Delete (stat: %v)", d, err)
			}
		}
	}
	if err := g.Delete(ctx); err != nil {
		t.Errorf("second Delete: %v", err)
	}
	if _, err := g.Stats(); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Stats after Delete: got %v, want ErrNotFound", err)
	}
}

// TestKillEscapers: processes that leave their session and parent are
// still in the group and die with it, with the freezer and (v1) without.
func TestKillEscapers(t *testing.T) {
	r := testRoot(t)
	roots := map[string]*Root{"default": r}
	if r.Version() != V2 {
		noFreezer := &Root{version: r.version, dirs: map[string]string{}}
		for c, d := range r.dirs {
			if c != Freezer {
				noFreezer.dirs[c] = d
			}
		}
		roots["no freezer"] = noFreezer
	}
	for name, r := range roots {
		t.Run(name, func(t *testing.T) {
			g := newGroup(t, r, Limits{})
			p := start(t, g, `setsid sleep 300 & (sleep 300 &) ; (setsid sh -c 'sleep 300 & sleep 300' &); sleep 300`)
			var pids []int
			if !eventually(5*time.Second, func() bool { pids, _ = g.Pids(); return len(pids) >= 6 }) {
				t.Fatalf("want at least 6 processes in the group, have %v", pids)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := g.Kill(ctx); err != nil {
				t.Fatal(err)
			}
			for _, pid := range pids {
				if !eventually(time.Second, func() bool { return !alive(pid) }) {
					t.Errorf("pid %d survived Kill", pid)
				}
			}
			p.wait(t, 10*time.Second)
			if err := g.Kill(ctx); err != nil {
				t.Errorf("Kill of an empty group: %v", err)
			}
		})
	}
}

// TestLoadList: a runtime restarted (or another process) finds its groups
// again, by the default root and by a stored one, and can delete them.
func TestLoadList(t *testing.T) {
	r := testRoot(t)
	g := newGroup(t, r, Limits{})
	start(t, g, `sleep 300`)
	if !eventually(5*time.Second, func() bool { s, _ := g.Stats(); return s.Pids > 0 || !r.Mode().Has(Pids) }) {
		t.Fatal("the process never showed in the group")
	}

	names, err := List()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(names, g.Name()) {
		t.Errorf("List() = %v, want it to contain %q", names, g.Name())
	}

	stored, err := r.MarshalText()
	if err != nil {
		t.Fatal(err)
	}
	var r2 Root
	if err := r2.UnmarshalText(stored); err != nil {
		t.Fatalf("UnmarshalText(%q): %v", stored, err)
	}
	if r2.String() != r.String() {
		t.Errorf("root after a round trip = %q, want %q", r2.String(), r.String())
	}
	for _, load := range []func(string) (*Group, error){Load, r2.Load} {
		h, err := load(g.Name())
		if err != nil {
			t.Fatalf("Load: %v", err)
		}
		for _, c := range []string{"", Memory, CPU, Pids, Freezer} {
			if h.Path(c) != g.Path(c) {
				t.Errorf("loaded Path(%q) = %q, want %q", c, h.Path(c), g.Path(c))
			}
		}
		// The started command may still be forking (a shell, then its
		// child), so compare until both reads agree.
		var got, want []int
		var perr error
		if !eventually(5*time.Second, func() bool {
			want, _ = g.Pids()
			got, perr = h.Pids()
			return perr == nil && slices.Equal(got, want)
		}) {
			t.Errorf("loaded group's Pids() = %v, %v; want %v", got, perr, want)
		}
		if _, err := h.Stats(); err != nil {
			t.Errorf("loaded group's Stats(): %v", err)
		}
		h.Close()
	}

	h, err := r2.Load(g.Name())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.Delete(ctx); err != nil {
		t.Fatalf("Delete through the loaded handle: %v", err)
	}
	if names, _ := r.List(); slices.Contains(names, g.Name()) {
		t.Errorf("List() = %v after Delete, still has %q", names, g.Name())
	}
	if _, err := r.Load(g.Name()); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Load after Delete: got %v, want ErrNotFound", err)
	}
	if err := g.Delete(ctx); err != nil {
		t.Errorf("Delete through the first handle, after the other: %v", err)
	}
}

func TestErrors(t *testing.T) {
	r := testRoot(t)
	for _, name := range []string{"", ".", "..", "a/b", "nul\x00", strings.Repeat("x", 201)} {
		if _, err := r.New(name, Limits{}); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("New(%q): got %v, want ErrInvalid", name, err)
		}
		if _, err := r.Load(name); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("Load(%q): got %v, want ErrInvalid", name, err)
		}
	}
	for _, l := range []Limits{{MemoryBytes: -1}, {CPUs: -1}, {Pids: -1}} {
		if _, err := r.New(uniqueName(t), l); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("New(%+v): got %v, want ErrInvalid", l, err)
		}
	}
	g := newGroup(t, r, Limits{})
	if _, err := r.New(g.Name(), Limits{}); !errors.Is(err, sandbox.ErrExist) {
		t.Errorf("New of an existing group: got %v, want ErrExist", err)
	}
	if err := g.Add(0); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("Add(0): got %v, want ErrInvalid", err)
	}
	if err := g.Add(1 << 30); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Add of a pid that does not exist: got %v, want ErrNotFound", err)
	}
	if _, err := r.Load(uniqueName(t)); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Load of an unknown group: got %v, want ErrNotFound", err)
	}
	for _, s := range []string{"", "v3 /x", "v2", "v2 /tmp", "v1 memory=/tmp/cove", "hybrid nonesuch=/sys/fs/cgroup/memory/cove", "v2 relative/path"} {
		if _, err := ParseRoot(s); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("ParseRoot(%q): got %v, want ErrInvalid", s, err)
		}
	}
}

// TestMissingController: a limit whose controller is missing is refused
// with an error that names it and says what to do.
func TestMissingController(t *testing.T) {
	r := testRoot(t)
	if r.Version() == V2 {
		t.Skip("on v2 the controllers come from the parent cgroup; this test removes a v1 hierarchy from the root")
	}
	noPids := &Root{version: r.version, dirs: map[string]string{}}
	for c, d := range r.dirs {
		if c != Pids {
			noPids.dirs[c] = d
		}
	}
	_, err := noPids.New(uniqueName(t), Limits{Pids: 10})
	if !errors.Is(err, sandbox.ErrUnavailable) {
		t.Fatalf("New with a pids limit and no pids hierarchy: got %v, want ErrUnavailable", err)
	}
	for _, want := range []string{"pids controller", "run without a pids limit"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if noPids.Mode().Has(Pids) {
		t.Error("Mode() of a root without pids has pids")
	}
}

func TestFreezeThaw(t *testing.T) {
	r := testRoot(t)
	g := newGroup(t, r, Limits{})
	if file, _, _ := g.freezeFile(); file == "" {
		t.Skip("no freezer here")
	}
	p := start(t, g, `while :; do :; done`)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.Freeze(ctx); err != nil {
		t.Fatal(err)
	}
	s1, _ := g.Stats()
	time.Sleep(100 * time.Millisecond)
	s2, _ := g.Stats()
	if s2.CPUUsage-s1.CPUUsage > 10*time.Millisecond {
		t.Errorf("a frozen busy loop used %v of CPU in 100 ms", s2.CPUUsage-s1.CPUUsage)
	}
	if err := g.Thaw(ctx); err != nil {
		t.Fatal(err)
	}
	if !eventually(5*time.Second, func() bool { s3, _ := g.Stats(); return s3.CPUUsage-s2.CPUUsage > 10*time.Millisecond }) {
		t.Error("the busy loop did not run again after Thaw")
	}
	if err := g.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	p.wait(t, 10*time.Second)
}

// TestCPUQuota: a busy loop in a group capped at a fifth of a core gets
// about that.
func TestCPUQuota(t *testing.T) {
	r := testRoot(t)
	if !r.Mode().Has(CPU) {
		t.Skip("the cpu controller is unavailable here")
	}
	g := newGroup(t, r, Limits{CPUs: 0.2})
	start(t, g, `while :; do :; done`)
	time.Sleep(100 * time.Millisecond)
	s1, err := g.Stats()
	if err != nil {
		t.Fatal(err)
	}
	const span = time.Second
	time.Sleep(span)
	s2, _ := g.Stats()
	if used := s2.CPUUsage - s1.CPUUsage; used > span*3/10 || used < span/20 {
		t.Errorf("a busy loop capped at 0.2 CPUs used %v in %v", used, span)
	}
}

// TestConcurrent: many sandboxes start at once.
func TestConcurrent(t *testing.T) {
	r := testRoot(t)
	const n = 50
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g, err := r.New(uniqueName(t), Limits{MemoryBytes: 64 << 20, Pids: 64})
			if err != nil {
				errs <- err
				return
			}
			if err := g.Delete(context.Background()); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestEnterThread: on a v1 host a process forked by a thread visiting
// the group is born in every hierarchy of the group, and the thread (so
// the caller) is back where it was afterwards.
func TestEnterThread(t *testing.T) {
	r := testRoot(t)
	if r.Version() == V2 {
		t.Skip("cgroup v2 starts processes in a group through its descriptor (FD), not EnterThread")
	}
	g := newGroup(t, r, Limits{Pids: 8})
	before := readFile(t, "/proc/thread-self/cgroup")

	runtime.LockOSThread()
	leave, err := g.EnterThread()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("EnterThread: %v", err)
	}
	cmd := exec.Command("sleep", "60")
	startErr := cmd.Start()
	leaveErr := leave()
	after := readFile(t, "/proc/thread-self/cgroup")
	runtime.UnlockOSThread()
	if startErr != nil {
		t.Fatal(startErr)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if leaveErr != nil {
		t.Fatalf("leave: %v", leaveErr)
	}
	if after != before {
		t.Errorf("the thread did not go back to its cgroups:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	pids, err := g.Pids()
	if err != nil || !slices.Contains(pids, cmd.Process.Pid) {
		t.Errorf("the group's processes are %v (%v), want the child %d among them", pids, err, cmd.Process.Pid)
	}
	child := readFile(t, fmt.Sprintf("/proc/%d/cgroup", cmd.Process.Pid))
	for _, c := range []string{Memory, Pids, CPU, CPUAcct, Freezer} {
		if g.Path(c) == "" {
			continue
		}
		found := false
		for _, line := range strings.Split(child, "\n") {
			if f := strings.SplitN(line, ":", 3); len(f) == 3 && slices.Contains(strings.Split(f[1], ","), c) {
				found = true
				if !strings.HasSuffix(g.Path(c), f[2]) {
					t.Errorf("the child's %s cgroup is %q, want the group's (%s)", c, f[2], g.Path(c))
				}
			}
		}
		if !found {
			t.Errorf("the child's cgroups name no %s hierarchy:\n%s", c, child)
		}
	}
}
