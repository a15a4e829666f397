package kubetest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The bridge CNI enforces no NetworkPolicy. On request a cluster runs
// kube-router's network policy controller (only its firewall: no router,
// no service proxy), built by scripts/deps.sh from the pin in
// tools/kuberouter, as the node's enforcer: it turns every NetworkPolicy
// into iptables chains and ipsets matched by pod address, the way a
// cluster with kube-router as its CNI enforces them.
//
// Its chains and ipsets are the host's, not the cluster's, so one
// cluster on the host at a time runs it: netpolLock is held while it
// runs, and whoever takes the lock first removes what a killed holder
// left (the kernel releases a dead process's lock).
const netpolLock = "/run/lock/cove-kubetest-netpol.lock"

// netpolWait bounds the wait for another package's cluster to release
// the enforcer.
const netpolWait = 10 * time.Minute

// kube-router's names: its chains in the filter table and its ipsets.
var (
	kubeRouterChains  = []string{"KUBE-ROUTER-INPUT", "KUBE-ROUTER-FORWARD", "KUBE-ROUTER-OUTPUT", "KUBE-NWPLCY-", "KUBE-POD-FW-"}
	kubeRouterIPSets  = []string{"KUBE-SRC-", "KUBE-DST-"}
	kubeRouterVersion = "github.com/cloudnativelabs/kube-router/v2"
)

// netpol is a cluster's enforcer, once started.
type netpol struct {
	mu   sync.Mutex
	lock *os.File
	proc *proc
}

// EnforceNetworkPolicy makes the cluster enforce NetworkPolicy objects
// from now until it stops, starting kube-router's firewall on first
// call. It waits (up to 10 minutes) while another cluster on the host
// enforces.
func (c *Cluster) EnforceNetworkPolicy() error {
	c.netpol.mu.Lock()
	defer c.netpol.mu.Unlock()
	if c.netpol.proc != nil {
		if done, err := c.netpol.proc.exited(); done {
			return fmt.Errorf("the NetworkPolicy enforcer (kube-router) exited: %v%s", err, logTail(c.netpol.proc.log))
		}
		return nil
	}
	bin, err := kubeRouterBin()
	if err != nil {
		return err
	}
	lock, err := takeHostLock(netpolLock, netpolWait, "another test cluster on this host enforces NetworkPolicy")
	if err != nil {
		return err
	}
	if err := cleanKubeRouter(); err != nil {
		lock.Close()
		return fmt.Errorf("removing what an earlier enforcer left: %w", err)
	}
	p, err := startProc(c.st, c.logDir, "kube-router", os.Environ(), bin,
		"--kubeconfig", c.kubeconfig, "--hostname-override", c.id,
		"--run-firewall=true", "--run-router=false", "--run-service-proxy=false",
		"--service-cluster-ip-range", c.serviceCIDR, "--health-port=0", "--metrics-port=0",
		"--iptables-sync-period", "5m", "--v", "1")
	if err != nil {
		lock.Close()
		return err
	}
	c.netpol.lock, c.netpol.proc = lock, p
	// Its first sync installs the chains every pod's traffic goes through.
	return waitFor(p, "kube-router's first sync", func() bool {
		rules, err := filterRules()
		return err == nil && bytes.Contains(rules, []byte("-j KUBE-ROUTER-FORWARD"))
	})
}

// WaitNetworkPolicy waits until the enforcer has applied the policies of
// the pod at podIP: its traffic goes through the pod's own chain. The
// enforcer reacts to pods as they start, so there is a moment after a
// pod starts when its traffic is not yet filtered; a cluster whose CNI
// enforces policy as it wires the pod (Calico, Cilium) has none.
func (c *Cluster) WaitNetworkPolicy(podIP string) error {
	c.netpol.mu.Lock()
	p := c.netpol.proc
	c.netpol.mu.Unlock()
	if p == nil {
		return errors.New("WaitNetworkPolicy before EnforceNetworkPolicy")
	}
	want := fmt.Sprintf("-s %s/32 ", podIP)
	return waitFor(p, "kube-router to apply the policies of pod "+podIP, func() bool {
		rules, err := filterRules()
		if err != nil {
			return false
		}
		for line := range strings.SplitSeq(string(rules), "\n") {
			if strings.HasPrefix(line, "-A KUBE-ROUTER-FORWARD ") && strings.Contains(line, want) && strings.Contains(line, "-j KUBE-POD-FW-") {
				return true
			}
		}
		return false
	})
}

