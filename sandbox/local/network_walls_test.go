package local

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/local/internal/sbdir"
)

// The walls of sandbox networks, attacked as a tenant would: IPv6 (with
// root inside, and with v6 turned back on behind the policy's back), two
// installs on one host, a host whose LAN is not a private range, an
// allow list naming cloud metadata or private ranges, and the host's
// forwarding switch. None assumes what else runs on the host: each makes
// its own runtime, range and outside hosts, and looks up the /30 its
// sandboxes got.

// wallRuntime is a runtime of its own (its own state directory, as a
// second install on the host has) over network range rng (default when
// invalid), letting allow lists name the operator's allowPrivate.
func wallRuntime(t *testing.T, rng netip.Prefix, allowPrivate ...netip.Prefix) *Runtime {
	t.Helper()
	needRoot(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "cw") // short: unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	rt, err := New(Config{Dir: dir, Command: []string{exe}, Env: []string{"GORACE=atexit_sleep_ms=0"},
		NetworkRange: rng, NetworkAllowPrivate: allowPrivate})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		infos, _ := rt.List(context.Background())
		for _, in := range infos {
			rt.Delete(context.Background(), in.ID)
		}
		os.RemoveAll(dir)
	})
	return rt
}

func createNet(t *testing.T, rt *Runtime, n sandbox.Network) sandbox.Session {
	t.Helper()
	return createNetOn(t, rt, sandbox.IsolationNative, n)
}

// createNetOn is createNet on isolation tier iso.
func createNetOn(t *testing.T, rt *Runtime, iso string, n sandbox.Network) sandbox.Session {
	t.Helper()
	s, err := rt.Create(context.Background(), sandbox.Spec{Isolation: iso, Network: n})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Delete(context.Background(), s.ID()) })
	return s
}

// sandboxNet is the network a running sandbox got.
func sandboxNet(t *testing.T, rt *Runtime, id string) (*sbdir.Net, int) {
	t.Helper()
	st, err := sbdir.Read(rt.dir(id))
	if err != nil {
		t.Fatal(err)
	}
	if st.Init.Net == nil || !st.Init.Net.Addr.IsValid() {
		t.Fatalf("sandbox %s has no network recorded: %+v", id, st.Init.Net)
	}
	return st.Init.Net, st.InitPID
}

// netExecAs runs a shell script in s as user ("" for the sandbox's).
func netExecAs(t *testing.T, s sandbox.Session, user, script string) (string, int) {
	t.Helper()
	var out strings.Builder
	st, err := s.Exec(context.Background(), sandbox.ExecRequest{Cmd: "sh", Args: []string{"-c", script}, User: user, Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	return out.String(), st.Code
}

func randName(prefix string) string {
	b := make([]byte, 3)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// outside is a network namespace standing for machines beyond the host,
// joined to it by a veth pair (names made up here, never "cv…"):
// hostCIDR on the host's end, peerCIDRs on its own, and the host routes
// each of via through the first peer address (a gateway). HTTP servers
// answer "hello from ADDR" on each address of listen.
func outside(t *testing.T, hostCIDR string, peerCIDRs, via, listen []string) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	hostNS, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer hostNS.Close()
	hostIf := randName("tw")
	peerIf := hostIf + "p"
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: hostIf}, PeerName: peerIf}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(hostIf); err == nil {
			netlink.LinkDel(l)
		}
	})
	ns, err := netns.New() // this thread is now in it
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	defer netns.Set(hostNS)
	netns.Set(hostNS)
	peer, err := netlink.LinkByName(peerIf)
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetNsFd(peer, int(ns)); err != nil {
		t.Fatal(err)
	}
	hl, _ := netlink.LinkByName(hostIf)
	addr, err := netlink.ParseAddr(hostCIDR)
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.AddrAdd(hl, addr); err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetUp(hl); err != nil {
		t.Fatal(err)
	}
	gw, _, _ := net.ParseCIDR(peerCIDRs[0])
	for _, v := range via {
		_, dst, _ := net.ParseCIDR(v)
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: hl.Attrs().Index, Dst: dst, Gw: gw}); err != nil {
			t.Fatalf("routing %s through the outside: %v", v, err)
		}
	}

	netns.Set(ns)
	pl, err := netlink.LinkByName(peerIf)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range peerCIDRs {
		addr, _ := netlink.ParseAddr(a)
		if err := netlink.AddrAdd(pl, addr); err != nil {
			t.Fatal(err)
		}
	}
	netlink.LinkSetUp(pl)
	if lo, err := netlink.LinkByName("lo"); err == nil {
		netlink.LinkSetUp(lo)
	}
	// Replies go back to the host's end, whatever the source.
	hostAddr, _, _ := net.ParseCIDR(hostCIDR)
	netlink.RouteAdd(&netlink.Route{LinkIndex: pl.Attrs().Index, Gw: hostAddr})
	// Sockets keep the namespace they were made in.
	for _, a := range listen {
		l, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "hello from %s\n", a)
		}))
	}
}

