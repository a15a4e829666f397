package local

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/local/internal/runsc"
	"github.com/cove-sandbox/cove/sandbox/local/internal/sbdir"
)

// What a sandbox may leave on the host if its supervisor or gVisor dies
// badly: processes (the supervisor, pid 1, runsc and its Sentry, gofer
// and stub processes, all in the sandbox's cgroup), mounts (the overlay
// root, the disk, runsc's null-netns bind, in whatever mount namespace
// still holds them), its cgroups, its disk's loop device and its network
// pair. leftovers lists those that are still there.

// sandboxTraces are what identifies a sandbox's things on the host.
type sandboxTraces struct {
	id, dir string
	hostIf  string // its network pair's host end ("" for none)
}

func tracesOf(t *testing.T, rt *Runtime, id string) sandboxTraces {
	t.Helper()
	tr := sandboxTraces{id: id, dir: rt.dir(id)}
	if st, err := sbdir.Read(tr.dir); err == nil && st.Init.Net != nil {
		tr.hostIf = st.Init.Net.HostIf
	}
	return tr
}

// leftovers lists what of the sandbox still runs or is held on the host,
// its state directory aside.
func (tr sandboxTraces) leftovers() []string {
	var left []string
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		if p == fmt.Sprintf("/proc/%d", os.Getpid()) {
			continue
		}
		cmdline, _ := os.ReadFile(p + "/cmdline")
		cg, _ := os.ReadFile(p + "/cgroup")
		if bytes.Contains(cmdline, []byte(tr.dir)) || inGroup(cg, tr.id) {
			left = append(left, fmt.Sprintf("process %s (%s)", filepath.Base(p), strings.ReplaceAll(string(cmdline), "\x00", " ")))
		}
		if mountsOf(p+"/mountinfo", tr.dir) {
			left = append(left, fmt.Sprintf("a mount under %s in the mount namespace of process %s", tr.dir, filepath.Base(p)))
		}
	}
	filepath.WalkDir("/sys/fs/cgroup", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if strings.Count(strings.TrimPrefix(p, "/sys/fs/cgroup"), "/") > 4 {
			return fs.SkipDir
		}
		if d.Name() == tr.id || strings.HasPrefix(d.Name(), "runsc-"+tr.id) {
			left = append(left, "cgroup "+p)
			return fs.SkipDir
		}
		return nil
	})
	if out, _ := exec.Command("losetup", "-a").Output(); bytes.Contains(out, []byte(tr.dir)) {
		left = append(left, "a loop device of its disk")
	}
	if tr.hostIf != "" {
		if _, err := net.InterfaceByName(tr.hostIf); err == nil {
			left = append(left, "network interface "+tr.hostIf)
		}
	}
	return left
}

// inGroup says a /proc/PID/cgroup names the sandbox's group.
func inGroup(cg []byte, id string) bool {
	for _, line := range strings.Split(string(cg), "\n") {
		_, path, _ := strings.Cut(line[strings.IndexByte(line, ':')+1:], ":")
		if strings.HasSuffix(path, "/"+id) || strings.Contains(path, "/"+id+"/") {
			return true
		}
	}
	return false
}

// mountsOf says a mountinfo file lists a mount point under dir.
func mountsOf(mountinfo, dir string) bool {
	f, err := os.Open(mountinfo)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && (strings.HasPrefix(fields[4], dir+"/") || strings.HasPrefix(fields[3], dir+"/")) {
			return true
		}
	}
	return false
}

