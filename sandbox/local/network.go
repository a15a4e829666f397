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

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/sandbox"
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
	NetworkNone     = "none"
	NetworkInternet = "internet"
	NetworkAllow    = "allow"
)

// DefaultNetworkRange is where sandboxes' /30s come from: 16,384 of them.
var DefaultNetworkRange = netip.MustParsePrefix("10.213.0.0/16")

// netConfig is a networked sandbox's network, fixed when it is made.
type netConfig struct {
	Mode  string `json:"mode"`
	Index int    `json:"index"`
	// HostIf is the host end of the veth pair; PeerIf the sandbox end
	// until pid 1 renames it eth0.
	HostIf  string       `json:"host_if"`
	PeerIf  string       `json:"peer_if"`
	Gateway netip.Prefix `json:"gateway"` // host end
	Addr    netip.Prefix `json:"addr"`    // sandbox end
	Range   netip.Prefix `json:"range"`
	Allow   []allowRule  `json:"allow,omitempty"`
	DNS     []netip.Addr `json:"dns,omitempty"`
}

// allowRule lets a sandbox reach Net, on Port (TCP and UDP) when set.
type allowRule struct {
	Net  netip.Prefix `json:"net"`
	Port uint16       `json:"port,omitempty"`
}

// blockedRanges are never reached in internet mode.
var blockedRanges = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("240.0.0.0/4"),
}

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
// The caller holds the network lock (lockNetwork) until the state naming
// the allocation is written.
func (r *Runtime) allocNetwork(id, mode string, allow []allowRule) (*netConfig, error) {
	rng := r.cfg.NetworkRange
	if !rng.IsValid() {
		rng = DefaultNetworkRange
	}
	used := map[int]bool{}
	entries, _ := os.ReadDir(r.cfg.Dir)
	for _, e := range entries {
		if st, err := readState(filepath.Join(r.cfg.Dir, e.Name())); err == nil && st.Init.Net != nil {
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

// lockNetwork serialises network allocations and ruleset changes of all
// processes using this runtime directory.
func lockNetwork(runtimeDir string) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(runtimeDir, ".net.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("locking the sandbox networks: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking the sandbox networks: %w", err)
	}
	return func() { f.Close() }, nil
}

// hostNetUp is the supervisor's part: the veth pair, with the sandbox end
// moved into pid's network namespace, and the sandbox's rules.
func hostNetUp(runtimeDir, id string, n *netConfig, pid int) error {
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1\n"), 0o644); err != nil {
		return fmt.Errorf("turning on IPv4 forwarding for the sandbox's egress: %w", err)
	}
	if old, err := netlink.LinkByName(n.HostIf); err == nil {
		netlink.LinkDel(old)
	}
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: n.HostIf}, PeerName: n.PeerIf}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("creating the sandbox's network interface %s: %w", n.HostIf, err)
	}
	fail := func(what string, err error) error {
		netlink.LinkDel(veth)
		return fmt.Errorf("%s: %w", what, err)
	}
	peer, err := netlink.LinkByName(n.PeerIf)
	if err != nil {
		return fail("finding the sandbox end of the network pair", err)
	}
	if err := netlink.LinkSetNsPid(peer, pid); err != nil {
		return fail("moving the network interface into the sandbox", err)
	}
	host, err := netlink.LinkByName(n.HostIf)
	if err != nil {
		return fail("finding the host end of the network pair", err)
	}
	if err := netlink.AddrAdd(host, &netlink.Addr{IPNet: ipNet(n.Gateway)}); err != nil {
		return fail("addressing the host end of the network pair", err)
	}
	if err := netlink.LinkSetUp(host); err != nil {
		return fail("bringing up the host end of the network pair", err)
	}
	unlock, err := lockNetwork(runtimeDir)
	if err != nil {
		return fail("locking the firewall", err)
	}
	defer unlock()
	if err := setRules(id, n); err != nil {
		return fail("setting the sandbox's firewall rules", err)
	}
	return nil
}

// hostNetDown removes what hostNetUp made; it is safe to call when some or
// all of it is gone.
func hostNetDown(runtimeDir, id string, n *netConfig) error {
	if l, err := netlink.LinkByName(n.HostIf); err == nil {
		netlink.LinkDel(l)
	}
	unlock, err := lockNetwork(runtimeDir)
	if err != nil {
		return err
	}
	defer unlock()
	return setRules(id, nil)
}

