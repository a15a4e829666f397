package host

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/local/internal/sbdir"
)

// The host side of a sandbox's network (package local's network.go says
// what the modes allow and how): the sandbox's /30, picked host-wide at
// every start; the veth pair, configured on both ends by the supervisor;
// IPv6 off on both ends and dropped on the host; the nftables rules; and
// the host's IPv4 forwarding, on while any sandbox has a network.

// A Range is a block of addresses and why sandboxes do not reach it.
type Range struct {
	Net  netip.Prefix
	What string
}

// Metadata are the cloud providers' instance metadata and host
// endpoints: a sandbox never reaches them, in any mode, whatever the
// operator allows (their answers hold the machine's credentials).
var Metadata = []Range{
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local, where clouds serve instance metadata and credentials (169.254.169.254)"},
	{netip.MustParsePrefix("100.100.100.200/32"), "Alibaba Cloud's instance metadata service"},
	{netip.MustParsePrefix("168.63.129.16/32"), "Azure's host endpoint (WireServer)"},
}

// Blocked are the ranges internet mode never reaches beside Metadata and
// the host's own networks; an allow list may name them only where the
// operator allows (local.Config.NetworkAllowPrivate).
var Blocked = []Range{
	{netip.MustParsePrefix("0.0.0.0/8"), `"this network" (0.0.0.0/8), not routable`},
	{netip.MustParsePrefix("10.0.0.0/8"), "a private range (RFC 1918)"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared address space (carrier-grade NAT, RFC 6598)"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("172.16.0.0/12"), "a private range (RFC 1918)"},
	{netip.MustParsePrefix("192.168.0.0/16"), "a private range (RFC 1918)"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved (and broadcast)"},
}

// Addresses are the host's own IPv4 addresses, on every interface, and
// the networks its interfaces are on (with point-to-point peers), read
// from the kernel; the sandboxes' own interfaces and loopback are left
// out of the networks.
func Addresses() (addrs []netip.Addr, nets []netip.Prefix, err error) {
	return hostAddresses(func(l netlink.Link) bool {
		return isSandboxIf(l.Attrs().Name) || l.Attrs().Flags&net.FlagLoopback != 0
	})
}

// hostAddresses is Addresses leaving the networks of the links skip says
// out.
func hostAddresses(skip func(netlink.Link) bool) (addrs []netip.Addr, nets []netip.Prefix, err error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, nil, fmt.Errorf("listing the host's interfaces: %w", err)
	}
	list, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		return nil, nil, fmt.Errorf("listing the host's addresses: %w", err)
	}
	byIndex := map[int]netlink.Link{}
	for _, l := range links {
		byIndex[l.Attrs().Index] = l
	}
	seen := map[netip.Prefix]bool{}
	for _, a := range list {
		if p, ok := prefixOf(a.IPNet); ok {
			addrs = append(addrs, p.Addr())
		}
		if l, ok := byIndex[a.LinkIndex]; ok && skip(l) {
			continue
		}
		for _, ipn := range []*net.IPNet{a.IPNet, a.Peer} {
			p, ok := prefixOf(ipn)
			if !ok {
				continue
			}
			if p = p.Masked(); !seen[p] {
				seen[p] = true
				nets = append(nets, p)
			}
		}
	}
	return addrs, nets, nil
}

func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	a = a.Unmap()
	ones, bits := n.Mask.Size()
	if !a.Is4() || bits != 32 {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(a, ones), true
}

func isSandboxIf(name string) bool { return strings.HasPrefix(name, string(ifPrefix)) }

// NetUp is the supervisor's part, for the sandbox whose pid 1 is pid:
// it picks the sandbox's /30 host-wide, makes the veth pair with the
// sandbox end in pid's network namespace, sets the sandbox's rules and
// configures both ends (the sandbox's as eth0: address, default route
// through the host end; IPv6 off on both). pid 1 waits for the default
// route before its daemon serves. The /30 goes into n and into the
// sandbox's state (runtimeDir/id).
func NetUp(runtimeDir, id string, n *sbdir.Net, pid int) error {
	ns, err := netns.GetFromPid(pid)
	if err != nil {
		return fmt.Errorf("opening the sandbox's network namespace: %w", err)
	}
	defer ns.Close()
	return NetUpNS(runtimeDir, id, n, ns, false)
}

