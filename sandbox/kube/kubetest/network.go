package kubetest

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// podRanges are where clusters take their pod and service /24s: the
// same third octet in both, the first not overlapping anything on the
// host (other clusters' bridges included). Cove's local runtime uses
// 10.213.0.0/16.
var (
	podRange     = netip.MustParsePrefix("10.247.0.0/16")
	serviceRange = netip.MustParsePrefix("10.248.0.0/16")
)

// netLock serialises picking a range and making the bridge across test
// binaries: the bridge's address is what claims the range.
const netLock = "/run/lock/cove-kubetest-net.lock"

// network is a cluster's bridge and ranges.
type network struct {
	bridge      string
	gateway     netip.Addr // the bridge's address, the node's IP
	pods        netip.Prefix
	services    netip.Prefix
	firstSvcIP  netip.Addr // the kubernetes Service's address
	bridgeIndex int
}

// makeNetwork picks a free pod range and makes the bridge named name
// with the range's first address, recorded in st before it exists.
func makeNetwork(st *stateStore, name string) (*network, error) {
	lock, err := os.OpenFile(netLock, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return nil, err
	}
	used, err := hostPrefixes()
	if err != nil {
		return nil, err
	}
	n := &network{bridge: name}
	for i := 0; i < 256; i++ {
		pods := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 247, byte(i), 0}), 24)
		if !overlapsAny(pods, used) {
			n.pods = pods
			n.services = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 248, byte(i), 0}), 24)
			break
		}
	}
	if !n.pods.IsValid() {
		return nil, fmt.Errorf("no free /24 left in %s for the pod network", podRange)
	}
	n.gateway = n.pods.Addr().Next()
	n.firstSvcIP = n.services.Addr().Next()
	if err := st.update(func(s *state) { s.Bridge = name }); err != nil {
		return nil, err
	}
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name}}
	if err := netlink.LinkAdd(br); err != nil {
		return nil, fmt.Errorf("making bridge %s: %w", name, err)
	}
	link, err := netlink.LinkByName(name)
	if err != nil {
		return nil, err
	}
	n.bridgeIndex = link.Attrs().Index
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: n.gateway.AsSlice(), Mask: net.CIDRMask(24, 32)}}
	if err := netlink.AddrAdd(link, addr); err != nil {
		return nil, fmt.Errorf("addressing bridge %s: %w", name, err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return nil, fmt.Errorf("bringing up bridge %s: %w", name, err)
	}
	return n, nil
}

// hostPrefixes lists the IPv4 prefixes of the host's routes (every
// table) and addresses.
func hostPrefixes() ([]netip.Prefix, error) {
	var out []netip.Prefix
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("listing routes: %w", err)
	}
	for _, r := range routes {
		if r.Dst == nil {
			continue // the default route overlaps everything; it is no claim
		}
		if p, ok := prefixOf(r.Dst); ok {
			out = append(out, p)
		}
	}
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		return nil, fmt.Errorf("listing addresses: %w", err)
	}
	for _, a := range addrs {
		if p, ok := prefixOf(a.IPNet); ok {
			out = append(out, p.Masked())
		}
	}
	return out, nil
}

func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	addr, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(addr.Unmap(), ones), true
}

func overlapsAny(p netip.Prefix, used []netip.Prefix) bool {
	for _, u := range used {
		if u.Bits() > 0 && u.Overlaps(p) {
			return true
		}
	}
	return false
}

// deleteBridge deletes the cluster's bridge if it exists. Only names the
// package makes are accepted: a corrupt state file must not delete the
// host's interfaces.
func deleteBridge(name string) error {
	if name == "" {
		return nil
	}
	if !strings.HasPrefix(name, namePrefix) {
		return fmt.Errorf("not deleting interface %q: not a test cluster's bridge", name)
	}
	link, err := netlink.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if link.Type() != "bridge" {
		return fmt.Errorf("not deleting interface %q: not a bridge", name)
	}
	return netlink.LinkDel(link)
}
