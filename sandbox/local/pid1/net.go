package pid1

import (
	"fmt"
	"net"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/sandbox/local/internal/sbdir"
)

// The sandbox's side of its network: loopback always, eth0 when the
// policy gives it egress (the supervisor makes the host side).

// loopbackUp brings up lo in the sandbox's network namespace, its only
// interface unless the network policy adds one.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// sandboxNetUp is pid 1's part, in the sandbox's namespace: wait for the
// interface the supervisor moves in, then name, address and route it.
func sandboxNetUp(n *sbdir.Net) error {
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
	if err := netlink.AddrAdd(link, &netlink.Addr{IPNet: sbdir.IPNet(n.Addr)}); err != nil {
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