// foreign makes an interface holding cidr, with routes through it,
// removed at the end: another program's network on the host. (A veth
// pair with both ends on the host: not every kernel has dummy links.)
func foreign(t *testing.T, cidr string, routes ...string) {
	t.Helper()
	name := randName("twf")
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name + "p"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(name); err == nil {
			netlink.LinkDel(l)
		}
	})
	l, _ := netlink.LinkByName(name)
	addr, _ := netlink.ParseAddr(cidr)
	if err := netlink.AddrAdd(l, addr); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{name, name + "p"} {
		if l, err := netlink.LinkByName(n); err != nil || netlink.LinkSetUp(l) != nil {
			t.Fatalf("bringing up %s: %v", n, err)
		}
	}
	for _, r := range routes {
		_, dst, _ := net.ParseCIDR(r)
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: dst}); err != nil {
			t.Fatal(err)
		}
	}
}

// mustNotReach fails unless a fetch of target from s fails, and fails
// at once (refused, not left to hang).
func mustNotReach(t *testing.T, s sandbox.Session, target, why string) {
	t.Helper()
	if out, code := fetch(t, s, target); code == 0 || strings.Contains(out, "hello") {
		t.Errorf("%s: the sandbox reached %s: %d %q", why, target, code, out)
	} else if code == 124 {
		t.Errorf("%s: %s hung until the timeout instead of being refused at once: %q", why, target, out)
	}
}

func mustReach(t *testing.T, s sandbox.Session, target string) {
	t.Helper()
	if out, code := fetch(t, s, target); code != 0 || !strings.Contains(out, "hello from "+target) {
		t.Errorf("the sandbox did not reach %s: %d %q", target, code, out)
	}
}

// inNetnsOf runs fn on a thread in the network namespace of pid, then
// puts the thread back (see host.inNetns).
func inNetnsOf(t *testing.T, pid int, fn func() error) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		ns, err := netns.GetFromPid(pid)
		if err != nil {
			errc <- err
			return
		}
		defer ns.Close()
		if err := netns.Set(ns); err != nil {
			errc <- err
			return
		}
		err = fn()
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// linkLocal is the EUI-64 link-local address of a MAC: what an
// interface gets when IPv6 is on.
func linkLocal(mac net.HardwareAddr) netip.Addr {
	return netip.AddrFrom16([16]byte{0: 0xfe, 1: 0x80, 8: mac[0] ^ 2, 9: mac[1], 10: mac[2], 11: 0xff, 12: 0xfe, 13: mac[3], 14: mac[4], 15: mac[5]})
}

func mustHex(s string) int {
	n, err := strconv.ParseInt(s, 16, 32)
	if err != nil {
		panic(err)
	}
	return int(n)
}

// v6probe is run inside a sandbox: TCP to every target on the TCP port,
// a UDP datagram to every target on the UDP port; one line each.
const v6probe = `
import socket, sys
tport, uport = int(sys.argv[1]), int(sys.argv[2])
for t in sys.argv[3:]:
    try:
        ai = socket.getaddrinfo(t, tport, socket.AF_INET6, socket.SOCK_STREAM)[0]
        s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        s.settimeout(3)
        s.connect(ai[4])
        print("tcp", t, "connected", s.recv(100))
    except Exception as e:
        print("tcp", t, "failed", e)
    try:
        ai = socket.getaddrinfo(t, uport, socket.AF_INET6, socket.SOCK_DGRAM)[0]
        u = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        u.sendto(b"hello", ai[4])
        print("udp", t, "sent")
    except Exception as e:
        print("udp", t, "failed", e)
`

