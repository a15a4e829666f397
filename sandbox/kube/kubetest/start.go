package kubetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// namePrefix starts every name a cluster gives the host: its directory
// (covek-PID-HEX), its bridge and node (covekHEX).
const namePrefix = "covek"

// startTimeout bounds each wait of a start: generous, since the machine
// is small and shared.
const startTimeout = 5 * time.Minute

var errNotRoot = errors.New("the Kubernetes test cluster needs root (mounts, a bridge, containers)")

// starter holds a cluster being started.
type starter struct {
	logf   func(string, ...any)
	begin  time.Time
	dir    string
	id     string
	st     *stateStore
	logDir string
	binDir string
	ns     *mountNS
	net    *network
	pki    *pki
	c      *Cluster
	cancel context.CancelFunc // stops the provisioner
	procs  map[string]*proc
}

// start starts a cluster, logging progress with logf. On failure it
// tears down what it made and returns why, with the failing component's
// last log lines.
func start(logf func(string, ...any)) (*Cluster, error) {
	if os.Geteuid() != 0 {
		return nil, errNotRoot
	}
	binDir, err := kubeBinDir()
	if err != nil {
		return nil, err
	}
	sweep(logf)
	s := &starter{logf: logf, begin: time.Now(), binDir: binDir, procs: map[string]*proc{}}
	if err := s.makeDir(); err != nil {
		return nil, err
	}
	if err := s.run(); err != nil {
		if s.cancel != nil {
			s.cancel()
		}
		if terr := teardown(s.dir, s.st.get()); terr != nil {
			err = fmt.Errorf("%w (and tearing down: %v)", err, terr)
		}
		return nil, err
	}
	logf("cluster %s up in %s (%s)", s.id, time.Since(s.begin).Round(100*time.Millisecond), s.dir)
	return s.c, nil
}

// makeDir makes the cluster's directory and its state file.
func (s *starter) makeDir() error {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	s.id = namePrefix + hex.EncodeToString(b[:])
	s.dir = filepath.Join(os.TempDir(), fmt.Sprintf("%s-%d-%s", namePrefix, os.Getpid(), hex.EncodeToString(b[:])))
	if err := os.Mkdir(s.dir, 0o755); err != nil {
		return err
	}
	s.logDir = filepath.Join(s.dir, "logs")
	if err := os.Mkdir(s.logDir, 0o755); err != nil {
		return err
	}
	owner, err := startTime(os.Getpid())
	if err != nil {
		return err
	}
	s.st = &stateStore{path: filepath.Join(s.dir, stateFile)}
	return s.st.update(func(st *state) { st.Owner = procID{Name: "owner", Pid: os.Getpid(), Start: owner} })
}

func (s *starter) step(format string, args ...any) {
	s.logf("%6.1fs %s", time.Since(s.begin).Seconds(), fmt.Sprintf(format, args...))
}

// run starts the pieces in order, each waiting for what it needs.
func (s *starter) run() error {
	var err error
	s.step("network and certificates")
	if s.net, err = makeNetwork(s.st, s.id); err != nil {
		return err
	}
	ips := []net.IP{net.IPv4(127, 0, 0, 1), s.net.gateway.AsSlice(), s.net.firstSvcIP.AsSlice()}
	if s.pki, err = makePKI(filepath.Join(s.dir, "pki"), s.id, ips); err != nil {
		return err
	}
	if s.ns, err = startMountNS(s.st, s.logDir, s.id, filepath.Join(s.dir, "etcd")); err != nil {
		return err
	}
	s.step("etcd and kube-apiserver")
	apiURL, err := s.startControlPlane()
	if err != nil {
		return err
	}
	s.c = &Cluster{
		dir: s.dir, id: s.id, binDir: s.binDir, nodeIP: s.net.gateway.String(),
		podCIDR: s.net.pods.String(), serviceCIDR: s.net.services.String(),
		class: storageClassName, st: s.st, logDir: s.logDir,
	}
	s.c.config = restConfig(apiURL, s.pki)
	s.c.kubeconfig = filepath.Join(s.dir, "admin.kubeconfig")
	if err := os.WriteFile(s.c.kubeconfig, []byte(kubeconfig(apiURL, s.pki.caCert, s.pki.adminCert, s.pki.adminKey)), 0o600); err != nil {
		return err
	}
	if err := s.waitAPI(); err != nil {
		return err
	}
	s.step("kube-controller-manager, kube-scheduler")
	if err := s.startControllers(); err != nil {
		return err
	}
	s.step("containerd and the pause image")
	if err := s.startContainerd(); err != nil {
		return err
	}
	s.step("kubelet")
	if err := s.startKubelet(); err != nil {
		return err
	}
	s.step("storage class and the default namespace")
	return s.finish()
}

// restConfig is the admin's client configuration. The rate limits are
// raised for tests that create a hundred pods at once.
func restConfig(apiURL string, p *pki) *rest.Config {
	return &rest.Config{
		Host: apiURL, QPS: 200, Burst: 400,
		TLSClientConfig: rest.TLSClientConfig{CAData: p.caCert, CertData: p.adminCert, KeyData: p.adminKey},
	}
}

