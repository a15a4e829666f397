package kubetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/sandbox/internal/sbutil"
)

// On request a cluster routes Services as most clusters do: the real
// kube-proxy, built by scripts/deps.sh from the same Kubernetes release,
// turns every Service and EndpointSlice into DNAT rules in the host's
// network namespace, where the node's pods and the test process both
// send their packets.
//
// Its rules are named the same for every cluster (the nftables tables
// ip and ip6 "kube-proxy"), so one cluster on the host at a time routes Services:
// servicesLock is held while kube-proxy runs. Whoever takes the lock
// first, or a sweep that finds it free, removes what a killed holder
// left. The lock file holds the host settings the holder changed, as
// they were before, so that they can be put back even after a kill.
const servicesLock = "/run/lock/cove-kubetest-services.lock"

// servicesWait bounds the wait for another package's cluster to stop
// routing Services: TestDeployOnCluster holds it for the whole deploy.
const servicesWait = 20 * time.Minute

// bridgeNFCallIPTables makes the host's firewall see packets a bridge
// passes between its ports (br_netfilter). A pod's packet to a Service
// whose endpoint is another pod on the bridge is DNATed on its way
// through the node, but the endpoint's reply goes straight back across
// the bridge: unless conntrack sees it there, the client gets a reply
// from an address it never wrote to.
const bridgeNFCallIPTables = "net/bridge/bridge-nf-call-iptables"

// kube-proxy's chains in its iptables mode (pkg/proxy/iptables), which
// does not run here (nftables mode does) but which the check that
// nothing of kube-proxy is left still looks for: a kube-proxy that fell
// back to it would leave them. KUBE-SVC-, KUBE-SEP- and the like are per
// Service and endpoint.
var kubeProxyChains = []string{
	"KUBE-SERVICES", "KUBE-EXTERNAL-SERVICES", "KUBE-NODEPORTS", "KUBE-POSTROUTING", "KUBE-MARK-MASQ",
	"KUBE-FORWARD", "KUBE-PROXY-FIREWALL", "KUBE-PROXY-CANARY", "KUBE-SVC-", "KUBE-SVL-", "KUBE-SEP-",
	"KUBE-EXT-", "KUBE-FW-", "KUBE-FIREWALL",
}

// kubeProxyTable is the table kube-proxy's nftables mode keeps its rules
// in, in the ip and ip6 families.
const kubeProxyTable = "kube-proxy"

// services is a cluster's kube-proxy, once started.
type services struct {
	mu   sync.Mutex
	lock *os.File
	proc *proc
	// stopForwarding stops forwardOnBridge's watcher.
	stopForwarding func()
}

// RouteServices makes the cluster route Services from now until it
// stops, starting kube-proxy on first call: a Service's cluster IP
// leads to its pods from the host and from pods, and the kubernetes
// Service to the API server. It waits (up to 20 minutes) while another
// cluster on the host routes Services.
func (c *Cluster) RouteServices() error {
	c.services.mu.Lock()
	defer c.services.mu.Unlock()
	if c.services.proc != nil {
		if done, err := c.services.proc.exited(); done {
			return fmt.Errorf("kube-proxy exited: %v%s", err, logTail(c.services.proc.log))
		}
		return nil
	}
	bin := filepath.Join(c.binDir, "kube-proxy")
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("kube-proxy is not built in %s: run scripts/deps.sh test", c.binDir)
	}
	if err := c.writeAPIEndpoints(); err != nil {
		return fmt.Errorf("pointing the kubernetes Service at the API server: %w", err)
	}
	lock, err := takeHostLock(servicesLock, servicesWait, "another test cluster on this host routes Services")
	if err != nil {
		return err
	}
	if err := cleanServices(lock, bin); err != nil {
		lock.Close()
		return fmt.Errorf("removing what an earlier kube-proxy left: %w", err)
	}
	if err := setSysctl(lock, bridgeNFCallIPTables, "1"); err != nil {
		cleanErr := cleanServices(lock, bin)
		lock.Close()
		return errors.Join(err, cleanErr)
	}
	if err := c.forwardOnBridge(); err != nil {
		cleanErr := cleanServices(lock, bin)
		lock.Close()
		return errors.Join(err, cleanErr)
	}
	// nftables mode: its rules are one table of its own, apart from the
	// iptables chains kube-router's firewall keeps. It needs a kernel of
	// 5.13 or later; Debian 12's is 6.1.
	p, err := c.startKubeProxy(bin)
	if err == nil {
		c.services.lock, c.services.proc = lock, p
		return nil
	}
	if p != nil {
		p.id.kill()
		<-p.done
	}
	c.services.stopForwarding()
	c.services.stopForwarding = nil
	err = errors.Join(fmt.Errorf("kube-proxy: %w", err), cleanServices(lock, bin))
	lock.Close()
	return err
}