// NetUpNS is NetUp for the network namespace ns, which a gVisor
// sandbox's supervisor makes before runsc starts: gVisor's netstack
// takes the namespace's interfaces as they are when it boots.
// With keepAddr it takes the sandbox's last /30 again when that is free:
// a restored gVisor sandbox's netstack still has its old addresses.
func NetUpNS(runtimeDir, id string, n *sbdir.Net, ns netns.NsHandle, keepAddr bool) error {
	// The sandbox end is born in the sandbox's namespace and takes its
	// IPv6 defaults: off, so it never gets even a link-local address.
	// Loopback keeps ::1 (it never leaves the namespace, and programs
	// that listen on "localhost" may pick ::1).
	if err := inNetns(ns, func() error { return ipv6Off("default") }); err != nil {
		return fmt.Errorf("turning IPv6 off in the sandbox: %w", err)
	}
	unlock, err := sbdir.LockNetwork()
	if err != nil {
		return err
	}
	prefer := netip.Prefix{}
	if keepAddr {
		prefer = n.Addr
	}
	gw, addr, err := reserve(id, n, ns, prefer)
	unlock()
	if err == nil {
		// Recorded before the sandbox end is routed: from then on pid 1
		// may serve, and whoever sees the sandbox answer may look up its
		// address.
		_, err = sbdir.Update(filepath.Join(runtimeDir, id), func(s *sbdir.State) error {
			if s.Init.Net != nil {
				s.Init.Net.Gateway, s.Init.Net.Addr = gw, addr
			}
			return nil
		})
	}
	if err == nil {
		err = sandboxEnd(ns, n, gw, addr)
	}
	if err != nil {
		NetDown(runtimeDir, id, n)
		return err
	}
	n.Gateway, n.Addr = gw, addr
	return nil
}

// reserve is NetUp's part under the host-wide network lock: forwarding
// on, the first /30 of n.Range free on the host, the pair with its host
// end addressed (which is what makes the /30 taken for the next caller),
// and the sandbox's rules, all before either end is up, so no packet of
// the sandbox's passes unfiltered. On failure the caller undoes it
// (NetDown).
func reserve(id string, n *sbdir.Net, ns netns.NsHandle, prefer netip.Prefix) (gw, addr netip.Prefix, err error) {
	if err := forwardingOn(); err != nil {
		return gw, addr, err
	}
	if old, err := netlink.LinkByName(n.HostIf); err == nil {
		netlink.LinkDel(old) // left by a supervisor killed mid-start
	}
	if gw, addr, err = pickSubnet(n.Range, prefer); err != nil {
		return gw, addr, err
	}
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: n.HostIf}, PeerName: n.PeerIf, PeerNamespace: netlink.NsFd(int(ns))}
	if err := netlink.LinkAdd(veth); err != nil {
		return gw, addr, fmt.Errorf("creating the sandbox's network interface %s: %w", n.HostIf, err)
	}
	host, err := netlink.LinkByName(n.HostIf)
	if err != nil {
		return gw, addr, fmt.Errorf("finding the host end of the network pair: %w", err)
	}
	// Before the link is up, so the host end never has an IPv6 address.
	if err := ipv6Off(n.HostIf); err != nil {
		return gw, addr, fmt.Errorf("turning IPv6 off on the host end of the network pair: %w", err)
	}
	if err := netlink.AddrAdd(host, &netlink.Addr{IPNet: sbdir.IPNet(gw)}); err != nil {
		return gw, addr, fmt.Errorf("addressing the host end of the network pair: %w", err)
	}
	withAddr := *n
	withAddr.Addr = addr
	if err := setRules(id, &withAddr); err != nil {
		return gw, addr, fmt.Errorf("setting the sandbox's firewall rules: %w", err)
	}
	return gw, addr, nil
}

