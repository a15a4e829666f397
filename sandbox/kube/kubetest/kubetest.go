// Package kubetest starts a real single-node Kubernetes cluster for tests:
// Debian's etcd, kube-apiserver, kube-controller-manager, kube-scheduler
// and the kubelet built from source by scripts/deps.sh (.cache/kube), a
// containerd of its own with runc, a CNI bridge of its own, and a
// StorageClass whose provisioner runs in the test process; on request
// kube-router's firewall enforces NetworkPolicy (EnforceNetworkPolicy)
// and kube-proxy routes Services (RouteServices). Everything
// lives in a temporary directory (/tmp/covek-PID-ID) and a private mount
// namespace, and is torn down at the end; a test binary killed before
// that leaves its directory behind, and the next binary's first cluster
// sweeps it (see sweep.go).
//
// A test binary shares one cluster (Main and Shared), or starts private
// ones (Start). Starting one takes a minute or more of CPU on a small
// machine, so most tests should share.
package kubetest

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"k8s.io/client-go/rest"
)

// Cluster is a running single-node cluster.
type Cluster struct {
	dir         string // the cluster's temporary directory
	id          string // unique: names the bridge, the node, the CNI network
	binDir      string // the Kubernetes binaries
	nodeIP      string // the bridge's address: the kubelet's and the node's
	podCIDR     string
	serviceCIDR string
	config      *rest.Config
	kubeconfig  string
	class       string
	ctrAddress  string // containerd's socket
	gvisorErr   error  // why the node has no gVisor RuntimeClass, if it has none
	st          *stateStore
	logDir      string
	netpol      netpol   // the NetworkPolicy enforcer, if asked for
	services    services // kube-proxy, if asked for

	stopOnce sync.Once
	stop     func() error
}

// Config returns a client configuration with cluster-admin rights. Each
// call returns a copy the caller may change.
func (c *Cluster) Config() *rest.Config { return rest.CopyConfig(c.config) }

// Kubeconfig returns the path of a kubeconfig file with the same rights
// as Config, for kubectl (Bin("kubectl")) and programs under test.
func (c *Cluster) Kubeconfig() string { return c.kubeconfig }

// NodeName returns the name of the cluster's only node.
func (c *Cluster) NodeName() string { return c.id }

// NodeIP returns the node's address: the gateway of the pod network on
// the host, where the kubelet listens. Pod addresses are reachable from
// the host.
func (c *Cluster) NodeIP() string { return c.nodeIP }

// PodCIDR returns the pods' address range.
func (c *Cluster) PodCIDR() string { return c.podCIDR }

// ServiceCIDR returns the services' virtual address range. A Service's
// cluster IP leads to its pods once RouteServices has started
// kube-proxy, and nowhere before.
func (c *Cluster) ServiceCIDR() string { return c.serviceCIDR }

// StorageClass returns the name of the default StorageClass. Its
// provisioner runs in the test process and makes hostPath volumes under
// the cluster's directory; a claim whose dataSource is another claim of
// the class starts as a copy of it. Volumes are deleted with their claims.
func (c *Cluster) StorageClass() string { return c.class }

// Bin returns the path of a program the cluster runs or tests use:
// kubectl, kube-apiserver, kube-controller-manager, kube-scheduler,
// kubelet and kube-proxy from the build cache, anything else (ctr, etcd,
// containerd) from the PATH.
func (c *Cluster) Bin(name string) string {
	switch name {
	case "kubectl", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy":
		return filepath.Join(c.binDir, name)
	}
	if p, err := lookPath(name); err == nil {
		return p
	}
	return name
}

// Start starts a private cluster, stopped when t's test ends. It fails t
// if the cluster cannot start; it skips t only when COVE_SKIP_KUBE=1.
func Start(t testing.TB) *Cluster {
	t.Helper()
	skipIfAsked(t)
	c, err := start(t.Logf)
	if err != nil {
		t.Fatalf("starting the test cluster: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stopping the test cluster: %v", err)
		}
	})
	return c
}

// Stop tears the cluster down: its processes, containers, mounts,
// network and directory. Later calls return nil.
func (c *Cluster) Stop() error {
	var err error
	c.stopOnce.Do(func() { err = c.stop() })
	return err
}

var shared struct {
	mu      sync.Mutex
	inMain  bool
	cluster *Cluster
	err     error
}

// Main runs the package's tests (call it from TestMain) and then stops
// the cluster Shared started, if any, before the binary exits.
func Main(m *testing.M) {
	shared.mu.Lock()
	shared.inMain = true
	shared.mu.Unlock()
	code := m.Run()
	shared.mu.Lock()
	c := shared.cluster
	shared.mu.Unlock()
	if c != nil {
		if err := c.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "kubetest: stopping the shared cluster: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
	os.Exit(code)
}

// Shared returns the test binary's one cluster, starting it on first
// use; the binary's TestMain must call Main, which stops it. If it
// failed to start, every caller fails with the same error. It skips t
// only when COVE_SKIP_KUBE=1.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	skipIfAsked(t)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.inMain {
		t.Fatal("kubetest.Shared needs the test binary's TestMain to call kubetest.Main(m), which stops the shared cluster")
	}
	if shared.cluster == nil && shared.err == nil {
		// The first caller's t ends long before the cluster does, so
		// progress goes to stderr, not t.Logf.
		shared.cluster, shared.err = start(func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, "kubetest: "+format+"\n", args...)
		})
	}
	if shared.err != nil {
		t.Fatalf("starting the shared test cluster: %v", shared.err)
	}
	return shared.cluster
}

func skipIfAsked(t testing.TB) {
	t.Helper()
	if os.Getenv("COVE_SKIP_KUBE") == "1" {
		t.Skip("COVE_SKIP_KUBE=1: not starting a Kubernetes test cluster")
	}
}
