package host

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/sandbox/local/internal/sbdir"
)

// The host side of a sandbox's network (package local's network.go says
// what the modes allow and how): the veth pair and the nftables rules.

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

// NetUp is the supervisor's part: the veth pair, with the sandbox end
// moved into pid's network namespace, and the sandbox's rules.
func NetUp(runtimeDir, id string, n *sbdir.Net, pid int) error {
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
	if err := netlink.AddrAdd(host, &netlink.Addr{IPNet: sbdir.IPNet(n.Gateway)}); err != nil {
		return fail("addressing the host end of the network pair", err)
	}
	if err := netlink.LinkSetUp(host); err != nil {
		return fail("bringing up the host end of the network pair", err)
	}
	unlock, err := sbdir.LockNetwork(runtimeDir)
	if err != nil {
		return fail("locking the firewall", err)
	}
	defer unlock()
	if err := setRules(id, n); err != nil {
		return fail("setting the sandbox's firewall rules", err)
	}
	return nil
}

// NetDown removes what NetUp made; it is safe to call when some or
// all of it is gone.
func NetDown(runtimeDir, id string, n *sbdir.Net) error {
	if l, err := netlink.LinkByName(n.HostIf); err == nil {
		netlink.LinkDel(l)
	}
	unlock, err := sbdir.LockNetwork(runtimeDir)
	if err != nil {
		return err
	}
	defer unlock()
	return setRules(id, nil)
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
	// Table is the "cove" table; SandboxChain holds each sandbox's rules,
	// each rule's UserData its sandbox's Tag.
	Table         = &nftables.Table{Name: "cove", Family: nftables.TableFamilyIPv4}
	SandboxChain  = &nftables.Chain{Name: "sandboxes", Table: Table}
	ifPrefix      = []byte("cv")
	establishedCt = binary.NativeEndian.AppendUint32(nil, expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED)
)

// Tag marks the rules of sandbox id.
func Tag(id string) string { return "cove-sandbox:" + id }

// setRules replaces sandbox id's rules with those of n (none when nil),
// creating the base ruleset first if it is missing. The caller holds the
// network lock.
func setRules(id string, n *sbdir.Net) error {
	c, err := nftables.New()
	if err != nil {
		return err
	}
	if err := ensureBase(c, n); err != nil {
		return err
	}
	tag := []byte(Tag(id))
	rules, err := c.GetRules(Table, SandboxChain)
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
			c.AddRule(&nftables.Rule{Table: Table, Chain: SandboxChain, UserData: tag,
				Exprs: append(matchIf(expr.MetaKeyIIFNAME, n.HostIf), exprs...)})
		}
		for _, ns := range n.DNS {
			for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
				add(append(append(matchDst(netip.PrefixFrom(ns, 32)), matchPort(proto, 53)...), acceptVerdict())...)
			}
		}
		switch n.Mode {
		case sbdir.NetworkInternet:
			for _, b := range blockedRanges {
				add(append(matchDst(b), refuse()...)...)
			}
			add(acceptVerdict())
		case sbdir.NetworkAllow:
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
func ensureBase(c *nftables.Conn, n *sbdir.Net) error {
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyIPv4)
	if err != nil {
		return err
	}
	var fwdChain *nftables.Chain
	for _, ch := range chains {
		if ch.Table.Name == Table.Name && ch.Name == "forward" {
			fwdChain = ch
		}
	}
	if fwdChain != nil {
		rules, err := c.GetRules(Table, fwdChain)
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
	c.AddTable(Table)
	c.AddChain(SandboxChain)
	fwd := c.AddChain(&nftables.Chain{Name: "forward", Table: Table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	in := c.AddChain(&nftables.Chain{Name: "input", Table: Table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	nat := c.AddChain(&nftables.Chain{Name: "postrouting", Table: Table, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource})
	for _, ch := range []*nftables.Chain{fwd, in, nat} {
		c.FlushChain(ch)
	}
	rule := func(ch *nftables.Chain, exprs ...expr.Any) {
		c.AddRule(&nftables.Rule{Table: Table, Chain: ch, Exprs: exprs})
	}
	c.AddRule(&nftables.Rule{Table: Table, Chain: fwd, UserData: []byte(baseVersion), Exprs: append(matchEstablished(), acceptVerdict())})
	rule(fwd, append(append(matchIf(expr.MetaKeyIIFNAME, ""), matchIf(expr.MetaKeyOIFNAME, "")...), refuse()...)...)
	rule(fwd, append(matchIf(expr.MetaKeyOIFNAME, ""), dropVerdict())...)
	rule(fwd, append(matchIf(expr.MetaKeyIIFNAME, ""), &expr.Verdict{Kind: expr.VerdictJump, Chain: SandboxChain.Name})...)
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
