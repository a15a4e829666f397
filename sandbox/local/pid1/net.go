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

// sandboxNetUp is pid 1's part of a networked sandbox: wait until the
// supervisor, which configures both ends of the pair from the host (it
// picks the sandbox's addresses when it starts, after pid 1 has read its
// config), has made eth0 and routed it: the default route is its last
// step, so the daemon serves only once the network works.
func sandboxNetUp(n *sbdir.Net) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		if link, err := netlink.LinkByName("eth0"); err == nil {
			routes, _ := netlink.RouteList(link, netlink.FAMILY_V4)
			for _, r := range routes {
				if r.Dst == nil || r.Dst.IP.IsUnspecified() && net.IP(r.Dst.Mask).IsUnspecified() {
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the supervisor did not set up eth0 (from %s) within 10s", n.PeerIf)
		}
		time.Sleep(200 * time.Microsecond)
	}
}