// noLeftovers fails the test if the sandbox left anything on the host;
// gone says its state directory must be gone too (after a delete).
// The kernel lets go of a killed process's mounts and loop devices once
// the process is reaped, a moment after the kill: what is left is looked
// for again for a while before it counts.
func noLeftovers(t *testing.T, tr sandboxTraces, when string, gone bool) {
	t.Helper()
	var left []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		left = tr.leftovers()
		if gone {
			if _, err := os.Lstat(tr.dir); err == nil {
				left = append(left, "its state directory")
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, l := range left {
		t.Errorf("%s: %s is left", when, l)
	}
}

// kernelPID is the host process that is the sandbox's kernel side: pid 1
// (the daemon) on the native tier, runsc's sandbox process (the Sentry)
// on gVisor.
func kernelPID(t *testing.T, rt *Runtime, id, iso string) int {
	t.Helper()
	st, err := sbdir.Read(rt.dir(id))
	if err != nil {
		t.Fatal(err)
	}
	if !onGVisor(iso) {
		return st.InitPID
	}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		cmdline, _ := os.ReadFile(p + "/cmdline")
		argv0, _, _ := bytes.Cut(cmdline, []byte{0})
		if string(argv0) == "runsc-sandbox" && bytes.Contains(cmdline, []byte(rt.dir(id)+"/")) {
			var pid int
			fmt.Sscan(filepath.Base(p), &pid)
			return pid
		}
	}
	t.Fatal("no runsc-sandbox process of the sandbox")
	return 0
}

// TestKernelKilled: SIGKILL of the sandbox's kernel side (the daemon; on
// gVisor, runsc's Sentry) stops the sandbox: List says so, nothing of the
// run is left, it resumes with its disk, and its delete leaves nothing.
func TestKernelKilled(t *testing.T) { onTiers(t, testKernelKilled) }

func testKernelKilled(t *testing.T, iso string) {
	rt := newRuntime(t)
	ctx := context.Background()
	s, err := rt.Create(ctx, sandbox.Spec{Isolation: iso, Network: sandbox.Network{Mode: NetworkInternet}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Delete(context.Background(), s.ID()) })
	if err := s.WriteFile(ctx, "kept.txt", strings.NewReader("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Start(ctx, sandbox.ExecRequest{Cmd: "sleep", Args: []string{"300"}}); err != nil {
		t.Fatal(err)
	}
	tr := tracesOf(t, rt, s.ID())
	if err := syscall.Kill(kernelPID(t, rt, s.ID(), iso), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		infos, err := rt.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if i := slices.IndexFunc(infos, func(in sandbox.Info) bool { return in.ID == s.ID() }); i >= 0 && infos[i].State == sandbox.StateStopped {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the sandbox does not say it stopped 30s after its kernel side was killed")
		}
	}
	noLeftovers(t, tr, "after its kernel side was killed", false)
	s2, err := rt.Resume(ctx, s.ID())
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	if out, _ := run(t, s2, "cat kept.txt"); out != "kept" {
		t.Errorf("its disk after the resume: %q, want kept", out)
	}
	if err := rt.Delete(ctx, s.ID()); err != nil {
		t.Fatal(err)
	}
	noLeftovers(t, tr, "after its delete", true)
}

// gvisorPS lists the processes in a running gVisor sandbox by their
// command name, from runsc's view (runsc ps: no command runs inside, so
// it works while a bomb holds every pid).
func gvisorPS(t *testing.T, rt *Runtime, id string) []string {
	t.Helper()
	st, err := sbdir.Read(rt.dir(id))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := runsc.ForSandbox(rt.dir(id), st).Command(ctx, "ps", id).Output()
	if err != nil {
		t.Fatalf("runsc ps: %v", err)
	}
	// A table: UID PID PPID C TTY STIME TIME CMD, a header first.
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var names []string
	for _, line := range lines[1:] {
		if f := strings.Fields(line); len(f) > 0 {
			names = append(names, f[len(f)-1])
		}
	}
	return names
}

// gvisorProcesses counts the processes in a running gVisor sandbox.
func gvisorProcesses(t *testing.T, rt *Runtime, id string) int {
	return len(gvisorPS(t, rt, id))
}

// TestStopLeavesNoMountInOtherSupervisors: a running gvisor sandbox
// mounts things (its root, its daemon's socket directory), and every
// process that copies the host's mount namespace while it runs (the
// supervisor of a sandbox started after it, a process of no Cove's that
// unshares its mounts: another runtime's, a service's private /tmp)
// would keep those mounts, and the sandbox's traces, after its stop: on
// this host, whose root propagates no unmount (a private /), until that
// process ends. Its stop must leave nothing in any of them, while they
// run on.
func TestStopLeavesNoMountInOtherSupervisors(t *testing.T) {
	needRunsc(t)
	onTiers(t, func(t *testing.T, iso string) {
		rt := newRuntime(t)
		ctx := context.Background()
		a, err := rt.Create(ctx, sandbox.Spec{Isolation: sandbox.IsolationGVisor})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rt.Delete(context.Background(), a.ID()) })
		tr := tracesOf(t, rt, a.ID())
		if len(tr.leftovers()) == 0 {
			t.Fatal("the gvisor sandbox holds nothing on the host while it runs: the check below would prove nothing")
		}
		b, err := rt.Create(ctx, sandbox.Spec{Isolation: iso})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rt.Delete(context.Background(), b.ID()) })
		outsider := exec.Command("unshare", "--mount", "sleep", "600")
		if err := outsider.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { outsider.Process.Kill(); outsider.Wait() })
		own, _ := os.Readlink("/proc/self/ns/mnt")
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
			if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", outsider.Process.Pid)); err == nil && ns != own {
				break // it has its copy
			}
			if time.Now().After(deadline) {
				t.Fatal("unshare --mount made no mount namespace within a minute")
			}
		}
		if err := rt.Stop(ctx, a.ID()); err != nil {
			t.Fatal(err)
		}
		noLeftovers(t, tr, "after its stop, with a sandbox started after it running", false)
		if out, _ := run(t, b, "echo up"); out != "up\n" {
			t.Errorf("the other sandbox after the stop: %q", out)
		}
	})
}