// sandboxEnd brings up the host end and configures the sandbox's, in
// its namespace: named eth0, IPv6 off, addressed, up, and the default
// route through the host end last (pid 1 waits for that route).
func sandboxEnd(ns netns.NsHandle, n *sbdir.Net, gw, addr netip.Prefix) error {
	host, err := netlink.LinkByName(n.HostIf)
	if err != nil {
		return fmt.Errorf("finding the host end of the network pair: %w", err)
	}
	if err := netlink.LinkSetUp(host); err != nil {
		return fmt.Errorf("bringing up the host end of the network pair: %w", err)
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("reaching the sandbox's network namespace: %w", err)
	}
	defer h.Close()
	peer, err := h.LinkByName(n.PeerIf)
	if err != nil {
		return fmt.Errorf("finding the sandbox end of the network pair: %w", err)
	}
	if err := h.LinkSetName(peer, "eth0"); err != nil {
		return fmt.Errorf("naming the sandbox's eth0: %w", err)
	}
	if err := inNetns(ns, func() error { return ipv6Off("eth0") }); err != nil {
		return fmt.Errorf("turning IPv6 off on the sandbox's eth0: %w", err)
	}
	if err := h.AddrAdd(peer, &netlink.Addr{IPNet: sbdir.IPNet(addr)}); err != nil {
		return fmt.Errorf("addressing the sandbox's eth0: %w", err)
	}
	if err := h.LinkSetUp(peer); err != nil {
		return fmt.Errorf("bringing up the sandbox's eth0: %w", err)
	}
	if err := h.RouteAdd(&netlink.Route{LinkIndex: peer.Attrs().Index, Gw: net.IP(gw.Addr().AsSlice())}); err != nil {
		return fmt.Errorf("routing the sandbox through the host: %w", err)
	}
	return nil
}

// inNetns runs fn on a thread in network namespace ns (files under
// /proc/sys/net are those of the opening thread's namespace), then puts
// the thread back. A thread that cannot go back stays locked, so it ends
// with its goroutine instead of returning to Go's pool in the wrong
// namespace; but the main thread cannot end (Go parks it for good), so
// going back is the rule: a main thread parked in a sandbox's namespace
// would make /proc/self/ns/net that namespace.
func inNetns(ns netns.NsHandle, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("reading the thread's network namespace: %w", err)
			return
		}
		defer orig.Close()
		if err := netns.Set(ns); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("entering the namespace: %w", err)
			return
		}
		err = fn()
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// ipv6Present says whether the kernel has IPv6 (it may be compiled out,
// or disabled at boot with ipv6.disable=1).
func ipv6Present() bool {
	_, err := os.Stat("/proc/sys/net/ipv6")
	return !errors.Is(err, os.ErrNotExist)
}

// ipv6Off turns IPv6 off on interface ifname ("default": interfaces made
// from now on) of the calling thread's network namespace. A kernel
// without IPv6 has nothing to turn off.
func ipv6Off(ifname string) error {
	if !ipv6Present() {
		return nil
	}
	return os.WriteFile("/proc/sys/net/ipv6/conf/"+ifname+"/disable_ipv6", []byte("1\n"), 0o644)
}

// pickSubnet picks the first /30 of rng that overlaps nothing on the
// host: no address of any interface (another Cove install's sandboxes,
// a LAN, a VPN) and no route. Routes covering the whole of rng are the
// exception: like the default route, they are the way out that the
// sandboxes' subnets are carved from. The caller holds the network lock
// until the gateway address is on the host end, which is what makes the
// /30 taken for the next caller.
func pickSubnet(rng, prefer netip.Prefix) (gw, addr netip.Prefix, err error) {
	rng = rng.Masked()
	if !rng.Addr().Is4() || rng.Bits() > 30 {
		return gw, addr, fmt.Errorf("sandbox network range %s: want an IPv4 range of /30 or larger: %w", rng, sandbox.ErrInvalid)
	}
	_, taken, err := hostAddresses(func(netlink.Link) bool { return false })
	if err != nil {
		return gw, addr, err
	}
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return gw, addr, fmt.Errorf("listing the host's routes: %w", err)
	}
	for _, r := range routes {
		if p, ok := prefixOf(r.Dst); ok && p.Bits() >= rng.Bits() {
			taken = append(taken, p.Masked())
		}
	}
	slots := 1 << (30 - rng.Bits())
	used := make([]bool, slots)
	base := binary.BigEndian.Uint32(rng.Addr().AsSlice())
	for _, p := range taken {
		if !p.Overlaps(rng) {
			continue
		}
		// The slots p covers: all of rng when p is larger.
		lo, hi := 0, slots-1
		if p.Bits() > rng.Bits() {
			start := binary.BigEndian.Uint32(p.Addr().AsSlice()) - base
			size := uint64(1) << (32 - p.Bits())
			lo = int(start / 4)
			hi = int((uint64(start) + size - 1) / 4)
		}
		for i := lo; i <= hi; i++ {
			used[i] = true
		}
	}
	slot := func(i int) (gw, addr netip.Prefix) {
		ip := func(n uint32) netip.Addr {
			var b [4]byte
			binary.BigEndian.PutUint32(b[:], base+uint32(i)*4+n)
			return netip.AddrFrom4(b)
		}
		return netip.PrefixFrom(ip(1), 30), netip.PrefixFrom(ip(2), 30)
	}
	if prefer.IsValid() && rng.Contains(prefer.Addr()) {
		if i := int((binary.BigEndian.Uint32(prefer.Addr().AsSlice()) - base) / 4); !used[i] {
			gw, addr = slot(i)
			return gw, addr, nil
		}
	}
	for i, u := range used {
		if !u {
			gw, addr = slot(i)
			return gw, addr, nil
		}
	}
	return gw, addr, fmt.Errorf("every /30 of the sandbox network range %s is in use on this host (by sandboxes, or by the host's own addresses and routes): stop networked sandboxes, or give the runtime another range: %w", rng, sandbox.ErrLimit)
}

