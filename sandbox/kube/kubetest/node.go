package kubetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// startContainerd starts the cluster's containerd, with the pod
// network's CNI configuration already in place, and imports the pause
// image.
func (s *starter) startContainerd() error {
	containerd, err := lookPath("containerd")
	if err != nil {
		return err
	}
	ctr, err := lookPath("ctr")
	if err != nil {
		return err
	}
	dir := filepath.Join(s.dir, "containerd")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	cniConf := filepath.Join(s.dir, "cni", "net.d")
	if err := writeCNIConfig(cniConf, filepath.Join(s.dir, "cni", "ipam"), s.net); err != nil {
		return err
	}
	// Without gVisor the node still runs runc's pods; GVisor says why
	// it has no gVisor class.
	g, err := s.setupGVisor()
	env := os.Environ()
	if err != nil {
		s.c.gvisorErr = err
	} else {
		env = g.env()
	}
	config, err := writeContainerdConfig(dir, cniConf, g)
	if err != nil {
		return err
	}
	p, err := s.startInEnv("containerd", env, containerd, "--config", config)
	if err != nil {
		return err
	}
	s.c.ctrAddress = filepath.Join(dir, "containerd.sock")
	err = waitFor(p, "containerd to answer", func() bool {
		return exec.Command(ctr, "--address", s.c.ctrAddress, "--connect-timeout", "2s", "version").Run() == nil
	})
	if err != nil {
		return err
	}
	img, err := pauseTar()
	if err != nil {
		return err
	}
	return s.c.importImage(pauseImage, img)
}

// startKubelet starts the kubelet and waits for its node to be ready and
// schedulable.
func (s *starter) startKubelet() error {
	dir := filepath.Join(s.dir, "kubelet")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	ports, err := freePorts(1)
	if err != nil {
		return err
	}
	config, err := writeKubeletConfig(dir, s.c.ctrAddress, s.pki.path("ca.crt"), ports[0], s.net)
	if err != nil {
		return err
	}
	kcfg := filepath.Join(dir, "kubeconfig")
	kubeletCert, err := os.ReadFile(s.pki.path("kubelet.crt"))
	if err != nil {
		return err
	}
	kubeletKey, err := os.ReadFile(s.pki.path("kubelet.key"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(kcfg, []byte(kubeconfig(s.c.config.Host, s.pki.caCert, kubeletCert, kubeletKey)), 0o600); err != nil {
		return err
	}
	p, err := s.startIn("kubelet", filepath.Join(s.binDir, "kubelet"), "--config", config, "--kubeconfig", kcfg,
		"--root-dir", filepath.Join(dir, "root"), "--hostname-override", s.id, "--node-ip", s.net.gateway.String(),
		"--v", "1")
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(s.c.config)
	if err != nil {
		return err
	}
	return waitFor(p, "the node to be ready", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		node, err := cs.CoreV1().Nodes().Get(ctx, s.id, metav1.GetOptions{})
		return err == nil && nodeReady(node)
	})
}

// nodeReady reports whether node is Ready and carries none of the
// taints the node controllers put on a node that is not (a pod without
// tolerations would not be scheduled).
func nodeReady(node *corev1.Node) bool {
	for _, t := range node.Spec.Taints {
		if strings.HasPrefix(t.Key, "node.kubernetes.io/") {
			return false
		}
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// finish makes the StorageClass, starts its provisioner and waits for
// what a pod in the default namespace needs: the default service
// account and the kube-root-ca.crt config map its token volume mounts.
func (s *starter) finish() error {
	cs, err := kubernetes.NewForConfig(s.c.config)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	prov := &provisioner{cs: cs, dir: filepath.Join(s.dir, "volumes"), logf: s.logf}
	if err := os.Mkdir(prov.dir, 0o755); err != nil {
		return err
	}
	if err := prov.start(ctx); err != nil {
		return err
	}
	err = waitFor(s.procs["kube-controller-manager"], "the default service account", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err1 := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		_, err2 := cs.CoreV1().ConfigMaps("default").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		return err1 == nil && err2 == nil
	})
	if err != nil {
		return err
	}
	if s.c.gvisorErr == nil {
		if err := createRuntimeClass(ctx, cs); err != nil {
			return err
		}
	}
	dir, st, c := s.dir, s.st, s.c
	s.c.stop = func() error {
		cancel()
		err := teardown(dir, st.get())
		return errors.Join(err, c.stopNetpol(), c.stopServices())
	}
	return nil
}

// kubeBinDir returns the directory of the Kubernetes binaries
// scripts/deps.sh built: $COVE_KUBE_BIN_DIR, or .cache/kube/VERSION in
// the checkout, VERSION being tools/kube's pin.
func kubeBinDir() (string, error) {
	dir := os.Getenv("COVE_KUBE_BIN_DIR")
	if dir == "" {
		root, version, err := kubePin()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(root, ".cache", "kube", version)
	}
	for _, name := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return "", fmt.Errorf("%s is not built in %s: run scripts/deps.sh test (it builds Kubernetes from source, about 15 min the first time)", name, dir)
		}
	}
	return dir, nil
}

// kubePin finds the checkout's root above the working directory and the
// Kubernetes version tools/kube pins.
func kubePin() (root, version string, err error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", "", err
	}
	for {
		goMod := filepath.Join(dir, "tools", "kube", "go.mod")
		if _, err := os.Stat(goMod); err == nil {
			version, err := requiredVersion(goMod, "k8s.io/kubernetes")
			return dir, version, err
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", "", fmt.Errorf("no tools/kube/go.mod above the working directory: set COVE_KUBE_BIN_DIR to the Kubernetes binaries")
		}
		dir = parent
	}
}
