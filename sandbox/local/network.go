package local

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/internal/sbutil"
	"github.com/cove-sandbox/cove/sandbox/local/internal/host"
	"github.com/cove-sandbox/cove/sandbox/local/internal/sbdir"
	"github.com/cove-sandbox/cove/template"
)

// Sandbox networks. A sandbox's network namespace has only loopback
// unless its Spec.Network asks for more:
//
//   - "internet": egress to public addresses. The host itself and the
//     networks its interfaces are on (whatever their addresses), private
//     ranges (RFC 1918, CGNAT), link-local and the clouds' metadata
//     endpoints (169.254.169.254 and the like), loopback and multicast
//     stay unreachable; so do other sandboxes. The host's resolvers are
//     reachable on port 53.
//   - "allow": egress only to Network.Allow (CIDRs or addresses, with an
//     optional port; host names are resolved when the sandbox is made),
//     plus the resolvers. An entry may not name cloud metadata or the
//     host's own addresses, ever, nor the ranges internet mode blocks
//     (private ranges, the host's networks, ...) unless the operator
//     lists them in Config.NetworkAllowPrivate: create refuses it with
//     ErrInvalid, naming the entry.
//
// How: each networked sandbox gets a veth pair and a /30 of
// NetworkRange. The /30 is picked when the sandbox starts, host-wide:
// under a lock every Cove install on the host shares (sbdir.NetLockPath,
// not the state directory: the CLI's and cove serve's differ), the
// supervisor takes the first /30 that overlaps no address or route on
// the host, and the address it then puts on the host end is what marks
// the /30 taken. The kernel is the registry: a stopped sandbox holds no
// subnet (it may get another when it resumes), and nothing is left to
// release after a crash, since the pair dies with the sandbox's network
// namespace. The supervisor configures both ends, the sandbox's as eth0;
// pid 1 waits for eth0's default route before its daemon serves (so a
// sandbox answers only once its network works). Traffic is NATed out of
// the host; an nftables table "ip cove" holds the policy: one base
// ruleset shared by all sandboxes, the host's own networks (rewritten at
// every sandbox start and stop), and each sandbox's rules tagged with its
// id, removed when it stops.
//
// IPv4 only. IPv6 is off on both ends of every pair (disable_ipv6, set
// before the ends exist or come up: no address, not even link-local) and
// a table "ip6 cove" drops any IPv6 packet from, to or through a sandbox
// interface, so nothing leaves by v6 even if a sandbox turned it back on
// (it cannot: /proc/sys is read-only inside and CAP_NET_ADMIN is gone).
// Loopback keeps ::1, which never leaves the sandbox. The pair dies with
// the sandbox's namespace; the rules are removed by its supervisor, or by
// delete after a crash.
//
// Egress needs the host's IPv4 forwarding (net.ipv4.ip_forward): the
// first networked sandbox turns it on and the end of the host's last one
// puts back the value found (package host says how). The "cove" table
// forwards only sandbox traffic, but while forwarding is on a host with
// other interfaces that must not route between them should say so in its
// own firewall.

// Network modes of Spec.Network.Mode.
const (
	NetworkNone     = sbdir.NetworkNone
	NetworkInternet = sbdir.NetworkInternet
	NetworkAllow    = sbdir.NetworkAllow
)

// DefaultNetworkRange is where sandboxes' /30s come from: 16,384 of
// them, shared by every Cove install on the host.
var DefaultNetworkRange = netip.MustParsePrefix("10.213.0.0/16")

// netConfig is a networked sandbox's network, fixed when it is made
// (sbdir.Net: the supervisor sets up its host side, pid 1 its sandbox
// side).
type netConfig = sbdir.Net

// allowRule lets a sandbox reach Net, on Port (TCP and UDP) when set.
type allowRule = sbdir.AllowRule

