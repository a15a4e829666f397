package kube

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/cove-sandbox/cove/sandbox"
)

// The stand-ins for what is beyond the node, as addresses of the node
// itself, so that no test depends on the host's IPv4
// forwarding, which other packages' tests switch on and off: a pod's
// traffic to them passes the same per-pod chain of the enforcer as
// routed traffic does. 192.0.2.10 is public to the sandboxes (a
// documentation address); 10.97.21.10 is private.
const (
	publicAddr  = "192.0.2.10"
	privateAddr = "10.97.21.10"
)

// TestNetworkPolicyEnforced: on a cluster that enforces NetworkPolicy
// (kube-router's firewall here), a sandbox's network mode holds as on
// the local runtime: none reaches nothing, internet reaches a public
// address but neither a private one nor another sandbox, allow reaches
// its list (a host and port) and nothing else; and the server, from the
// node, still reaches every daemon.
func TestNetworkPolicyEnforced(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := newTestRuntime(t)
	beyond(t)
	wait := func(s sandbox.Session) {
		t.Helper()
		_, p, err := r.load(t.Context(), s.ID())
		if err != nil || p == nil || p.Status.PodIP == "" {
			t.Fatalf("the pod of %s: %v", s.ID(), err)
		}
		if err := e.c.WaitNetworkPolicy(p.Status.PodIP); err != nil {
			t.Fatal(err)
		}
	}
	none := create(t, r, sandbox.Spec{})
	inet := create(t, r, sandbox.Spec{Network: sandbox.Network{Mode: NetworkInternet}})
	allow := create(t, r, sandbox.Spec{Network: sandbox.Network{Mode: NetworkAllow, Allow: []string{publicAddr + ":8081"}}})
	for _, s := range []sandbox.Session{none, inet, allow} {
		wait(s)
	}
	_, target, err := r.load(t.Context(), none.ID())
	if err != nil {
		t.Fatal(err)
	}
	otherDaemon := fmt.Sprintf("%s:%d", target.Status.PodIP, r.cfg.GuestPort)

	for _, c := range []struct {
		name  string
		s     sandbox.Session
		addr  string
		reach bool
	}{
		{"none, public", none, publicAddr + ":8080", false},
		{"none, listed elsewhere", none, publicAddr + ":8081", false},
		{"internet, public", inet, publicAddr + ":8080", true},
		{"internet, public, another port", inet, publicAddr + ":8081", true},
		{"internet, private", inet, privateAddr + ":8080", false},
		{"internet, another sandbox's daemon", inet, otherDaemon, false},
		{"allow, listed", allow, publicAddr + ":8081", true},
		{"allow, same host, port not listed", allow, publicAddr + ":8080", false},
		{"allow, private", allow, privateAddr + ":8080", false},
	} {
		// busybox's wget is static glibc and crashes in its resolver;
		// its nc speaks HTTP well enough.
		out, _ := run(t, c.s, "printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 5 "+strings.Replace(c.addr, ":", " ", 1)+" 2>&1")
		switch {
		case c.reach && !strings.Contains(out, "hello from "+c.addr):
			t.Errorf("%s: %s: %q, want the server's greeting", c.name, c.addr, out)
		case !c.reach && !strings.Contains(out, "Connection refused"):
			// Every target listens: a refusal is the policy's reject.
			t.Errorf("%s: %s: %q, want the connection refused by the policy", c.name, c.addr, out)
		}
	}
}

// beyond puts publicAddr and privateAddr on an interface of the node (a
// veth pair with both ends on the host: these kernels have no dummy
// interfaces), with HTTP servers on ports 8080 and 8081 of each, all removed at
// the end.
func beyond(t *testing.T) {
	t.Helper()
	b := make([]byte, 3)
	rand.Read(b)
	name := "ktnp" + hex.EncodeToString(b)
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name + "p"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(name); err == nil {
			netlink.LinkDel(l)
		}
	})
	link, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{publicAddr + "/32", privateAddr + "/32"} {
		addr, _ := netlink.ParseAddr(a)
		if err := netlink.AddrAdd(link, addr); err != nil {
			t.Fatalf("adding %s: %v", a, err)
		}
	}
	if err := netlink.LinkSetUp(link); err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{publicAddr, privateAddr} {
		for _, port := range []string{"8080", "8081"} {
			addr := net.JoinHostPort(host, port)
			l, err := net.Listen("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			go http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprintf(w, "hello from %s\n", addr)
			}))
		}
	}
}