// startKubeProxy starts kube-proxy in nftables mode and waits for its
// first sync: the kubernetes Service's address in its rules.
func (c *Cluster) startKubeProxy(bin string) (*proc, error) {
	args := []string{bin, "--kubeconfig", c.kubeconfig, "--proxy-mode", "nftables",
		"--hostname-override", c.id, "--bind-address", c.nodeIP, "--cluster-cidr", c.podCIDR,
		// Off: the health and metrics servers, the oom_score_adj (root
		// lacks CAP_SYS_RESOURCE here) and every conntrack setting of
		// the host, which kube-proxy otherwise raises for a busy node.
		"--healthz-bind-address", "", "--metrics-bind-address", "", "--oom-score-adj", "0",
		"--conntrack-max-per-core", "0", "--conntrack-tcp-timeout-established", "0",
		"--conntrack-tcp-timeout-close-wait", "0", "--v", "1"}
	p, err := startProc(c.st, c.logDir, "kube-proxy", os.Environ(), args...)
	if err != nil {
		return nil, err
	}
	svcIP, err := c.apiServiceIP()
	if err != nil {
		return p, err
	}
	return p, waitFor(p, "kube-proxy's first sync", func() bool {
		out, err := run("nft", "list", "map", "ip", kubeProxyTable, "service-ips")
		return err == nil && bytes.Contains(out, []byte(svcIP+" . tcp . "))
	})
}

// apiServiceIP returns the kubernetes Service's cluster IP.
func (c *Cluster) apiServiceIP() (string, error) {
	cs, err := kubernetes.NewForConfig(c.config)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	svc, err := cs.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	return svc.Spec.ClusterIP, nil
}

