package cli

import (
	"encoding/hex"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/sandbox/sandboxtest"
)

// The local runtime's walls of issue 13 through the real CLI, as a user
// of `cove sandbox` meets them: each test here failed on the code before
// the wall was built. The runtime's own tests (sandbox/local) attack each
// wall in more depth.

// cliHome is a fresh COVE_HOME (short: unix socket paths are limited),
// removed with whatever the test left in it.
func cliHome(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the local runtime needs root (CI runs as root)")
	}
	home, err := os.MkdirTemp("", "ca")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	return home
}

// cove runs the CLI with COVE_HOME=home and fails the test if it fails.
func cove(t *testing.T, home string, args ...string) string {
	t.Helper()
	out, errOut, err := coveErr(t, home, args...)
	if err != nil {
		t.Fatalf("cove %s: %v\n%s", strings.Join(args, " "), err, errOut)
	}
	return out
}

func coveErr(t *testing.T, home string, args ...string) (string, string, error) {
	t.Helper()
	t.Setenv("COVE_HOME", home)
	return run(t, args...)
}

// newSandbox creates a sandbox with the CLI and deletes it at the end.
func newSandbox(t *testing.T, home string, args ...string) string {
	t.Helper()
	id := strings.TrimSpace(cove(t, home, append([]string{"sandbox", "create"}, args...)...))
	t.Cleanup(func() { coveErr(t, home, "sandbox", "rm", "-f", id) })
	return id
}

// TestAttackLocalNoIPv6: a networked sandbox has no IPv6 but its own
// loopback (before: both ends of its pair had link-local addresses, and
// the host's [::] services were reachable through them).
func TestAttackLocalNoIPv6(t *testing.T) {
	home := cliHome(t)
	// A service on the host's [::], which the sandbox must not reach.
	l, err := net.Listen("tcp6", "[::]:0")
	if err != nil {
		t.Skipf("no IPv6 on this host: %v", err)
	}
	defer l.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
			accepted <- struct{}{}
		}
	}()
	id := newSandbox(t, home, "--network", "internet")
	out := cove(t, home, "sandbox", "exec", id, "--", "cat", "/proc/net/if_inet6")
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); len(f) == 6 && f[5] != "lo" {
			t.Errorf("the sandbox's %s has an IPv6 address: %s", f[5], line)
		}
	}
	// As root inside, try every v6 way to the host: the all-nodes
	// group and the host end's link-local address, had it one.
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	cove(t, home, "sandbox", "exec", "-u", "root", id, "--", "sh", "-c",
		"for a in ff02::1 fe80::1; do timeout 3 bash -c \"echo > /dev/tcp/$a%eth0/"+port+"\" 2>/dev/null; done; true")
	select {
	case <-accepted:
		t.Error("the host's [::] service accepted a connection from the sandbox")
	case <-time.After(time.Second):
	}
}

// gateway is the sandbox's default gateway, from /proc/net/route.
func gateway(t *testing.T, home, id string) net.IP {
	t.Helper()
	out := cove(t, home, "sandbox", "exec", id, "--", "cat", "/proc/net/route")
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 2 && f[1] == "00000000" {
			b, err := hex.DecodeString(f[2])
			if err != nil || len(b) != 4 {
				break
			}
			return net.IPv4(b[3], b[2], b[1], b[0])
		}
	}
	t.Fatalf("no default route in the sandbox:\n%s", out)
	return nil
}

// TestAttackLocalTwoInstalls: two installs on one host (two COVE_HOMEs, as
// the CLI's /var/lib/cove and the server's /var/lib/cove/server are) give
// their networked sandboxes different subnets (before: the same /30, and
// traffic went to the wrong sandbox).
func TestAttackLocalTwoInstalls(t *testing.T) {
	a, b := cliHome(t), cliHome(t)
	sa := newSandbox(t, a, "--network", "internet")
	sb := newSandbox(t, b, "--network", "internet")
	if ga, gb := gateway(t, a, sa), gateway(t, b, sb); ga.Equal(gb) {
		t.Errorf("two installs' sandboxes share the gateway %s, and so their subnet", ga)
	}
}

