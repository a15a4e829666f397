package local

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/guest"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/local/internal/runsc"
	"github.com/cove-sandbox/cove/sandbox/local/internal/sbdir"
	"github.com/cove-sandbox/cove/sandbox/sandboxtest"
)

// needRunsc skips a test of the gVisor tier on a host without runsc
// (scripts/deps.sh builds and installs it; CI has it).
func needRunsc(t testing.TB) {
	t.Helper()
	needRoot(t)
	if runsc.Installed("") == "" {
		t.Skip("runsc is not installed (scripts/deps.sh installs it)")
	}
}

// gvisorRuntime is the shared local runtime, making every sandbox on
// the gVisor tier.
type gvisorRuntime struct{ *Runtime }

func (g gvisorRuntime) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Session, error) {
	spec.Isolation = sandbox.IsolationGVisor
	return g.Runtime.Create(ctx, spec)
}

func newGVisor(t testing.TB) gvisorRuntime {
	t.Helper()
	needRunsc(t)
	return gvisorRuntime{newRuntime(t)}
}

// createGVisor makes a gVisor sandbox deleted at the test's end.
func createGVisor(t *testing.T, spec sandbox.Spec) sandbox.Session {
	t.Helper()
	rt := newGVisor(t)
	s, err := rt.Create(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Delete(context.Background(), s.ID()) })
	return s
}

func TestGVisorSmoke(t *testing.T) {
	s := createGVisor(t, sandbox.Spec{})
	out, st := run(t, s, "echo hi; id -un; pwd; uname -r; cat /proc/self/status | head -2")
	t.Logf("out: %s st %+v", out, st)
	if !strings.Contains(out, "hi") {
		t.Fatal(out)
	}
	_ = os.Getpid
	_ = time.Second
}

// The conformance suite, every sandbox on the gVisor tier.
func TestGVisorConformance(t *testing.T) {
	needRunsc(t)
	sandboxtest.RunWithOptions(t, func(t *testing.T) sandbox.Runtime { return newGVisor(t) }, sandboxtest.Options{
		Listen: echoListen,
	})
}

// A paused gVisor sandbox comes back with its processes: a background
// shell keeps its pid and its count, and /tmp (memory in gVisor) its
// files, which a plain stop would lose.
func TestGVisorPauseKeepsMemory(t *testing.T) {
	rt := newGVisor(t)
	s := createGVisor(t, sandbox.Spec{})
	ctx := context.Background()
	if _, err := s.Start(ctx, sandbox.ExecRequest{Cmd: "sh", Args: []string{"-c", "echo $$ > /tmp/pid; i=0; while :; do i=$((i+1)); echo $i > /tmp/c; mv /tmp/c /tmp/count; sleep 0.05; done"}}); err != nil {
		t.Fatal(err)
	}
	out, _ := run(t, s, "sleep 0.3; kill -0 $(cat /tmp/pid) && cat /tmp/pid /tmp/count")
	before := strings.Fields(out)
	if len(before) != 2 {
		t.Fatalf("before the pause: %q", out)
	}
	if err := rt.Pause(ctx, s.ID()); err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State != sandbox.StateStopped || !info.Paused {
		t.Fatalf("after Pause: state %s paused %v, want stopped and paused", info.State, info.Paused)
	}
	if _, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "true"}); err == nil {
		t.Fatal("exec in a paused sandbox worked")
	}
	s2, err := rt.Resume(ctx, s.ID())
	if err != nil {
		t.Fatal(err)
	}
	out, _ = run(t, s2, "kill -0 $(cat /tmp/pid) && cat /tmp/pid /tmp/count; sleep 0.3; cat /tmp/count")
	after := strings.Fields(out)
	if len(after) != 3 || after[0] != before[0] {
		t.Fatalf("after resume: %q, want the same shell (pid %s) still counting", out, before[0])
	}
	if atoi(t, after[1]) < atoi(t, before[1]) || atoi(t, after[2]) <= atoi(t, after[1]) {
		t.Fatalf("the count went %s before the pause, then %s and %s after: want it kept and going on", before[1], after[1], after[2])
	}
	if info, _ := s2.Info(ctx); info.Paused || info.State != sandbox.StateRunning {
		t.Fatalf("after resume: %+v", info)
	}
	// A stop after that is a plain stop: the next resume starts afresh.
	if err := rt.Stop(ctx, s.ID()); err != nil {
		t.Fatal(err)
	}
	s3, err := rt.Resume(ctx, s.ID())
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := run(t, s3, "ls /tmp; echo none"); strings.TrimSpace(out) != "none" {
		t.Fatalf("after a stop and a resume: %q, want no process and an empty /tmp", out)
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%q: not a number", s)
	}
	return n
}