// stopNetpol removes the enforcer's rules and releases the host's lock,
// once teardown has killed it.
func (c *Cluster) stopNetpol() error {
	c.netpol.mu.Lock()
	defer c.netpol.mu.Unlock()
	if c.netpol.lock == nil {
		return nil
	}
	err := cleanKubeRouter()
	c.netpol.lock.Close()
	c.netpol.lock, c.netpol.proc = nil, nil
	return err
}

// takeHostLock takes the host-wide lock at path, waiting up to wait for
// its holder (why says who holds it, for the error) to let it go.
func takeHostLock(path string, wait time.Duration, why string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(wait)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("taking %s (%s): %w", path, why, err)
		}
		time.Sleep(time.Second)
	}
}

// kubeRouterBin returns the kube-router scripts/deps.sh built:
// $COVE_KUBE_ROUTER, or .cache/kube/kube-router-VERSION in the checkout.
func kubeRouterBin() (string, error) {
	return builtTool("COVE_KUBE_ROUTER", "kuberouter", kubeRouterVersion, "kube/kube-router-")
}

// builtTool returns a program scripts/deps.sh built into the checkout's
// cache: $env when set, else .cache/PREFIXVERSION, VERSION being the
// version of module that tools/TOOLDIR/go.mod pins.
func builtTool(env, toolDir, module, prefix string) (string, error) {
	if p := os.Getenv(env); p != "" {
		return p, nil
	}
	root, _, err := kubePin()
	if err != nil {
		return "", err
	}
	version, err := requiredVersion(filepath.Join(root, "tools", toolDir, "go.mod"), module)
	if err != nil {
		return "", err
	}
	bin := filepath.Join(root, ".cache", prefix+version)
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("%s is not built at %s: run scripts/deps.sh test (or set %s)", strings.TrimSuffix(filepath.Base(prefix), "-"), bin, env)
	}
	return bin, nil
}

// requiredVersion reads the version of module mod that a go.mod requires.
func requiredVersion(goMod, mod string) (string, error) {
	data, err := os.ReadFile(goMod)
	if err != nil {
		return "", err
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(f) >= 2 && f[0] == mod {
			return f[1], nil
		}
	}
	return "", fmt.Errorf("%s requires no %s", goMod, mod)
}

func filterRules() ([]byte, error) {
	bin, err := lookPath("iptables-save")
	if err != nil {
		return nil, err
	}
	return exec.Command(bin, "-t", "filter").Output()
}

// cleanKubeRouter removes kube-router's chains, the rules that jump to
// them and its ipsets, leaving every other rule and set of the host as
// it was: the filter table is loaded again without them in one
// transaction.
func cleanKubeRouter() error {
	rules, err := filterRules()
	if err != nil {
		return fmt.Errorf("listing the filter table: %w", err)
	}
	var kept bytes.Buffer
	changed := false
	for line := range strings.SplitSeq(strings.TrimRight(string(rules), "\n"), "\n") {
		if (strings.HasPrefix(line, ":") || strings.HasPrefix(line, "-A ")) && mentionsAny(line, kubeRouterChains) {
			changed = true
			continue
		}
		kept.WriteString(line + "\n")
	}
	if changed {
		restore, err := lookPath("iptables-restore")
		if err != nil {
			return err
		}
		cmd := exec.Command(restore, "-w", "10")
		cmd.Stdin = &kept
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("iptables-restore: %v: %s", err, out)
		}
	}
	ipset, err := lookPath("ipset")
	if err != nil {
		return err
	}
	out, err := exec.Command(ipset, "list", "-n").Output()
	if err != nil {
		return fmt.Errorf("listing ipsets: %w", err)
	}
	var errs []error
	for name := range strings.FieldsSeq(string(out)) {
		if strings.HasPrefix(name, kubeRouterIPSets[0]) || strings.HasPrefix(name, kubeRouterIPSets[1]) {
			if out, err := exec.Command(ipset, "destroy", name).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("ipset destroy %s: %v: %s", name, err, out))
			}
		}
	}
	return errors.Join(errs...)
}

func mentionsAny(s string, names []string) bool {
	for _, n := range names {
		if strings.Contains(s, n) {
			return true
		}
	}
	return false
}