// NetDown removes what NetUp made, under the host-wide network lock; it
// is safe to call when some or all of it is gone. When it removes the
// host's last sandbox interface it puts back the forwarding setting
// found before the first.
func NetDown(runtimeDir, id string, n *sbdir.Net) error {
	unlock, err := sbdir.LockNetwork()
	if err != nil {
		return err
	}
	defer unlock()
	return netDownLocked(id, n)
}

func netDownLocked(id string, n *sbdir.Net) error {
	if l, err := netlink.LinkByName(n.HostIf); err == nil {
		netlink.LinkDel(l)
	}
	err := setRules(id, nil)
	if ferr := forwardingRestore(); err == nil {
		err = ferr
	}
	return err
}

// ---- IPv4 forwarding ----
//
// The NAT needs net.ipv4.ip_forward, which is the host's (per network
// namespace). The first networked sandbox saves the value it finds in
// /run/cove/ip_forward.NETNS and turns forwarding on; the end of the
// last one (no "cv" interface left on the host, whichever install made
// them) writes the saved value back. A tool that turned forwarding on
// meanwhile (Docker, libvirt) finds it off again: such a host should
// set net.ipv4.ip_forward=1 at boot, and then Cove never changes it.

const ipForward = "/proc/sys/net/ipv4/ip_forward"

// forwardingSaved is where the forwarding setting of the calling
// thread's network namespace is saved: the namespace /proc/sys/net shows
// it. (Not /proc/self's: that is the main thread's, which need not be
// the caller's.)
func forwardingSaved() (string, error) {
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/thread-self/ns/net", &st); err != nil {
		return "", err
	}
	return filepath.Join(filepath.Dir(sbdir.NetLockPath), "ip_forward."+strconv.FormatUint(st.Ino, 10)), nil
}

// forwardingOn turns IPv4 forwarding on, saving the previous value
// unless a running sandbox saved it already. The caller holds the
// network lock.
func forwardingOn() error {
	saved, err := forwardingSaved()
	if err != nil {
		return fmt.Errorf("turning on IPv4 forwarding for the sandbox's egress: %w", err)
	}
	if _, err := os.Stat(saved); errors.Is(err, os.ErrNotExist) {
		was, err := os.ReadFile(ipForward)
		if err != nil {
			return fmt.Errorf("turning on IPv4 forwarding for the sandbox's egress: %w", err)
		}
		if err := os.WriteFile(saved, was, 0o600); err != nil {
			return fmt.Errorf("saving the host's IPv4 forwarding setting: %w", err)
		}
	}
	if err := os.WriteFile(ipForward, []byte("1\n"), 0o644); err != nil {
		return fmt.Errorf("turning on IPv4 forwarding for the sandbox's egress: %w", err)
	}
	return nil
}