// A memory fork of a running gVisor sandbox starts with the source's
// processes, each copy on its own from there; the source goes on.
func TestGVisorForkMemory(t *testing.T) {
	rt := newGVisor(t)
	s := createGVisor(t, sandbox.Spec{})
	ctx := context.Background()
	if _, err := s.Start(ctx, sandbox.ExecRequest{Cmd: "sh", Args: []string{"-c", "echo $$ > /tmp/pid; i=0; while :; do i=$((i+1)); echo $i > /tmp/c; mv /tmp/c /tmp/count; sleep 0.05; done"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteFile(ctx, "note.txt", strings.NewReader("from the source"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _ := run(t, s, "sleep 0.3; kill -0 $(cat /tmp/pid) && cat /tmp/pid")
	pid := strings.TrimSpace(out)
	forks, err := rt.ForkMemory(ctx, s.ID(), 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(forks) != 2 {
		t.Fatalf("%d forks, want 2", len(forks))
	}
	for _, f := range append([]sandbox.Session{s}, forks...) {
		t.Cleanup(func() { rt.Delete(context.Background(), f.ID()) })
		out, _ := run(t, f, "kill -0 $(cat /tmp/pid) && cat /tmp/pid; a=$(cat /tmp/count); sleep 0.3; b=$(cat /tmp/count); [ $b -gt $a ] && echo counting; cat note.txt")
		if want := pid + "\ncounting\nfrom the source"; strings.TrimSpace(out) != want {
			t.Fatalf("sandbox %s: %q, want %q (the source's shell, still counting, and its files)", f.ID(), out, want)
		}
	}
	// Each copy is its own: a file made in one is in no other.
	if err := forks[0].WriteFile(ctx, "only-here", strings.NewReader("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, f := range []sandbox.Session{s, forks[1]} {
		if _, err := f.Stat(ctx, "only-here"); err == nil {
			t.Fatalf("a file made in fork %s shows in %s", forks[0].ID(), f.ID())
		}
	}
	if _, err := rt.ForkMemory(ctx, s.ID(), 0); !errors.Is(err, sandbox.ErrInvalid) {
		t.Fatalf("fork count 0: %v, want ErrInvalid", err)
	}
}

// A networked gVisor sandbox keeps its egress across a pause, and a
// server it runs keeps its port.
func TestGVisorPauseNetworked(t *testing.T) {
	rt := newGVisor(t)
	fakeInternet(t)
	ctx := context.Background()
	s := createGVisor(t, sandbox.Spec{Network: sandbox.Network{Mode: NetworkInternet}})
	if out, code := fetch(t, s, "203.0.113.10:8080"); code != 0 || !strings.Contains(out, "hello from 203.0.113.10:8080") {
		t.Fatalf("before the pause: %d %q", code, out)
	}
	stop := echoListen(t, s, 7000)
	defer stop()
	if err := rt.Pause(ctx, s.ID()); err != nil {
		t.Fatal(err)
	}
	s, err := rt.Resume(ctx, s.ID())
	if err != nil {
		t.Fatal(err)
	}
	if out, code := fetch(t, s, "203.0.113.10:8080"); code != 0 || !strings.Contains(out, "hello from 203.0.113.10:8080") {
		t.Errorf("after the pause: %d %q", code, out)
	}
	c, err := s.DialPort(ctx, 7000)
	if err != nil {
		t.Fatalf("the echo server's port after the pause: %v", err)
	}
	defer c.Close()
	c.Write([]byte("ping\n"))
	buf := make([]byte, 5)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping\n" {
		t.Errorf("the echo server after the pause answered %q, %v", buf, err)
	}
}

// A memory fork of a networked gVisor sandbox gets a /30 of its own, and
// its restored network uses it: egress works from the copy and from the
// source alike.
func TestGVisorForkMemoryNetworked(t *testing.T) {
	rt := newGVisor(t)
	fakeInternet(t)
	ctx := context.Background()
	s := createGVisor(t, sandbox.Spec{Network: sandbox.Network{Mode: NetworkInternet}})
	forks, err := rt.ForkMemory(ctx, s.ID(), 1)
	if err != nil {
		t.Fatal(err)
	}
	f := forks[0]
	t.Cleanup(func() { rt.Delete(context.Background(), f.ID()) })
	src, _ := sbdir.Read(rt.dir(s.ID()))
	cp, _ := sbdir.Read(rt.dir(f.ID()))
	if src.Init.Net.Addr == cp.Init.Net.Addr {
		t.Fatalf("the fork has the source's address %s", cp.Init.Net.Addr)
	}
	for _, x := range []sandbox.Session{s, f} {
		if out, code := fetch(t, x, "203.0.113.10:8080"); code != 0 || !strings.Contains(out, "hello from 203.0.113.10:8080") {
			t.Errorf("sandbox %s after the fork: %d %q", x.ID(), code, out)
		}
	}
	if out, _ := run(t, f, "ip -4 -o addr show eth0"); !strings.Contains(out, " "+cp.Init.Net.Addr.String()+" ") || strings.Contains(out, " "+src.Init.Net.Addr.String()+" ") {
		t.Errorf("the fork's eth0: %q, want %s only", out, cp.Init.Net.Addr)
	}
}

// A paused sandbox whose memory cannot be restored (here: the checkpoint
// is damaged, as a runsc of another version would find it) says so, and
// the next resume starts it afresh with its disk.
func TestGVisorRestoreFailureKeepsDisk(t *testing.T) {
	rt := newGVisor(t)
	ctx := context.Background()
	s := createGVisor(t, sandbox.Spec{})
	if err := s.WriteFile(ctx, "kept.txt", strings.NewReader("disk"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := rt.Pause(ctx, s.ID()); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(memoryDir(rt.dir(s.ID())), "checkpoint.img"), []byte("not a checkpoint"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := rt.Resume(ctx, s.ID())
	if err == nil || !strings.Contains(err.Error(), "its memory could not be restored") || strings.Contains(err.Error(), rt.cfg.Dir) {
		t.Fatalf("resume of a damaged checkpoint: %v, want an error that says the memory is lost, without host paths", err)
	}
	s2, err := rt.Resume(ctx, s.ID())
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := run(t, s2, "cat kept.txt"); out != "disk" {
		t.Fatalf("after the failed restore: %q, want the disk kept", out)
	}
}

// The directory the daemon's socket is in is the one place inside a
// gVisor sandbox that is also the host's: root there fills a few
// kilobytes at most, and a link it plants in the socket's place is not
// followed by the host, which then sees no daemon rather than another
// socket of the host's.
func TestGVisorSocketDirWalled(t *testing.T) {
	rt := newGVisor(t)
	ctx := context.Background()
	s := createGVisor(t, sandbox.Spec{})
	st, err := rt.load(s.ID())
	if err != nil {
		t.Fatal(err)
	}
	c, err := rt.client(s.ID(), st, st.ShimPID)
	if err != nil {
		t.Fatal(err)
	}
	root := guest.NewSession(c, guest.SessionOptions{ID: s.ID(), Root: "/"})
	defer root.Close()
	var out strings.Builder
	res, err := root.Exec(ctx, sandbox.ExecRequest{Cmd: "sh", User: "root", Dir: "/", Stdout: &out, Stderr: &out, Args: []string{"-c",
		"dd if=/dev/zero of=" + runsc.SocketDir + "/fill bs=1M count=64 2>&1; ls -la " + runsc.SocketDir + "; rm -f " + runsc.SocketDir + "/fill"}})
	if err != nil || !strings.Contains(out.String(), "No space left") {
		t.Fatalf("filling the socket directory as root: %+v %v\n%s", res, err, out.String())
	}
	// A host socket the test owns, which the sandbox names by a link.
	bait := filepath.Join(t.TempDir(), "bait.sock")
	l, err := net.Listen("unix", bait)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	reached := make(chan struct{}, 1)
	go func() {
		if c, err := l.Accept(); err == nil {
			reached <- struct{}{}
			c.Close()
		}
	}()
	out.Reset()
	sock := runsc.SocketDir + "/" + runsc.SocketName
	// The daemon keeps serving on its open socket; a new dial finds the link.
	root.Exec(ctx, sandbox.ExecRequest{Cmd: "sh", User: "root", Dir: "/", Stdout: &out, Stderr: &out, Args: []string{"-c",
		"rm -f " + sock + " && ln -s " + bait + " " + sock + " && ls -la " + runsc.SocketDir}})
	fresh, err := rt.client(s.ID(), st, st.ShimPID)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := fresh.Health(hctx); err == nil {
		t.Fatalf("a client dialled through the planted link and got an answer (%s)", out.String())
	}
	select {
	case <-reached:
		t.Fatal("the host followed a link planted in the socket directory to a host socket")
	case <-time.After(100 * time.Millisecond):
	}
}

// gVisor's kernel has no OOM killer, and the host's would end the whole
// sandbox: the daemon ends the process past the memory limit, says so
// in its exit, and goes on serving.
func TestGVisorOutOfMemoryEndsTheProcess(t *testing.T) {
	rt := newGVisor(t)
	ctx := context.Background()
	s := createGVisor(t, sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: 128 << 20}})
	var out strings.Builder
	st, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "python3", Args: []string{"-c", "a=[]\nwhile True: a.append(b'x'*(1<<20))"}, Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatal(err)
	}
	if st.Success() || !st.OOM {
		t.Fatalf("a process past the memory limit: %+v %q, want it ended and marked OOM", st, out.String())
	}
	if out, st := run(t, s, "echo still here"); out != "still here\n" || !st.Success() {
		t.Fatalf("after the OOM: %q %+v", out, st)
	}
	if info, _ := rt.Get(ctx, s.ID()); info == nil {
		t.Fatal("the sandbox is gone")
	}
}

// What runs in a native sandbox runs in a gVisor one: Python and a pip
// install, git, node, and a C program compiled and run, each in both
// tiers with the same output.
func TestGVisorRunsToolchains(t *testing.T) {
	needRoot(t)
	script := `set -e
python3 -c 'import json, sqlite3; print(json.dumps({"py": sqlite3.sqlite_version_info[0]}))'
mkdir -p mini/minipkg && printf 'VALUE = 42\n' > mini/minipkg/__init__.py
printf 'from setuptools import setup\nsetup(name="minipkg", version="1.0", packages=["minipkg"])\n' > mini/setup.py
python3 -m pip install -q --no-index --no-build-isolation --disable-pip-version-check --target site ./mini >/dev/null 2>&1
PYTHONPATH=site python3 -c 'import minipkg; print("pip", minipkg.VALUE)'
git init -q repo && cd repo && git config user.email a@b && git config user.name a
echo hi > f && git add f && git commit -qm one && git log --oneline | wc -l && cd ..
node -e 'console.log("node", [1, 2, 3].map((x) => x * 2).join(","))'
printf '#include <stdio.h>\nint main(void) { printf("cc %%d\\n", 6 * 7); return 0; }\n' > hello.c
cc -o hello hello.c && ./hello
`
	want := "{\"py\": 3}\npip 42\n1\nnode 2,4,6\ncc 42\n"
	onTiers(t, func(t *testing.T, iso string) {
		rt := newRuntime(t)
		s, err := rt.Create(context.Background(), sandbox.Spec{Isolation: iso})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rt.Delete(context.Background(), s.ID()) })
		if out, st := run(t, s, script); out != want || !st.Success() {
			t.Fatalf("the toolchains on %s: %+v\n%s\nwant\n%s", iso, st, out, want)
		}
	})
}
