package local

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/local/internal/sbdir"
	"github.com/cove-sandbox/cove/template"
)

// Sandbox networks. A sandbox's network namespace has only loopback
// unless its Spec.Network asks for more:
//
//   - "internet": egress to public addresses. The host itself, private
//     ranges (RFC 1918, CGNAT), link-local (cloud metadata at
//     169.254.169.254), loopback and multicast stay unreachable; so do
//     other sandboxes. The host's resolvers are reachable on port 53.
//   - "allow": egress only to Network.Allow (CIDRs or addresses, with an
//     optional port; host names are resolved when the sandbox is made),
//     plus the resolvers.
//
// How: each networked sandbox gets a /30 of NetworkRange and a veth pair;
// the supervisor creates the pair in the host's namespace and moves one
// end into the sandbox's, whose pid 1 renames it eth0, addresses it and
// routes through the host end before its daemon serves (so a sandbox
// answers only once its network works). Traffic is NATed out of the host;
// an nftables table "cove" holds the policy: one base ruleset shared by
// all sandboxes and each sandbox's rules tagged with its id, removed when
// it stops. IPv4 only: no IPv6 address or route is given to a sandbox, so
// nothing leaves by v6. The pair dies with the sandbox's namespace; the
// rules are removed by its supervisor, or by delete after a crash.
//
// Enabling egress turns on the host's IPv4 forwarding
// (net.ipv4.ip_forward), which the NAT needs; the "cove" table forwards
// only sandbox traffic, but a host with other interfaces that must not
// route between them should say so in its own firewall.

// Network modes of Spec.Network.Mode.
const (
	NetworkNone     = sbdir.NetworkNone
	NetworkInternet = sbdir.NetworkInternet
	NetworkAllow    = sbdir.NetworkAllow
)

// DefaultNetworkRange is where sandboxes' /30s come from: 16,384 of them.
var DefaultNetworkRange = netip.MustParsePrefix("10.213.0.0/16")

// netConfig is a networked sandbox's network, fixed when it is made
// (sbdir.Net: the supervisor sets up its host side, pid 1 its sandbox
// side).
type netConfig = sbdir.Net

// allowRule lets a sandbox reach Net, on Port (TCP and UDP) when set.
type allowRule = sbdir.AllowRule

// parseAllow reads Network.Allow entries: "203.0.113.7", "203.0.113.0/24",
// "203.0.113.7:443", "example.com:443" (resolved now, every IPv4 address).
func parseAllow(ctx context.Context, entries []string) ([]allowRule, error) {
	var out []allowRule
	for _, e := range entries {
		host, port := e, ""
		if h, p, err := net.SplitHostPort(e); err == nil {
			host, port = h, p
		}
		var pn uint16
		if port != "" {
			n, err := strconv.ParseUint(port, 10, 16)
			if err != nil || n == 0 {
				return nil, fmt.Errorf("network allow %q: port %q is not 1-65535: %w", e, port, sandbox.ErrInvalid)
			}
			pn = uint16(n)
		}
		if p, err := netip.ParsePrefix(host); err == nil {
			if !p.Addr().Is4() {
				return nil, fmt.Errorf("network allow %q: only IPv4 is routed to sandboxes: %w", e, sandbox.ErrInvalid)
			}
			out = append(out, allowRule{Net: p.Masked(), Port: pn})
			continue
		}
		if a, err := netip.ParseAddr(host); err == nil {
			if !a.Is4() {
				return nil, fmt.Errorf("network allow %q: only IPv4 is routed to sandboxes: %w", e, sandbox.ErrInvalid)
			}
			out = append(out, allowRule{Net: netip.PrefixFrom(a, 32), Port: pn})
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		addrs, err := net.DefaultResolver.LookupNetIP(rctx, "ip4", host)
		cancel()
		if err != nil || len(addrs) == 0 {
			return nil, fmt.Errorf("network allow %q: %q does not resolve to an IPv4 address here (%v); give an address or CIDR: %w", e, host, err, sandbox.ErrInvalid)
		}
		for _, a := range addrs {
			out = append(out, allowRule{Net: netip.PrefixFrom(a.Unmap(), 32), Port: pn})
		}
	}
	return out, nil
}

// checkNetwork checks a spec's network and resolves its allow list.
func checkNetwork(ctx context.Context, n sandbox.Network) ([]allowRule, error) {
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
	return parseAllow(ctx, n.Allow)
}

// allocNetwork allocates a networked sandbox's /30 and interface names.
// The caller holds the network lock (sbdir.LockNetwork) until the state naming
// the allocation is written.
func (r *Runtime) allocNetwork(id, mode string, allow []allowRule) (*netConfig, error) {
	rng := r.cfg.NetworkRange
	if !rng.IsValid() {
		rng = DefaultNetworkRange
	}
	used := map[int]bool{}
	entries, _ := os.ReadDir(r.cfg.Dir)
	for _, e := range entries {
		if st, err := sbdir.Read(filepath.Join(r.cfg.Dir, e.Name())); err == nil && st.Init.Net != nil {
			used[st.Init.Net.Index] = true
		}
	}
	slots := 1 << (32 - rng.Bits() - 2)
	idx := -1
	for i := range slots {
		if !used[i] {
			idx = i
			break
		}
	}
	if idx < 0 {
		return nil, fmt.Errorf("all %d sandbox networks of %s are in use: delete sandboxes with a network, or give the runtime a larger range: %w", slots, rng, sandbox.ErrLimit)
	}
	base := binary.BigEndian.Uint32(rng.Masked().Addr().AsSlice()) + uint32(idx)*4
	ip := func(n uint32) netip.Addr {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], n)
		return netip.AddrFrom4(b)
	}
	tag := strings.TrimPrefix(id, "sb-")
	if len(tag) > 12 {
		tag = tag[:12]
	}
	return &netConfig{
		Mode: mode, Index: idx, HostIf: "cv" + tag, PeerIf: "cp" + tag,
		Gateway: netip.PrefixFrom(ip(base+1), 30), Addr: netip.PrefixFrom(ip(base+2), 30), Range: rng.Masked(),
		Allow: allow, DNS: template.Nameservers(),
	}, nil
}