// forwardingRestore writes back the saved forwarding setting when no
// sandbox interface is left. The caller holds the network lock.
func forwardingRestore() error {
	links, err := netlink.LinkList()
	if err != nil {
		return err
	}
	for _, l := range links {
		if isSandboxIf(l.Attrs().Name) {
			return nil
		}
	}
	saved, err := forwardingSaved()
	if err != nil {
		return err
	}
	was, err := os.ReadFile(saved)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	if err := os.WriteFile(ipForward, was, 0o644); err != nil {
		return fmt.Errorf("restoring the host's IPv4 forwarding setting: %w", err)
	}
	return os.Remove(saved)
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
//	  chain hostnets { ip daddr HOSTNET reject ... }  # the host's own networks,
//	                                                  # rewritten at every change
//	  chain input { type filter hook input priority filter; policy accept;
//	    iifname "cv*" ct state established,related accept
//	    iifname "cv*" reject          # the host itself is out of reach
//	  }
//	  chain postrouting { type nat hook postrouting priority srcnat;
//	    jump masquerade
//	  }
//	  chain masquerade { ip saddr ADDR oifname != "cv*" masquerade ... }  # each sandbox's, tagged
//	}
//	table ip6 cove {  # sandboxes have no IPv6; should one get it back, it reaches nothing
//	  chain input   { type filter hook input priority filter; iifname "cv*" drop }
//	  chain forward { type filter hook forward priority filter; iifname "cv*" drop; oifname "cv*" drop }
//	  chain output  { type filter hook output priority filter; oifname "cv*" drop }
//	}
//
// Internet mode's rules: the resolvers on port 53, then jump hostnets,
// then Metadata and Blocked refused, then accept. Allow mode's: the
// resolvers, the allow list, then refuse.

var (
	// Table is the "cove" table; SandboxChain holds each sandbox's rules,
	// each rule's UserData its sandbox's Tag (so do MasqChain's).
	Table        = &nftables.Table{Name: "cove", Family: nftables.TableFamilyIPv4}
	SandboxChain = &nftables.Chain{Name: "sandboxes", Table: Table}
	MasqChain    = &nftables.Chain{Name: "masquerade", Table: Table}
	// HostNetsChain refuses the host's own networks (Addresses).
	HostNetsChain = &nftables.Chain{Name: "hostnets", Table: Table}
	// Table6 drops IPv6 to, from and through sandbox interfaces.
	Table6        = &nftables.Table{Name: "cove", Family: nftables.TableFamilyIPv6}
	ifPrefix      = []byte("cv")
	establishedCt = binary.NativeEndian.AppendUint32(nil, expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED)
)

// Tag marks the rules of sandbox id.
func Tag(id string) string { return "cove-sandbox:" + id }

// setRules replaces sandbox id's rules with those of n (none when nil),
// creating the base ruleset first if it is missing, and rewrites the
// host's networks in the hostnets chain. The caller holds the network
// lock.
func setRules(id string, n *sbdir.Net) error {
	c, err := nftables.New()
	if err != nil {
		return err
	}
	if ok, err := ensureBase(c, n != nil); err != nil || !ok {
		return err // !ok: no ruleset, so no rules of id's to remove
	}
	tag := []byte(Tag(id))
	for _, ch := range []*nftables.Chain{SandboxChain, MasqChain} {
		rules, err := c.GetRules(Table, ch)
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
	}
	if err := hostNets(c); err != nil {
		return err
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
			add(&expr.Verdict{Kind: expr.VerdictJump, Chain: HostNetsChain.Name})
			for _, b := range append(append([]Range(nil), Metadata...), Blocked...) {
				add(append(matchDst(b.Net), refuse()...)...)
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
		c.AddRule(&nftables.Rule{Table: Table, Chain: MasqChain, UserData: tag,
			Exprs: append(matchSrc(netip.PrefixFrom(n.Addr.Addr(), 32)), &expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
				&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: ifPrefix}, &expr.Masq{})})
	}
	return c.Flush()
}

// hostNets rewrites the hostnets chain from the host's addresses now.
func hostNets(c *nftables.Conn) error {
	_, nets, err := Addresses()
	if err != nil {
		return err
	}
	c.FlushChain(HostNetsChain)
	for _, p := range nets {
		c.AddRule(&nftables.Rule{Table: Table, Chain: HostNetsChain, Exprs: append(matchDst(p), refuse()...)})
	}
	return nil
}

// baseVersion tags the base ruleset; a host holding another version
// (an older cove's) has its base chains rebuilt in place, the sandboxes'
// own rules kept.
const baseVersion = "cove-base:3"

// ensureBase makes (or brings up to date) the base chains of both cove
// tables when create is set, and says whether they are there.
func ensureBase(c *nftables.Conn, create bool) (bool, error) {
	current := func(t *nftables.Table) (bool, error) {
		chains, err := c.ListChainsOfTableFamily(t.Family)
		if err != nil {
			return false, err
		}
		for _, ch := range chains {
			if ch.Table.Name == t.Name && ch.Name == "forward" {
				rules, err := c.GetRules(t, ch)
				if err != nil {
					return false, err
				}
				return len(rules) > 0 && string(rules[0].UserData) == baseVersion, nil
			}
		}
		return false, nil
	}
	ok4, err := current(Table)
	if err != nil {
		return false, err
	}
	ok6 := !ipv6Present() // a kernel without IPv6 needs no v6 table
	if !ok6 {
		if ok6, err = current(Table6); err != nil {
			return false, err
		}
	}
	if ok4 && ok6 {
		return true, nil
	}
	if !create {
		return ok4, nil
	}
	accept := nftables.ChainPolicyAccept
	filter := func(t *nftables.Table, name string, hook *nftables.ChainHook) *nftables.Chain {
		ch := c.AddChain(&nftables.Chain{Name: name, Table: t, Type: nftables.ChainTypeFilter,
			Hooknum: hook, Priority: nftables.ChainPriorityFilter, Policy: &accept})
		c.FlushChain(ch)
		return ch
	}
	rule := func(t *nftables.Table, ch *nftables.Chain, exprs ...expr.Any) {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: exprs})
	}
	if !ok4 {
		legacy := legacyNAT(c)
		c.AddTable(Table)
		c.AddChain(SandboxChain)
		c.AddChain(MasqChain)
		c.AddChain(HostNetsChain)
		for _, exprs := range legacy {
			c.AddRule(&nftables.Rule{Table: Table, Chain: MasqChain, UserData: []byte(legacyTag), Exprs: exprs})
		}
		fwd := filter(Table, "forward", nftables.ChainHookForward)
		in := filter(Table, "input", nftables.ChainHookInput)
		nat := c.AddChain(&nftables.Chain{Name: "postrouting", Table: Table, Type: nftables.ChainTypeNAT,
			Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource})
		c.FlushChain(nat)
		c.AddRule(&nftables.Rule{Table: Table, Chain: fwd, UserData: []byte(baseVersion), Exprs: append(matchEstablished(), acceptVerdict())})
		rule(Table, fwd, append(append(matchIf(expr.MetaKeyIIFNAME, ""), matchIf(expr.MetaKeyOIFNAME, "")...), refuse()...)...)
		rule(Table, fwd, append(matchIf(expr.MetaKeyOIFNAME, ""), dropVerdict())...)
		rule(Table, fwd, append(matchIf(expr.MetaKeyIIFNAME, ""), &expr.Verdict{Kind: expr.VerdictJump, Chain: SandboxChain.Name})...)
		rule(Table, fwd, append(matchIf(expr.MetaKeyIIFNAME, ""), refuse()...)...)
		rule(Table, in, append(append(matchIf(expr.MetaKeyIIFNAME, ""), matchEstablished()...), acceptVerdict())...)
		rule(Table, in, append(matchIf(expr.MetaKeyIIFNAME, ""), refuse()...)...)
		rule(Table, nat, &expr.Verdict{Kind: expr.VerdictJump, Chain: MasqChain.Name})
	}
	if !ok6 {
		c.AddTable(Table6)
		fwd := filter(Table6, "forward", nftables.ChainHookForward)
		in := filter(Table6, "input", nftables.ChainHookInput)
		out := filter(Table6, "output", nftables.ChainHookOutput)
		c.AddRule(&nftables.Rule{Table: Table6, Chain: fwd, UserData: []byte(baseVersion), Exprs: append(matchIf(expr.MetaKeyIIFNAME, ""), dropVerdict())})
		rule(Table6, fwd, append(matchIf(expr.MetaKeyOIFNAME, ""), dropVerdict())...)
		rule(Table6, in, append(matchIf(expr.MetaKeyIIFNAME, ""), dropVerdict())...)
		rule(Table6, out, append(matchIf(expr.MetaKeyOIFNAME, ""), dropVerdict())...)
	}
	return true, nil
}

// legacyTag marks the NAT rules an older base ruleset had in its
// postrouting chain (one per network range), kept in the masquerade
// chain when the base is rebuilt, so sandboxes started by an older cove
// keep their egress.
const legacyTag = "cove-legacy-nat"

// legacyNAT returns the masquerade rules of an older base's postrouting
// chain, unless they were carried over already.
func legacyNAT(c *nftables.Conn) [][]expr.Any {
	if kept, err := c.GetRules(Table, MasqChain); err == nil {
		for _, r := range kept {
			if string(r.UserData) == legacyTag {
				return nil
			}
		}
	}
	old, err := c.GetRules(Table, &nftables.Chain{Name: "postrouting", Table: Table})
	if err != nil {
		return nil // no older base
	}
	var out [][]expr.Any
	for _, r := range old {
		masq, jump := false, false
		for _, e := range r.Exprs {
			switch e.(type) {
			case *expr.Masq:
				masq = true
			case *expr.Verdict:
				jump = true
			}
		}
		if masq && !jump {
			out = append(out, r.Exprs)
		}
	}
	return out
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
