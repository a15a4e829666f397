package kube

import (
	"context"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/internal/sbutil"
)

// Network modes of Spec.Network.Mode, as the local runtime's.
const (
	NetworkNone     = "none"
	NetworkInternet = "internet"
	NetworkAllow    = "allow"
)

// blocked are the ranges no sandbox egress reaches unless the operator
// lists them in Config.AllowPrivate; metadata never.
var blocked = []struct {
	net  netip.Prefix
	what string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "\"this network\""},
	{netip.MustParsePrefix("10.0.0.0/8"), "a private range (RFC 1918)"},
	{netip.MustParsePrefix("100.64.0.0/10"), "carrier-grade NAT space"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("172.16.0.0/12"), "a private range (RFC 1918)"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignments"},
	{netip.MustParsePrefix("192.168.0.0/16"), "a private range (RFC 1918)"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking space"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved space"},
}

// metadata is link-local space, where the clouds' metadata endpoints are
// (169.254.169.254): never reachable, whatever the operator allows.
var metadata = netip.MustParsePrefix("169.254.0.0/16")

// rule lets a sandbox reach net, on port (TCP and UDP) when set.
type rule struct {
	net  netip.Prefix
	port uint16
}

// checkNetwork checks a spec's network and resolves its allow list.
func (r *Runtime) checkNetwork(ctx context.Context, n sandbox.Network) ([]rule, error) {
	switch n.Mode {
	case "", NetworkNone:
		if len(n.Allow) > 0 {
			return nil, fmt.Errorf("network allow list given with mode %q: use mode %q: %w", n.Mode, NetworkAllow, sandbox.ErrInvalid)
		}
		return nil, nil
	case NetworkInternet:
		if len(n.Allow) > 0 {
			return nil, fmt.Errorf("network allow list given with mode internet: internet reaches every public address; use mode allow to list what may be reached: %w", sandbox.ErrInvalid)
		}
		return nil, nil
	case NetworkAllow:
		if len(n.Allow) == 0 {
			return nil, fmt.Errorf("network mode allow needs an allow list (CIDRs or host:port): %w", sandbox.ErrInvalid)
		}
	default:
		return nil, fmt.Errorf("network mode %q: want none (no egress, the default), internet (public addresses) or allow (only the allow list): %w", n.Mode, sandbox.ErrInvalid)
	}
	allow, err := sbutil.ParseAllow(ctx, n.Allow, r.allowable)
	if err != nil {
		return nil, err
	}
	out := make([]rule, len(allow))
	for i, a := range allow {
		out[i] = rule{net: a.Net, port: a.Port}
	}
	return out, nil
}

// allowable says why an allow list may not name p (nil if it may).
func (r *Runtime) allowable(p netip.Prefix) error {
	if p.Overlaps(metadata) {
		return fmt.Errorf("reaches into %s, link-local space where cloud metadata is: sandboxes never reach it", metadata)
	}
	for _, a := range r.cfg.AllowPrivate {
		if a.Bits() <= p.Bits() && a.Contains(p.Addr()) {
			return nil
		}
	}
	const operator = "which sandboxes reach only where the operator allows it (cove serve --network-allow-private)"
	for _, c := range r.cfg.ClusterCIDRs {
		if p.Overlaps(c) {
			return fmt.Errorf("reaches into %s, the cluster's pod or service network, %s", c, operator)
		}
	}
	for _, b := range blocked {
		if p.Overlaps(b.net) {
			return fmt.Errorf("reaches into %s, %s, %s", b.net, b.what, operator)
		}
	}
	return nil
}

// exceptions are the ranges an "internet" policy's 0.0.0.0/0 leaves
// out: every blocked range, link-local, the cluster's own networks.
func (r *Runtime) exceptions() []string {
	out := []string{metadata.String()}
	for _, b := range blocked {
		out = append(out, b.net.String())
	}
	for _, c := range r.cfg.ClusterCIDRs {
		if c.Addr().Is4() {
			out = append(out, c.String())
		}
	}
	return out
}

// networkPolicy is the sandbox's NetworkPolicy: its pod takes ingress
// only on the daemon's port, and only from outside the sandboxes (the
// Cove server, in or out of the cluster); egress is denied but for what
// the mode allows.
func (r *Runtime) networkPolicy(rec *record, rules []rule) *networkingv1.NetworkPolicy {
	port := intstr.FromInt32(int32(r.cfg.GuestPort))
	tcp := corev1.ProtocolTCP
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: r.meta(rec, objName(rec.ID)),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{LabelSandbox: rec.ID}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}},
				From: []networkingv1.NetworkPolicyPeer{
					// Pods that are not sandboxes, in any namespace.
					{NamespaceSelector: &metav1.LabelSelector{}, PodSelector: &metav1.LabelSelector{
						MatchExpressions: []metav1.LabelSelectorRequirement{{Key: LabelSandbox, Operator: metav1.LabelSelectorOpDoesNotExist}}}},
					// Anything outside the cluster's networks (a node, a
					// server outside the cluster).
					{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: r.clusterCIDRs()}},
				},
			}},
			Egress: []networkingv1.NetworkPolicyEgressRule{},
		},
	}
	switch rec.Spec.Network.Mode {
	case NetworkInternet:
		np.Spec.Egress = append(np.Spec.Egress, dnsRule(),
			networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: r.exceptions()}}}})
	case NetworkAllow:
		np.Spec.Egress = append(np.Spec.Egress, dnsRule())
		for _, ru := range rules {
			er := networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: ru.net.String()}}}}
			if ru.port != 0 {
				p := intstr.FromInt32(int32(ru.port))
				udp := corev1.ProtocolUDP
				er.Ports = []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &p}, {Protocol: &udp, Port: &p}}
			}
			np.Spec.Egress = append(np.Spec.Egress, er)
		}
	}
	return np
}

func (r *Runtime) clusterCIDRs() []string {
	var out []string
	for _, c := range r.cfg.ClusterCIDRs {
		if c.Addr().Is4() {
			out = append(out, c.String())
		}
	}
	return out
}

// dnsRule lets a networked sandbox ask the cluster's DNS (pods labelled
// k8s-app=kube-dns in kube-system) on port 53.
func dnsRule() networkingv1.NetworkPolicyEgressRule {
	p := intstr.FromInt32(53)
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	return networkingv1.NetworkPolicyEgressRule{
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &p}, {Protocol: &tcp, Port: &p}},
		To: []networkingv1.NetworkPolicyPeer{{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "kube-system"}},
			PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-dns"}},
		}},
	}
}