// TestNetworkNoIPv6: a networked sandbox has no IPv6 beyond its own
// loopback, its root cannot turn it on, and even with IPv6 turned back
// on at both ends of its pair (from the host, as a kernel bug or a
// careless admin might) nothing it sends by IPv6 reaches the host's
// services on [::] or link-local discovery.
func TestNetworkNoIPv6(t *testing.T) {
	if _, err := os.Stat("/proc/sys/net/ipv6"); err != nil {
		t.Skip("this kernel has no IPv6")
	}
	onTiers(t, testNetworkNoIPv6)
}

func testNetworkNoIPv6(t *testing.T, iso string) {
	rt := wallRuntime(t, netip.MustParsePrefix("10.212.60.0/28"))
	// The host's services, on every address of both families.
	tl, err := net.Listen("tcp6", "[::]:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := tl.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			io.WriteString(c, "host secret\n")
			c.Close()
		}
	}()
	ul, err := net.ListenPacket("udp6", "[::]:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ul.Close()
	var datagrams atomic.Int32
	go func() {
		buf := make([]byte, 100)
		for {
			if _, _, err := ul.ReadFrom(buf); err != nil {
				return
			}
			datagrams.Add(1)
		}
	}()
	tport, uport := tl.Addr().(*net.TCPAddr).Port, ul.LocalAddr().(*net.UDPAddr).Port

	s := createNetOn(t, rt, iso, sandbox.Network{Mode: NetworkInternet})
	n, initPID := sandboxNet(t, rt, s.ID())
	hostEnd, err := netlink.LinkByName(n.HostIf)
	if err != nil {
		t.Fatal(err)
	}
	if a, _ := netlink.AddrList(hostEnd, netlink.FAMILY_V6); len(a) != 0 {
		t.Errorf("the host end %s of the sandbox's pair has IPv6 addresses: %v", n.HostIf, a)
	}
	eth0v6 := func() string {
		out, _ := netExecAs(t, s, "", "grep -w eth0 /proc/net/if_inet6; true")
		return out
	}
	if out := eth0v6(); out != "" {
		t.Errorf("the sandbox's eth0 has IPv6 addresses:\n%s", out)
	}
	if out, _ := netExecAs(t, s, "", "grep -w lo /proc/net/if_inet6"); !strings.Contains(out, "00000000000000000000000000000001") {
		t.Errorf("the sandbox's loopback lost ::1: %q", out)
	}

	// Root inside tries to turn IPv6 back on.
	out, _ := netExecAs(t, s, "root", `
for f in all default eth0; do echo 0 > /proc/sys/net/ipv6/conf/$f/disable_ipv6 && echo "wrote $f"; done
ip -6 addr add fd99::2/64 dev eth0 && echo "added an address"
ip link set eth0 down; ip link set eth0 up; true`)
	if strings.Contains(out, "wrote") || strings.Contains(out, "added") {
		t.Errorf("root in the sandbox changed its IPv6 settings:\n%s", out)
	}
	if out := eth0v6(); out != "" {
		t.Errorf("root in the sandbox gave eth0 IPv6 addresses:\n%s", out)
	}

	if err := s.WriteFile(context.Background(), "probe.py", strings.NewReader(v6probe), 0o644); err != nil {
		t.Fatal(err)
	}
	targets := []string{linkLocal(hostEnd.Attrs().HardwareAddr).String() + "%eth0", "ff02::1%eth0", "ff02::2%eth0"}
	probe := func(when string) {
		t.Helper()
		out, _ := netExecAs(t, s, "root", fmt.Sprintf("python3 probe.py %d %d %s 2>&1", tport, uport, strings.Join(targets, " ")))
		if strings.Contains(out, "connected") || strings.Contains(out, "secret") {
			t.Errorf("%s: the sandbox reached the host by IPv6:\n%s", when, out)
		}
		t.Logf("%s:\n%s", when, out)
	}
	probe("IPv6 off")
	if onGVisor(iso) {
		// gVisor's netstack took its interfaces from the namespace
		// when it booted, and root inside cannot change it (above):
		// turning IPv6 on in that namespace from the host, as below,
		// does not reach the sandbox.
		if n, d := accepted.Load(), datagrams.Load(); n != 0 || d != 0 {
			t.Errorf("the host's [::] services heard from the sandbox: %d connections, %d datagrams", n, d)
		}
		return
	}

	// The host-side wall alone: IPv6 back on at both ends, addresses
	// at once (no duplicate detection), and the sandbox tries again.
	on := func(ifname string) error {
		for _, kv := range [][2]string{{"accept_dad", "0"}, {"disable_ipv6", "0"}} {
			if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+ifname+"/"+kv[0], []byte(kv[1]), 0o644); err != nil {
				return err
			}
		}
		return nil
	}
	inNetnsOf(t, initPID, func() error { return on("eth0") })
	if err := on(n.HostIf); err != nil {
		t.Fatal(err)
	}
	// Both ends' link-local addresses, done with duplicate detection
	// (a tentative address sends nothing).
	hasLinkLocal := func() bool {
		a, _ := netlink.AddrList(hostEnd, netlink.FAMILY_V6)
		if len(a) == 0 || a[0].Flags&unix.IFA_F_TENTATIVE != 0 {
			return false
		}
		f := strings.Fields(eth0v6()) // address ifindex plen scope flags name
		return len(f) == 6 && f[4] != "" && mustHex(f[4])&unix.IFA_F_TENTATIVE == 0
	}
	for deadline := time.Now().Add(20 * time.Second); !hasLinkLocal(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("IPv6 turned back on at both ends gave them no link-local addresses")
		}
	}
	if a, _ := netlink.AddrList(hostEnd, netlink.FAMILY_V6); a[0].IP.String() != linkLocal(hostEnd.Attrs().HardwareAddr).String() {
		targets = append(targets, a[0].IP.String()+"%eth0")
	}
	probe("IPv6 turned back on at both ends")
	if n := accepted.Load(); n != 0 {
		t.Errorf("the host's [::] TCP service accepted %d connections from the sandbox", n)
	}
	if n := datagrams.Load(); n != 0 {
		t.Errorf("the host's [::] UDP service received %d datagrams from the sandbox", n)
	}
}