// writeAPIEndpoints writes what the API server's endpoint reconciler
// would, were it not off (start.go says why): the kubernetes Service's
// Endpoints and EndpointSlice, naming the API server at the node's
// address, where it listens. Pods then reach it at the Service's address
// (KUBERNETES_SERVICE_HOST), as in-cluster configuration expects.
func (c *Cluster) writeAPIEndpoints() error {
	u, err := url.Parse(c.config.Host)
	if err != nil {
		return err
	}
	host, portStr, err := net.SplitHostPort(u.Host)
	if err != nil {
		return err
	}
	if host != c.nodeIP {
		return fmt.Errorf("the API server listens on %s, not the node's address %s", host, c.nodeIP)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return err
	}
	// The Endpoints API is deprecated, and client-go says so on stderr;
	// the reconciler writes it still, for the clients that read it.
	cfg := rest.CopyConfig(c.config)
	cfg.WarningHandler = rest.NoWarnings{}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// As the reconciler's: the Endpoints not mirrored into a second
	// slice, the slice named as the Service.
	ep := &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: "default",
			Labels: map[string]string{discoveryv1.LabelSkipMirror: "true"}},
		Subsets: []corev1.EndpointSubset{{
			Addresses: []corev1.EndpointAddress{{IP: c.nodeIP}},
			Ports:     []corev1.EndpointPort{{Name: "https", Port: int32(port), Protocol: corev1.ProtocolTCP}},
		}},
	}
	if _, err := cs.CoreV1().Endpoints("default").Create(ctx, ep, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	name, proto, port32, ready := "https", corev1.ProtocolTCP, int32(port), true
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: "default",
			Labels: map[string]string{discoveryv1.LabelServiceName: "kubernetes"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{c.nodeIP}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port32, Protocol: &proto}},
	}
	if _, err := cs.DiscoveryV1().EndpointSlices("default").Create(ctx, slice, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// stopServices removes kube-proxy's rules, puts back the host settings
// it changed and releases the host's lock, once teardown has killed it.
func (c *Cluster) stopServices() error {
	c.services.mu.Lock()
	defer c.services.mu.Unlock()
	if c.services.lock == nil {
		return nil
	}
	c.services.stopForwarding()
	c.services.stopForwarding = nil
	err := cleanServices(c.services.lock, filepath.Join(c.binDir, "kube-proxy"))
	c.services.lock.Close()
	c.services.lock, c.services.proc = nil, nil
	return err
}

// forwardOnBridge lets the node forward what its pods send to a Service
// whose endpoint is another pod (or the same one): the packet comes in
// on the bridge to the node's address, kube-proxy rewrites its
// destination, and it must go back out the bridge. Only the bridge
// forwards (net.ipv4.conf.BRIDGE.forwarding: packets that come in on
// it), and a table of the cluster's own drops whatever it would forward
// elsewhere, so Service traffic stays on the node and pods reach no more
// of the host's networks than before. The host's ip_forward is left as
// it is; writing it sets every interface's flag to its value, so a
// watcher puts the bridge's back when another program's write turns it
// off. The bridge and the table go with the cluster (teardown).
func (c *Cluster) forwardOnBridge() error {
	script := fmt.Sprintf("table ip %[1]s {\n"+
		"\tchain forward {\n"+
		"\t\ttype filter hook forward priority filter - 5; policy accept;\n"+
		"\t\tiifname %[1]q oifname != %[1]q drop\n"+
		"\t}\n"+
		"}\n", c.id)
	nft, err := lookPath("nft")
	if err != nil {
		return err
	}
	cmd := exec.Command(nft, "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft: keeping the bridge's forwarding on the bridge: %v: %s", err, out)
	}
	path := filepath.Join("/proc/sys/net/ipv4/conf", c.id, "forwarding")
	if err := os.WriteFile(path, []byte("1"), 0o644); err != nil {
		return fmt.Errorf("turning on forwarding on the bridge: %w", err)
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-done:
				return
			case <-time.After(200 * time.Millisecond):
			}
			if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) == "0" {
				_ = os.WriteFile(path, []byte("1"), 0o644)
			}
		}
	}()
	c.services.stopForwarding = func() { close(done); <-stopped }
	return nil
}

// deleteForwardTable deletes the table forwardOnBridge made for the
// cluster whose bridge is name, if there is one.
func deleteForwardTable(name string) error {
	if name == "" || !strings.HasPrefix(name, namePrefix) {
		return nil
	}
	nft, err := lookPath("nft")
	if err != nil {
		return nil // no nft, so no table
	}
	out, err := exec.Command(nft, "list", "tables", "ip").Output()
	if err != nil {
		return fmt.Errorf("nft list tables: %w", err)
	}
	if !slices.Contains(strings.Split(strings.TrimSpace(string(out)), "\n"), "table ip "+name) {
		return nil
	}
	if out, err := exec.Command(nft, "delete", "table", "ip", name).CombinedOutput(); err != nil {
		return fmt.Errorf("nft delete table ip %s: %v: %s", name, err, out)
	}
	return nil
}

// sweepServices removes what a killed kube-proxy left, if no cluster
// routes Services now.
func sweepServices(logf func(string, ...any)) {
	f, err := os.OpenFile(servicesLock, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		logf("sweep: %v", err)
		return
	}
	defer f.Close()
	if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		return // a live cluster routes Services
	}
	saved, _ := savedHost(f)
	left, err := kubeProxyLeft()
	if err != nil {
		logf("sweep: %v", err)
		return
	}
	if left == "" && len(saved) == 0 {
		return
	}
	binDir, err := kubeBinDir()
	if err != nil {
		logf("sweep: %v", err)
		return
	}
	logf("sweeping what a killed test binary's kube-proxy left")
	if err := cleanServices(f, filepath.Join(binDir, "kube-proxy")); err != nil {
		logf("sweep: %v", err)
	}
}

