package kubetest

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TestSweepAfterKill starts a cluster with a running pod in a child test
// binary, SIGKILLs the binary, and checks that the sweep at the next
// start removes everything the dead binary's cluster left: its shims,
// containers, cgroups, bridge, directory and kube-proxy's rules.
func TestSweepAfterKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a second cluster")
	}
	if os.Geteuid() != 0 {
		t.Skip(errNotRoot)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperStartAndWait$", "-test.v")
	cmd.Env = append(os.Environ(), "KUBETEST_HELPER=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var dir, bridge string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "READY" {
			dir, bridge = f[1], f[2]
			break
		}
	}
	if dir == "" {
		t.Fatal("the child test binary did not start its cluster")
	}
	cgroups := containerCgroups(dir)
	if len(cgroups) == 0 {
		t.Fatal("no container cgroups in the child's cluster: the check below would prove nothing")
	}
	// Other test binaries starting clusters sweep too: hold them off
	// until this test has seen what the dead binary left.
	unlock, err := lockSweeps()
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	if left, _ := kubeProxyLeft(); left == "" {
		t.Fatal("no rule of the child's kube-proxy: the sweep below would prove nothing")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	time.Sleep(time.Second) // the parent-death signals land
	if len(procsMentioning(dir+"/")) == 0 {
		t.Fatal("nothing of the killed binary's cluster outlived it: the sweep below would prove nothing")
	}
	sweepLocked(t.Logf)
	if ps := procsMentioning(dir + "/"); len(ps) > 0 {
		t.Errorf("processes left: %v", ps)
	}
	if _, err := netlink.LinkByName(bridge); err == nil {
		t.Errorf("bridge %s left", bridge)
	}
	if tables, err := exec.Command("nft", "list", "tables").Output(); err != nil || strings.Contains(string(tables), bridge) {
		t.Errorf("the cluster's forwarding table left: %v\n%s", err, tables)
	}
	// kube-proxy's rules, unless another cluster routes Services now.
	if f, err := os.OpenFile(servicesLock, os.O_RDWR, 0); err == nil {
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
			if left, err := kubeProxyLeft(); err != nil || left != "" {
				t.Errorf("kube-proxy's rules left: %v\n%s", err, left)
			}
		} else {
			t.Log("another cluster routes Services now: not looking for the killed one's rules")
		}
		f.Close()
	}
	for _, cg := range cgroups {
		if _, err := os.Stat(cg); err == nil {
			t.Errorf("cgroup %s left", cg)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("directory %s left: %v", dir, err)
	}
}

// TestHelperStartAndWait is TestSweepAfterKill's child: it starts a
// cluster with a pod running and waits to be killed.
func TestHelperStartAndWait(t *testing.T) {
	if os.Getenv("KUBETEST_HELPER") != "1" {
		t.Skip("run by TestSweepAfterKill")
	}
	c, err := start(t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.RouteServices(); err != nil {
		t.Fatal(err)
	}
	importBusybox(t, c)
	longPod(t, c, "long", "")
	os.Stdout.WriteString("READY " + c.dir + " " + c.id + "\n")
	select {}
}