// startControlPlane starts etcd and the API server and returns the
// API server's URL.
func (s *starter) startControlPlane() (string, error) {
	etcd, err := lookPath("etcd")
	if err != nil {
		return "", err
	}
	ports, err := freePorts(3)
	if err != nil {
		return "", err
	}
	client := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	etcdProc, err := s.startIn("etcd", etcd, "--name", s.id, "--data-dir", filepath.Join(s.dir, "etcd", "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", s.id+"="+peer, "--initial-cluster-state", "new",
		"--logger", "zap", "--log-level", "warn", "--quota-backend-bytes", strconv.Itoa(2<<30))
	if err != nil {
		return "", err
	}
	if err := waitFor(etcdProc, "etcd to answer", func() bool { return httpOK(client + "/health") }); err != nil {
		return "", err
	}
	p := s.pki.path
	// The API server listens where it says it does: on the node's
	// address (the bridge's, which its certificate names), reached there
	// by the host's programs and, through the kubernetes Service, by pods.
	node := s.net.gateway.String()
	_, err = s.startIn("kube-apiserver", filepath.Join(s.binDir, "kube-apiserver"),
		"--etcd-servers", client, "--bind-address", node, "--secure-port", strconv.Itoa(ports[2]),
		"--advertise-address", node, "--service-cluster-ip-range", s.net.services.String(),
		// Debian's etcd 3.4 lacks what the lease reconciler needs, and
		// one API server needs no reconciling: the kubernetes Service
		// gets its endpoints when the cluster routes Services
		// (RouteServices).
		"--endpoint-reconciler-type", "none",
		"--tls-cert-file", p("apiserver.crt"), "--tls-private-key-file", p("apiserver.key"),
		"--client-ca-file", p("ca.crt"),
		"--kubelet-client-certificate", p("kubelet-client.crt"), "--kubelet-client-key", p("kubelet-client.key"),
		"--kubelet-preferred-address-types", "InternalIP",
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", p("sa.pub"), "--service-account-signing-key-file", p("sa.key"),
		"--authorization-mode", "Node,RBAC", "--allow-privileged=true", "--profiling=false",
		"--max-requests-inflight", "800", "--max-mutating-requests-inflight", "400", "--v", "1")
	if err != nil {
		return "", err
	}
	return "https://" + net.JoinHostPort(node, strconv.Itoa(ports[2])), nil
}

// startIn starts a program in the cluster's mount namespace.
func (s *starter) startIn(name string, argv ...string) (*proc, error) {
	return s.startInEnv(name, os.Environ(), argv...)
}

// startInEnv starts a program in the cluster's mount namespace with an
// environment.
func (s *starter) startInEnv(name string, env []string, argv ...string) (*proc, error) {
	p, err := startProc(s.st, s.logDir, name, env, s.ns.argv(argv...)...)
	if err == nil {
		s.procs[name] = p
	}
	return p, err
}

// waitAPI waits for the API server to be ready.
func (s *starter) waitAPI() error {
	cs, err := kubernetes.NewForConfig(s.c.config)
	if err != nil {
		return err
	}
	return waitFor(s.procs["kube-apiserver"], "kube-apiserver to be ready", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && strings.TrimSpace(string(body)) == "ok"
	})
}

// startControllers starts the controller manager and the scheduler,
// both with the admin's credentials.
func (s *starter) startControllers() error {
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	admin := s.c.kubeconfig
	common := []string{"--kubeconfig", admin, "--authentication-kubeconfig", admin, "--authorization-kubeconfig", admin,
		"--bind-address", "127.0.0.1", "--leader-elect=false", "--v", "1"}
	_, err = s.startIn("kube-controller-manager", append([]string{filepath.Join(s.binDir, "kube-controller-manager"),
		"--secure-port", strconv.Itoa(ports[0]),
		"--service-account-private-key-file", s.pki.path("sa.key"), "--root-ca-file", s.pki.path("ca.crt"),
		"--use-service-account-credentials=false", "--kube-api-qps", "100", "--kube-api-burst", "200"}, common...)...)
	if err != nil {
		return err
	}
	_, err = s.startIn("kube-scheduler", append([]string{filepath.Join(s.binDir, "kube-scheduler"),
		"--secure-port", strconv.Itoa(ports[1])}, common...)...)
	return err
}

// waitFor polls ok until it holds, failing early if p exits.
func waitFor(p *proc, what string, ok func() bool) error {
	deadline := time.Now().Add(startTimeout)
	for {
		if ok() {
			return nil
		}
		if p != nil {
			if done, err := p.exited(); done {
				return fmt.Errorf("%s exited while waiting for %s: %v%s", p.id.Name, what, err, logTail(p.log))
			}
		}
		if time.Now().After(deadline) {
			tail := ""
			if p != nil {
				tail = logTail(p.log)
			}
			return fmt.Errorf("waited %s for %s%s", startTimeout, what, tail)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func httpOK(url string) bool {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// freePorts returns n distinct local ports free a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