// cleanServices removes every rule kube-proxy made (its --cleanup,
// which removes the rules of every mode), checks that none is left, and
// puts back the host settings recorded in the lock file, whose holder
// the caller is.
func cleanServices(lock *os.File, bin string) error {
	var errs []error
	if out, err := exec.Command(bin, "--cleanup", "--proxy-mode", "nftables").CombinedOutput(); err != nil {
		errs = append(errs, fmt.Errorf("kube-proxy --cleanup: %v: %s", err, sbutil.LastLines(string(out), 10)))
	}
	if left, err := kubeProxyLeft(); err != nil {
		errs = append(errs, err)
	} else if left != "" {
		errs = append(errs, fmt.Errorf("kube-proxy --cleanup left:\n%s", left))
	}
	return errors.Join(append(errs, restoreHost(lock))...)
}

// kubeProxyLeft returns what of kube-proxy's rules the host has: its
// nftables tables and its iptables chains (kube-router's, also named
// KUBE-, are not its).
func kubeProxyLeft() (string, error) {
	var left []string
	out, err := run("nft", "list", "tables")
	if err != nil {
		return "", fmt.Errorf("nft list tables: %w", err)
	}
	for line := range strings.SplitSeq(string(out), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "table" && f[2] == kubeProxyTable {
			left = append(left, line)
		}
	}
	for _, save := range []string{"iptables-save", "ip6tables-save"} {
		bin, err := lookPath(save)
		if err != nil {
			continue // no iptables of that family, so none of its rules
		}
		out, err := exec.Command(bin).Output()
		if err != nil {
			return "", fmt.Errorf("%s: %w", save, err)
		}
		for line := range strings.SplitSeq(string(out), "\n") {
			if (strings.HasPrefix(line, ":") || strings.HasPrefix(line, "-A ")) && mentionsAny(line, kubeProxyChains) {
				left = append(left, save+": "+line)
			}
		}
	}
	return strings.Join(left, "\n"), nil
}

// setSysctl sets /proc/sys/name to value, first recording in the lock
// file what it was, if it was something else.
func setSysctl(lock *os.File, name, value string) error {
	path := filepath.Join("/proc/sys", name)
	old, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s does not exist (br_netfilter is not loaded): pods could not reach Services whose pods share their bridge", path)
	}
	if err != nil {
		return err
	}
	was := strings.TrimSpace(string(old))
	if was == value {
		return nil
	}
	if err := appendRecord(lock, fmt.Sprintf("%s %s\n", name, was)); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(value), 0o644)
}

// appendRecord adds lines to the lock file's record of what to put
// back, on disk before the change it records is made.
func appendRecord(lock *os.File, lines string) error {
	if lines == "" {
		return nil
	}
	if _, err := lock.Seek(0, 2); err != nil {
		return err
	}
	if _, err := lock.WriteString(lines); err != nil {
		return err
	}
	return lock.Sync()
}

// savedHost reads the lock file's record: "NAME VALUE" for a setting
// under /proc/sys as it was.
func savedHost(lock *os.File) ([][]string, error) {
	if _, err := lock.Seek(0, 0); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(lock); err != nil {
		return nil, err
	}
	var out [][]string
	for line := range strings.SplitSeq(buf.String(), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			out = append(out, f)
		}
	}
	return out, nil
}

// restoreHost puts back what the lock file records and empties it.
// Only settings under net/bridge are taken (the file is the host's).
func restoreHost(lock *os.File) error {
	saved, err := savedHost(lock)
	if err != nil {
		return err
	}
	var errs []error
	for _, s := range saved {
		if len(s) != 2 || !strings.HasPrefix(filepath.Clean(s[0]), "net/bridge/") {
			errs = append(errs, fmt.Errorf("not restoring %q from %s: not what kubetest records", strings.Join(s, " "), servicesLock))
			continue
		}
		if err := os.WriteFile(filepath.Join("/proc/sys", filepath.Clean(s[0])), []byte(s[1]), 0o644); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return lock.Truncate(0)
}

// run runs a program of the host's (looked up as lookPath does) and
// returns its output.
func run(name string, args ...string) ([]byte, error) {
	bin, err := lookPath(name)
	if err != nil {
		return nil, err
	}
	return exec.Command(bin, args...).Output()
}