// TestAttackLocalDiskAdmission: on a host with 400 MiB, sandboxes'
// disks are not promised beyond what it has (before: every create
// succeeded, and filling one disk filled the host under the others), and
// a full host still stops and deletes.
func TestAttackLocalDiskAdmission(t *testing.T) {
	home := sandboxtest.SmallFS(t, 400<<20)
	first := newSandbox(t, home, "--disk", "160M")
	newSandbox(t, home, "--disk", "128M")
	_, errOut, err := coveErr(t, home, "sandbox", "create", "--disk", "160M")
	if err == nil {
		t.Fatal("a third disk the host cannot back was created")
	}
	if msg := err.Error() + errOut; !strings.Contains(msg, "free") || strings.Contains(msg, home) || strings.Contains(msg, "/dev/loop") {
		t.Errorf("the refusal %q should say what is free and name no host path or device", msg)
	}
	// The first sandbox's data survives the host filling up around it.
	cove(t, home, "sandbox", "exec", first, "--", "sh", "-c", "head -c 50000000 /dev/urandom > data && sha256sum data > sum")
	filler, err := os.Create(filepath.Join(home, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	for {
		if _, err := filler.Write(buf); err != nil {
			break
		}
	}
	filler.Close()
	cove(t, home, "sandbox", "exec", first, "--", "sh", "-c", "head -c 20000000 /dev/urandom > more && sha256sum -c sum")
	cove(t, home, "sandbox", "stop", first)
	cove(t, home, "sandbox", "rm", "-f", first)
	os.Remove(filepath.Join(home, "filler"))
}

// TestAttackLocalStopFreesDisk: a copy of the host's mount namespace made
// while a sandbox runs (as any container runtime or systemd unit with
// PrivateTmp makes) holds nothing of its disk, so a stop frees it and the
// resume that follows works (before: the stop reported success, and the
// resume failed with "still in use").
func TestAttackLocalStopFreesDisk(t *testing.T) {
	home := cliHome(t)
	id := newSandbox(t, home, "--disk", "64M")
	cove(t, home, "sandbox", "exec", id, "--", "sh", "-c", "echo mine > kept")
	for range 3 {
		hold := exec.Command("unshare", "--mount", "--propagation", "private", "sleep", "300")
		if err := hold.Start(); err != nil {
			t.Skipf("unshare: %v", err)
		}
		time.Sleep(200 * time.Millisecond) // its namespace is made
		cove(t, home, "sandbox", "stop", id)
		cove(t, home, "sandbox", "resume", id)
		hold.Process.Kill()
		hold.Wait()
		if out := cove(t, home, "sandbox", "exec", id, "--", "cat", "kept"); strings.TrimSpace(out) != "mine" {
			t.Fatalf("after stop and resume the workspace file holds %q", out)
		}
	}
}

// TestAttackLocalDaemonOutlivesMemory: thousands of small processes over
// a sandbox's memory limit cost the user commands, not the sandbox: a
// command answers afterwards without a resume (before: the daemon was
// OOM-killed and the sandbox stopped).
func TestAttackLocalDaemonOutlivesMemory(t *testing.T) {
	home := cliHome(t)
	id := newSandbox(t, home, "--memory", "160M", "--pids", "4096")
	before := oomKills(t)
	// 400 children of about 2 MB each (800 MB against 160 MB), started
	// from a subshell so the exec ends while they hold their memory (the
	// echo after the sleep keeps each shell, and its 2 MB, from being
	// replaced by the sleep).
	cove(t, home, "sandbox", "exec", id, "--", "sh", "-c",
		`(i=0; while [ $i -lt 400 ]; do (x=$(head -c 2000000 /dev/zero | tr '\000' a); sleep 600; echo ${#x}) & i=$((i+1)); sleep 0.01; done) >/dev/null 2>&1; true`)
	// The last children may still be filling their memory.
	for deadline := time.Now().Add(time.Minute); oomKills(t) == before; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no OOM kill: the workload never reached the sandbox's memory limit")
		}
	}
	if out := cove(t, home, "sandbox", "exec", id, "--", "echo", "alive"); strings.TrimSpace(out) != "alive" {
		t.Errorf("after memory exhaustion the sandbox answers %q", out)
	}
	if out := cove(t, home, "sandbox", "ls"); !strings.Contains(out, id) || !strings.Contains(out, "running") {
		t.Errorf("after memory exhaustion the sandbox is not running:\n%s", out)
	}
}

// oomKills is the host's count of OOM kills so far.
func oomKills(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/vmstat")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Skip("the kernel does not count OOM kills")
	return 0
}
