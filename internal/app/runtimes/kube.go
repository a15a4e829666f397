package runtimes

import (
	"fmt"
	"net/netip"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/kube"
	"github.com/cove-sandbox/cove/sandbox/local"
)

// KubeOptions are cove serve's --kube-* flags.
type KubeOptions struct {
	// Kubeconfig is a kubeconfig file; "" means $KUBECONFIG, then the
	// pod's own service account (in the cluster), then ~/.kube/config.
	Kubeconfig string
	// Namespace, StorageClass and ImagePrefix are kube.Config's.
	Namespace, StorageClass, ImagePrefix string
	// RuntimeClasses is "gvisor=runsc,native=runc": tier=RuntimeClass
	// pairs, comma-separated.
	RuntimeClasses string
	// ClusterCIDRs is the cluster's pod and service networks,
	// comma-separated CIDRs.
	ClusterCIDRs string
	// AllowPrivate is --network-allow-private.
	AllowPrivate string
}

// Kube is the kube runtime cove serve --runtime kube runs sandboxes on.
func Kube(o KubeOptions) (*kube.Runtime, error) {
	rc, err := kubeREST(o.Kubeconfig)
	if err != nil {
		return nil, err
	}
	classes, err := ParseRuntimeClasses(o.RuntimeClasses)
	if err != nil {
		return nil, fmt.Errorf("--kube-runtime-classes: %w", err)
	}
	cidrs, err := parseCIDRs(o.ClusterCIDRs)
	if err != nil {
		return nil, fmt.Errorf("--kube-cluster-cidrs: %w", err)
	}
	allow, err := local.ParseNetworks(o.AllowPrivate)
	if err != nil {
		return nil, fmt.Errorf("--network-allow-private: %w", err)
	}
	return kube.New(kube.Config{REST: rc, Namespace: o.Namespace, StorageClass: o.StorageClass, ImagePrefix: o.ImagePrefix,
		RuntimeClasses: classes, ClusterCIDRs: cidrs, AllowPrivate: allow})
}

func kubeREST(path string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if path != "" {
		rules.ExplicitPath = path
	} else if rc, err := rest.InClusterConfig(); err == nil {
		return rc, nil
	}
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("reading the cluster's configuration (--kubeconfig): %w", err)
	}
	return rc, nil
}

// ParseRuntimeClasses reads "gvisor=runsc,native=runc".
func ParseRuntimeClasses(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		tier, class, ok := strings.Cut(f, "=")
		if !ok || class == "" || (tier != sandbox.IsolationNative && tier != sandbox.IsolationGVisor) {
			return nil, fmt.Errorf("%q: want TIER=RUNTIMECLASS with TIER %s or %s (e.g. gvisor=runsc): %w", f, sandbox.IsolationNative, sandbox.IsolationGVisor, sandbox.ErrInvalid)
		}
		out[tier] = class
	}
	return out, nil
}

func parseCIDRs(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR: %w", f, sandbox.ErrInvalid)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}