// sandboxNetUp is pid 1's part, in the sandbox's namespace: wait for the
// interface the supervisor moves in, then name, address and route it.
func sandboxNetUp(n *netConfig) error {
	deadline := time.Now().Add(10 * time.Second)
	var link netlink.Link
	for {
		var err error
		if link, err = netlink.LinkByName(n.PeerIf); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the supervisor did not hand over the network interface %s within 10s", n.PeerIf)
		}
		time.Sleep(200 * time.Microsecond)
	}
	if err := netlink.LinkSetName(link, "eth0"); err != nil {
		return fmt.Errorf("naming eth0: %w", err)
	}
	if err := netlink.AddrAdd(link, &netlink.Addr{IPNet: ipNet(n.Addr)}); err != nil {
		return fmt.Errorf("addressing eth0: %w", err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("bringing up eth0: %w", err)
	}
	gw := n.Gateway.Addr().AsSlice()
	if err := netlink.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Gw: net.IP(gw)}); err != nil {
		return fmt.Errorf("routing through the host: %w", err)
	}
	return nil
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), 32)}
}

// ---- the nftables ruleset ----
//
//	table ip cove {
//	  chain forward { type filter hook forward priority filter; policy accept;
//	    ct state established,related accept
//	    iifname "cv*" oifname "cv*" reject  # sandboxes never reach each other
//	    oifname "cv*" drop            # nothing starts a connection into a sandbox
//	    iifname "cv*" jump sandboxes
//	    iifname "cv*" reject          # a sandbox without rules reaches nothing
//	  }
//	  chain sandboxes { ...each sandbox's rules, tagged with its id... }
//	  chain input { type filter hook input priority filter; policy accept;
//	    iifname "cv*" ct state established,related accept
//	    iifname "cv*" reject          # the host itself is out of reach
//	  }
//	  chain postrouting { type nat hook postrouting priority srcnat;
//	    ip saddr RANGE oifname != "cv*" masquerade
//	  }
//	}

var (
	coveTable     = &nftables.Table{Name: "cove", Family: nftables.TableFamilyIPv4}
	sandboxChain  = &nftables.Chain{Name: "sandboxes", Table: coveTable}
	ifPrefix      = []byte("cv")
	tagPrefix     = "cove-sandbox:"
	establishedCt = binary.NativeEndian.AppendUint32(nil, expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED)
)

// setRules replaces sandbox id's rules with those of n (none when nil),
// creating the base ruleset first if it is missing. The caller holds the
// network lock.
func setRules(id string, n *netConfig) error {
	c, err := nftables.New()
	if err != nil {
		return err
	}
	if err := ensureBase(c, n); err != nil {
		return err
	}
	tag := []byte(tagPrefix + id)
	rules, err := c.GetRules(coveTable, sandboxChain)
	if err != nil {
		return err
	}
	for _, rl := range rules {
		if string(rl.UserData) == string(tag) {
			if err := c.DelRule(rl); err != nil {
				return err
			}
		}
	}
	if n != nil {
		add := func(exprs ...expr.Any) {
			c.AddRule(&nftables.Rule{Table: coveTable, Chain: sandboxChain, UserData: tag,
				Exprs: append(matchIf(expr.MetaKeyIIFNAME, n.HostIf), exprs...)})
		}
		for _, ns := range n.DNS {
			for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
				add(append(append(matchDst(netip.PrefixFrom(ns, 32)), matchPort(proto, 53)...), acceptVerdict())...)
			}
		}
		switch n.Mode {
		case NetworkInternet:
			for _, b := range blockedRanges {
				add(append(matchDst(b), refuse()...)...)
			}
			add(acceptVerdict())
		case NetworkAllow:
			for _, a := range n.Allow {
				if a.Port == 0 {
					add(append(matchDst(a.Net), acceptVerdict())...)
					continue
				}
				for _, proto := range []byte{unix.IPPROTO_TCP, unix.IPPROTO_UDP} {
					add(append(append(matchDst(a.Net), matchPort(proto, a.Port)...), acceptVerdict())...)
				}
			}
			add(refuse()...)
		}
	}
	return c.Flush()
}