// checkNetwork checks a spec's network and resolves its allow list.
func (r *Runtime) checkNetwork(ctx context.Context, n sandbox.Network) ([]allowRule, error) {
	switch n.Mode {
	case "", NetworkNone:
		if len(n.Allow) > 0 {
			return nil, fmt.Errorf("network allow list given with mode %q: use mode %q: %w", n.Mode, NetworkAllow, sandbox.ErrInvalid)
		}
		return nil, nil
	case NetworkInternet, NetworkAllow:
	default:
		return nil, fmt.Errorf("network mode %q: want none (loopback only, the default), internet (public addresses) or allow (only the allow list): %w", n.Mode, sandbox.ErrInvalid)
	}
	if n.Mode == NetworkInternet && len(n.Allow) > 0 {
		return nil, fmt.Errorf("network allow list given with mode internet: internet reaches every public address; use mode allow to list what may be reached: %w", sandbox.ErrInvalid)
	}
	if n.Mode == NetworkAllow && len(n.Allow) == 0 {
		return nil, fmt.Errorf("network mode allow needs an allow list (CIDRs or host:port): %w", sandbox.ErrInvalid)
	}
	if len(n.Allow) == 0 {
		return nil, nil
	}
	// Read once per create: what the host's interfaces hold now.
	hostAddrs, hostNets, err := host.Addresses()
	if err != nil {
		return nil, fmt.Errorf("checking the network allow list: %w", err)
	}
	allow, err := sbutil.ParseAllow(ctx, n.Allow, func(p netip.Prefix) error {
		return r.allowable(p, hostAddrs, hostNets)
	})
	if err != nil {
		return nil, err
	}
	rules := make([]allowRule, len(allow))
	for i, a := range allow {
		rules[i] = allowRule{Net: a.Net, Port: a.Port}
	}
	return rules, nil
}

// allowable says why an allow list may not name p (nil if it may): the
// error completes "p ...".
func (r *Runtime) allowable(p netip.Prefix, hostAddrs []netip.Addr, hostNets []netip.Prefix) error {
	in, includes := "reaches into", "includes"
	if p.IsSingleIP() {
		in, includes = "is in", "is"
	}
	for _, m := range host.Metadata {
		if p.Overlaps(m.Net) {
			return fmt.Errorf("%s %s, %s: sandboxes never reach it", in, m.Net, m.What)
		}
	}
	for _, a := range hostAddrs {
		if p.Contains(a) {
			return fmt.Errorf("%s an address of this host: sandboxes never reach the host", includes)
		}
	}
	for _, a := range r.cfg.NetworkAllowPrivate {
		if a.Bits() <= p.Bits() && a.Contains(p.Addr()) {
			return nil
		}
	}
	const operator = "which sandboxes reach only where the operator allows it (cove serve --network-allow-private; COVE_NETWORK_ALLOW_PRIVATE for the cove CLI)"
	for _, b := range host.Blocked {
		if p.Overlaps(b.Net) {
			return fmt.Errorf("%s %s, %s, %s", in, b.Net, b.What, operator)
		}
	}
	for _, h := range hostNets {
		if p.Overlaps(h) {
			return fmt.Errorf("%s a network this host is on, %s", in, operator)
		}
	}
	return nil
}

// ParseNetworks reads a comma-separated list of IPv4 CIDRs or addresses
// ("10.1.0.0/16,192.168.5.7"), the form of Config.NetworkAllowPrivate in
// flags and environment variables; "" is none.
func ParseNetworks(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			a, aerr := netip.ParseAddr(f)
			if aerr != nil {
				return nil, fmt.Errorf("%q is not an IPv4 CIDR or address: %w", f, sandbox.ErrInvalid)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// checkNetworkConfig vets the operator's network settings at New.
func checkNetworkConfig(cfg *Config) error {
	if r := cfg.NetworkRange; r.IsValid() && (!r.Addr().Is4() || r.Bits() > 30) {
		return fmt.Errorf("network range %s: want an IPv4 range of /30 or larger: %w", r, sandbox.ErrInvalid)
	}
	for _, p := range cfg.NetworkAllowPrivate {
		if !p.Addr().Is4() {
			return fmt.Errorf("network allow-private %s: only IPv4 is routed to sandboxes: %w", p, sandbox.ErrInvalid)
		}
		for _, m := range host.Metadata {
			if p.Overlaps(m.Net) {
				return fmt.Errorf("network allow-private %s reaches into %s, %s: no setting lets sandboxes reach it: %w", p, m.Net, m.What, sandbox.ErrInvalid)
			}
		}
	}
	return nil
}

// netPlan is a networked sandbox's network as fixed when it is made:
// its policy and interface names. Its /30 is picked at every start
// (host.NetUp).
func (r *Runtime) netPlan(id, mode string, allow []allowRule) *netConfig {
	rng := r.cfg.NetworkRange
	if !rng.IsValid() {
		rng = DefaultNetworkRange
	}
	tag := strings.TrimPrefix(id, "sb-")
	if len(tag) > 12 {
		tag = tag[:12]
	}
	return &netConfig{
		Mode: mode, HostIf: "cv" + tag, PeerIf: "cp" + tag, Range: rng.Masked(),
		Allow: allow, DNS: template.Nameservers(),
	}
}