// TestNetworkSubnetsAcrossInstalls: two runtimes with their own state
// directories (the CLI's and cove serve's) make networked sandboxes at
// the same time over the same range: they get different subnets, each
// one's traffic comes back to it, and a stopped sandbox holds none.
func TestNetworkSubnetsAcrossInstalls(t *testing.T) {
	rng := netip.MustParsePrefix("10.212.61.0/28")
	rtA, rtB := wallRuntime(t, rng), wallRuntime(t, rng)
	outside(t, "10.97.1.1/24", []string{"10.97.1.10/24", "198.18.1.10/24"}, []string{"198.18.1.0/24"}, []string{"198.18.1.10:8080"})

	sessions := make([]sandbox.Session, 2)
	var wg sync.WaitGroup
	for i, rt := range []*Runtime{rtA, rtB} {
		wg.Go(func() {
			s, err := rt.Create(context.Background(), sandbox.Spec{Network: sandbox.Network{Mode: NetworkInternet}})
			if err != nil {
				t.Error(err)
				return
			}
			t.Cleanup(func() { rt.Delete(context.Background(), s.ID()) })
			sessions[i] = s
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	a, b := sessions[0], sessions[1]
	na, _ := sandboxNet(t, rtA, a.ID())
	nb, _ := sandboxNet(t, rtB, b.ID())
	if na.Addr.Overlaps(nb.Addr) {
		t.Fatalf("two installs' sandboxes share the subnet %s", na.Addr.Masked())
	}
	for _, n := range []*sbdir.Net{na, nb} {
		if !rng.Contains(n.Addr.Addr()) {
			t.Errorf("subnet %s is outside the range %s", n.Addr, rng)
		}
	}

	// Each serves its own id; the host reaches each at its address and
	// gets that one's answer, and each reaches the outside.
	serve := func(s sandbox.Session) {
		t.Helper()
		netExecAs(t, s, "", fmt.Sprintf("mkdir -p www && echo %s > www/who && cd www && (nohup python3 -m http.server 8000 --bind 0.0.0.0 >/dev/null 2>&1 &)", s.ID()))
	}
	who := func(addr netip.Addr) string {
		c := &http.Client{Timeout: 5 * time.Second}
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			resp, err := c.Get("http://" + netip.AddrPortFrom(addr, 8000).String() + "/who")
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				return strings.TrimSpace(string(b))
			}
			if time.Now().After(deadline) {
				return err.Error()
			}
		}
	}
	serve(a)
	serve(b)
	for _, c := range []struct {
		s    sandbox.Session
		addr netip.Addr
	}{{a, na.Addr.Addr()}, {b, nb.Addr.Addr()}} {
		if got := who(c.addr); got != c.s.ID() {
			t.Errorf("the host asked %s for sandbox %s and got %q", c.addr, c.s.ID(), got)
		}
		mustReach(t, c.s, "198.18.1.10:8080")
	}

	// A stopped sandbox gives its subnet back; resumed, it gets one
	// again (not the other install's).
	if err := rtA.Stop(context.Background(), a.ID()); err != nil {
		t.Fatal(err)
	}
	if _, err := netlink.LinkByName(na.HostIf); err == nil {
		t.Errorf("interface %s outlived its stopped sandbox", na.HostIf)
	}
	a, err := rtA.Resume(context.Background(), a.ID())
	if err != nil {
		t.Fatal(err)
	}
	na, _ = sandboxNet(t, rtA, a.ID())
	if na.Addr.Overlaps(nb.Addr) {
		t.Errorf("the resumed sandbox got the other install's subnet %s", nb.Addr.Masked())
	}
	mustReach(t, a, "198.18.1.10:8080")
}

// TestNetworkSubnetSkipsForeign: a /30 overlapping an address or a route
// the host already has (another program's, a LAN's) is never handed out.
func TestNetworkSubnetSkipsForeign(t *testing.T) {
	rng := netip.MustParsePrefix("10.212.62.0/28")
	rt := wallRuntime(t, rng)
	foreignAddr, foreignRoute := netip.MustParsePrefix("10.212.62.1/30"), netip.MustParsePrefix("10.212.62.4/30")
	foreign(t, foreignAddr.String(), foreignRoute.String())
	outside(t, "10.97.2.1/24", []string{"10.97.2.10/24", "198.18.2.10/24"}, []string{"198.18.2.0/24"}, []string{"198.18.2.10:8080"})

	s := createNet(t, rt, sandbox.Network{Mode: NetworkInternet})
	n, _ := sandboxNet(t, rt, s.ID())
	for _, f := range []netip.Prefix{foreignAddr, foreignRoute} {
		if n.Addr.Overlaps(f) {
			t.Errorf("the sandbox got %s, which overlaps the host's %s", n.Addr, f)
		}
	}
	if !rng.Contains(n.Addr.Addr()) {
		t.Errorf("subnet %s is outside the range %s", n.Addr, rng)
	}
	mustReach(t, s, "198.18.2.10:8080")
}

// TestNetworkInternetSkipsHostLAN: internet mode never reaches the
// networks the host's interfaces are on, private or not (here a public
// documentation /24, as a host on a public LAN has), nor the clouds'
// metadata endpoints outside link-local; the networks are read again
// when the next sandbox starts, for the running ones too.
func TestNetworkInternetSkipsHostLAN(t *testing.T) { onTiers(t, testNetworkInternetSkipsHostLAN) }

func testNetworkInternetSkipsHostLAN(t *testing.T, iso string) {
	rt := wallRuntime(t, netip.MustParsePrefix("10.212.63.0/28"))
	// The internet, through a gateway, with Azure's WireServer address.
	outside(t, "10.97.3.1/24", []string{"10.97.3.10/24", "198.18.3.10/24", "168.63.129.16/32"},
		[]string{"198.18.3.0/24", "168.63.129.16/32"}, []string{"198.18.3.10:8080", "168.63.129.16:8080"})
	// The host's LAN: a public /24, with a machine on it and a service on
	// the host's own address there.
	outside(t, "198.51.100.1/24", []string{"198.51.100.10/24"}, nil, []string{"198.51.100.10:8080"})
	hl, err := net.Listen("tcp", "198.51.100.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hl.Close()
	go http.Serve(hl, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello from the host\n") }))

	s := createNetOn(t, rt, iso, sandbox.Network{Mode: NetworkInternet})
	mustReach(t, s, "198.18.3.10:8080")
	mustNotReach(t, s, "198.51.100.10:8080", "a machine on the host's LAN")
	mustNotReach(t, s, hl.Addr().String(), "the host's address on its LAN")
	mustNotReach(t, s, "168.63.129.16:8080", "Azure's WireServer")

	// The host joins another LAN while s runs; the next sandbox's start
	// reads the host's networks again, for every running sandbox.
	outside(t, "198.51.101.1/24", []string{"198.51.101.10/24"}, nil, []string{"198.51.101.10:8080"})
	s2 := createNetOn(t, rt, iso, sandbox.Network{Mode: NetworkInternet})
	for _, s := range []sandbox.Session{s, s2} {
		mustNotReach(t, s, "198.51.101.10:8080", "a LAN the host joined later")
		mustReach(t, s, "198.18.3.10:8080")
	}
}

// TestNetworkAllowPolicy: an allow list never names cloud metadata or
// the host's own addresses, and names private ranges and the host's
// networks only where the operator allows them; create refuses the
// entry with ErrInvalid, saying which and why, and leaves nothing.
func TestNetworkAllowPolicy(t *testing.T) {
	rng := netip.MustParsePrefix("10.212.64.0/28")
	// The host's LAN (198.51.102.0/24, the host at .1) and a private
	// network beyond it.
	outside(t, "198.51.102.1/24", []string{"198.51.102.10/24", "10.96.4.10/24"}, []string{"10.96.4.0/24"},
		[]string{"198.51.102.10:8080", "10.96.4.10:8080"})

	type want struct {
		entry string
		ok    bool
		says  []string // in the error
	}
	check := func(t *testing.T, rt *Runtime, tests []want) {
		t.Helper()
		before, _ := os.ReadDir(rt.cfg.Dir)
		for _, w := range tests {
			s, err := rt.Create(context.Background(), sandbox.Spec{Network: sandbox.Network{Mode: NetworkAllow, Allow: []string{w.entry}}})
			if w.ok {
				if err != nil {
					t.Errorf("allow %q: %v, want it accepted", w.entry, err)
					continue
				}
				rt.Delete(context.Background(), s.ID())
				continue
			}
			if err == nil {
				rt.Delete(context.Background(), s.ID())
				t.Errorf("allow %q: accepted, want ErrInvalid", w.entry)
				continue
			}
			if !errors.Is(err, sandbox.ErrInvalid) {
				t.Errorf("allow %q: err = %v, want ErrInvalid", w.entry, err)
			}
			for _, say := range append([]string{w.entry}, w.says...) {
				if !strings.Contains(err.Error(), say) {
					t.Errorf("allow %q: error %q does not say %q", w.entry, err, say)
				}
			}
			if strings.Contains(err.Error(), rt.cfg.Dir) {
				t.Errorf("allow %q: error %q shows a host path", w.entry, err)
			}
		}
		if after, _ := os.ReadDir(rt.cfg.Dir); len(after) != len(before) {
			t.Errorf("refused creates left %d entries in the state dir (had %d)", len(after), len(before))
		}
	}
	metadata := []want{
		{"169.254.169.254:80", false, []string{"metadata", "never"}},
		{"169.254.169.254", false, []string{"metadata"}},
		{"169.254.0.0/16", false, []string{"metadata"}},
		{"0.0.0.0/0", false, []string{"metadata"}},
		{"100.100.100.200:80", false, []string{"metadata"}},
		{"168.63.129.16", false, []string{"Azure"}},
		{"198.51.102.1:8080", false, []string{"this host"}},
		{"198.51.102.0/24", false, []string{"this host"}},
	}

	t.Run("default", func(t *testing.T) {
		rt := wallRuntime(t, rng)
		check(t, rt, append(metadata, []want{
			{"10.96.4.10:8080", false, []string{"private", "operator"}},
			{"192.168.1.0/24", false, nil}, // private, or holding an address of this host's
			{"100.64.0.1", false, []string{"operator"}},
			{"127.0.0.1:80", false, nil},
			{"198.51.102.10:8080", false, []string{"network this host is on", "operator"}},
			{"203.0.113.7:443", true, nil},
		}...))
	})
	t.Run("operator allows", func(t *testing.T) {
		rt := wallRuntime(t, rng, netip.MustParsePrefix("10.96.0.0/16"), netip.MustParsePrefix("198.51.102.0/24"))
		check(t, rt, append(metadata, []want{
			{"10.96.4.0/24", true, nil},
			{"10.95.0.1", false, []string{"private", "operator"}},
			{"10.0.0.0/8", false, nil},
		}...))
		// What the operator allows is reached; the rest is not.
		onTiers(t, func(t *testing.T, iso string) {
			s := createNetOn(t, rt, iso, sandbox.Network{Mode: NetworkAllow, Allow: []string{"10.96.4.10:8080", "198.51.102.10:8080"}})
			mustReach(t, s, "10.96.4.10:8080")
			mustReach(t, s, "198.51.102.10:8080")
			mustNotReach(t, s, "198.51.102.1:8080", "the host, on an allowed LAN")
		})
	})
	t.Run("operator cannot allow metadata", func(t *testing.T) {
		needRoot(t)
		for _, p := range []string{"169.254.169.254/32", "169.0.0.0/8", "100.100.100.200/32"} {
			_, err := New(Config{Dir: t.TempDir(), NetworkAllowPrivate: []netip.Prefix{netip.MustParsePrefix(p)}})
			if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), p) {
				t.Errorf("NetworkAllowPrivate %s: err = %v, want ErrInvalid naming it", p, err)
			}
		}
	})
}

// TestNetworkForwardingRestored: the host's IPv4 forwarding is on while
// a networked sandbox runs and back to what it was when the last one
// ends; a host that had it on keeps it on. Forwarding is per network
// namespace, and other sandboxes may run on this host, so the test runs
// itself again in a namespace of its own.
func TestNetworkForwardingRestored(t *testing.T) {
	needRoot(t)
	if os.Getenv("COVE_TEST_OWN_NETNS") != "1" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestNetworkForwardingRestored$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), "COVE_TEST_OWN_NETNS=1")
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS") {
			t.Fatalf("in a network namespace of its own: %v\n%s", err, out)
		}
		return
	}
	lo, _ := netlink.LinkByName("lo")
	netlink.LinkSetUp(lo)
	forward := func() string {
		b, err := os.ReadFile("/proc/sys/net/ipv4/ip_forward")
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	setForward := func(v string) {
		if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rt := wallRuntime(t, netip.Prefix{})
	ctx := context.Background()
	for _, was := range []string{"0", "1"} {
		setForward(was)
		s1 := createNet(t, rt, sandbox.Network{Mode: NetworkInternet})
		if got := forward(); got != "1" {
			t.Fatalf("forwarding with a networked sandbox running = %s, want 1", got)
		}
		s2 := createNet(t, rt, sandbox.Network{Mode: NetworkAllow, Allow: []string{"203.0.113.7"}})
		if err := rt.Stop(ctx, s1.ID()); err != nil {
			t.Fatal(err)
		}
		if got := forward(); got != "1" {
			t.Errorf("was %s: forwarding turned off (%s) while a networked sandbox still runs", was, got)
		}
		if err := rt.Delete(ctx, s2.ID()); err != nil {
			t.Fatal(err)
		}
		if got := forward(); got != was {
			t.Errorf("forwarding after the last networked sandbox = %s, want %s as before", got, was)
		}
		// Resuming turns it on again.
		if _, err := rt.Resume(ctx, s1.ID()); err != nil {
			t.Fatal(err)
		}
		if got := forward(); got != "1" {
			t.Errorf("forwarding after a resume = %s, want 1", got)
		}
		if err := rt.Delete(ctx, s1.ID()); err != nil {
			t.Fatal(err)
		}
		if got := forward(); got != was {
			t.Errorf("forwarding after the resumed sandbox's delete = %s, want %s", got, was)
		}
	}
	// Nothing is left to say what it was.
	var st syscall.Stat_t
	syscall.Stat("/proc/thread-self/ns/net", &st)
	if _, err := os.Stat(filepath.Join(filepath.Dir(sbdir.NetLockPath), fmt.Sprintf("ip_forward.%d", st.Ino))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the saved forwarding setting outlived the last sandbox: %v", err)
	}
}