// baseVersion tags the base ruleset; a host holding another version
// (an older cove's) has its base chains rebuilt in place, the sandboxes'
// own rules kept.
const baseVersion = "cove-base:2"

// ensureBase makes (or brings up to date) the cove table's base chains.
func ensureBase(c *nftables.Conn, n *netConfig) error {
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyIPv4)
	if err != nil {
		return err
	}
	var fwdChain *nftables.Chain
	for _, ch := range chains {
		if ch.Table.Name == coveTable.Name && ch.Name == "forward" {
			fwdChain = ch
		}
	}
	if fwdChain != nil {
		rules, err := c.GetRules(coveTable, fwdChain)
		if err != nil {
			return err
		}
		if len(rules) > 0 && string(rules[0].UserData) == baseVersion {
			return nil
		}
	}
	if n == nil {
		return nil // nothing to remove from a ruleset that is not there
	}
	accept := nftables.ChainPolicyAccept
	c.AddTable(coveTable)
	c.AddChain(sandboxChain)
	fwd := c.AddChain(&nftables.Chain{Name: "forward", Table: coveTable, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	in := c.AddChain(&nftables.Chain{Name: "input", Table: coveTable, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	nat := c.AddChain(&nftables.Chain{Name: "postrouting", Table: coveTable, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource})
	for _, ch := range []*nftables.Chain{fwd, in, nat} {
		c.FlushChain(ch)
	}
	rule := func(ch *nftables.Chain, exprs ...expr.Any) {
		c.AddRule(&nftables.Rule{Table: coveTable, Chain: ch, Exprs: exprs})
	}
	c.AddRule(&nftables.Rule{Table: coveTable, Chain: fwd, UserData: []byte(baseVersion), Exprs: append(matchEstablished(), acceptVerdict())})
	rule(fwd, append(append(matchIf(expr.MetaKeyIIFNAME, ""), matchIf(expr.MetaKeyOIFNAME, "")...), refuse()...)...)
	rule(fwd, append(matchIf(expr.MetaKeyOIFNAME, ""), dropVerdict())...)
	rule(fwd, append(matchIf(expr.MetaKeyIIFNAME, ""), &expr.Verdict{Kind: expr.VerdictJump, Chain: sandboxChain.Name})...)
	rule(fwd, append(matchIf(expr.MetaKeyIIFNAME, ""), refuse()...)...)
	rule(in, append(append(matchIf(expr.MetaKeyIIFNAME, ""), matchEstablished()...), acceptVerdict())...)
	rule(in, append(matchIf(expr.MetaKeyIIFNAME, ""), refuse()...)...)
	masq := append(matchSrc(n.Range), &expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: ifPrefix}, &expr.Masq{})
	rule(nat, masq...)
	return nil
}

// matchIf matches an interface name: exactly name, or any sandbox's
// ("cv" prefix) when name is "".
func matchIf(key expr.MetaKey, name string) []expr.Any {
	data := ifPrefix
	if name != "" {
		data = make([]byte, unix.IFNAMSIZ)
		copy(data, name)
	}
	return []expr.Any{&expr.Meta{Key: key, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: data}}
}

func matchAddr(offset uint32, p netip.Prefix) []expr.Any {
	mask := net.CIDRMask(p.Bits(), 32)
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: p.Masked().Addr().AsSlice()},
	}
}

func matchDst(p netip.Prefix) []expr.Any { return matchAddr(16, p) }
func matchSrc(p netip.Prefix) []expr.Any { return matchAddr(12, p) }

func matchPort(proto byte, port uint16) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binary.BigEndian.AppendUint16(nil, port)},
	}
}

func matchEstablished() []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: establishedCt, Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
	}
}

// refuse rejects a sandbox's packet with ICMP "administratively
// prohibited": its connect fails at once (EHOSTUNREACH) instead of
// hanging until a timeout, which is what an agent needs to move on.
func refuse() []expr.Any {
	return []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_ICMP_UNREACH, Code: 13}}
}

func acceptVerdict() expr.Any { return &expr.Verdict{Kind: expr.VerdictAccept} }
func dropVerdict() expr.Any   { return &expr.Verdict{Kind: expr.VerdictDrop} }
