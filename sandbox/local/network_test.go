package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/local/internal/host"
	"github.com/cove-sandbox/cove/sandbox/local/internal/sbdir"
)

// fakeInternet is a network namespace standing in for the internet
// (203.0.113.10, a documentation address that Cove treats as public),
// behind a gateway on a private network (10.99.0.10), joined to the host
// by a veth pair. HTTP servers answer on 203.0.113.10:8080 and :8081 and
// on 10.99.0.10:8080; the host has 10.99.0.1 on its end and routes
// 203.0.113.0/24 through 10.99.0.10 (a network the host is on itself is
// its LAN, which sandboxes never reach).
func fakeInternet(t *testing.T) {
	t.Helper()
	outside(t, "10.99.0.1/24", []string{"10.99.0.10/24", "203.0.113.10/24"}, []string{"203.0.113.0/24"},
		[]string{"203.0.113.10:8080", "203.0.113.10:8081", "10.99.0.10:8080"})
}

// fetch runs a plain HTTP GET inside the sandbox with bash's /dev/tcp.
func fetch(t *testing.T, s sandbox.Session, hostPort string) (string, int) {
	t.Helper()
	h, p, _ := net.SplitHostPort(hostPort)
	out, st := run(t, s, fmt.Sprintf(`timeout 5 bash -c 'exec 3<>/dev/tcp/%s/%s && printf "GET / HTTP/1.0\r\n\r\n" >&3 && cat <&3' 2>&1`, h, p))
	return out, st.Code
}

func TestNetworkModes(t *testing.T) { onTiers(t, testNetworkModes) }

func testNetworkModes(t *testing.T, iso string) {
	rt := newRuntime(t)
	fakeInternet(t)
	// A service on the host, on every address: sandboxes must not reach it.
	hostL, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hostL.Close()
	go http.Serve(hostL, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "host secret\n") }))
	hostPort := fmt.Sprint(hostL.Addr().(*net.TCPAddr).Port)
	ctx := context.Background()
	create := func(n sandbox.Network) sandbox.Session {
		s, err := rt.Create(ctx, sandbox.Spec{Isolation: iso, Network: n})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rt.Delete(ctx, s.ID()) })
		return s
	}

	none := create(sandbox.Network{})
	if out, code := fetch(t, none, "203.0.113.10:8080"); code == 0 || !strings.Contains(out, "unreachable") {
		t.Errorf("mode none reached the internet: %d %q", code, out)
	}

	inet := create(sandbox.Network{Mode: NetworkInternet})
	if out, code := fetch(t, inet, "203.0.113.10:8080"); code != 0 || !strings.Contains(out, "hello from 203.0.113.10:8080") {
		t.Errorf("mode internet: public address: %d %q", code, out)
	}
	st, _ := sbdir.Read(rt.dir(inet.ID()))
	gw := st.Init.Net.Gateway.Addr().String()
	for _, target := range []string{"10.99.0.10:8080", "10.99.0.1:" + hostPort, gw + ":" + hostPort, "169.254.169.254:80"} {
		if out, code := fetch(t, inet, target); code == 0 || strings.Contains(out, "hello") || strings.Contains(out, "secret") {
			t.Errorf("mode internet reached %s: %d %q", target, code, out)
		} else if code == 124 {
			t.Errorf("mode internet: %s hung until the timeout instead of being refused at once: %q", target, out)
		}
	}
	if out, _ := run(t, inet, "cat /etc/resolv.conf; ip -4 addr show eth0 2>/dev/null || cat /proc/net/route"); !strings.Contains(out, "eth0") {
		t.Errorf("no eth0 in the sandbox: %q", out)
	}
	// The user cannot undo the policy from inside.
	if out, _ := run(t, inet, "ip route del default >/dev/null 2>&1; grep -c '^eth0\t00000000' /proc/net/route"); out != "1\n" {
		t.Errorf("the sandbox user removed its default route: %q", out)
	}

	allow := create(sandbox.Network{Mode: NetworkAllow, Allow: []string{"203.0.113.10:8081"}})
	if out, code := fetch(t, allow, "203.0.113.10:8081"); code != 0 || !strings.Contains(out, "hello from 203.0.113.10:8081") {
		t.Errorf("mode allow: listed port: %d %q", code, out)
	}
	if out, code := fetch(t, allow, "203.0.113.10:8080"); code == 0 || code == 124 {
		t.Errorf("mode allow reached a port not listed (or hung): %d %q", code, out)
	}

	// Two sandboxes cannot reach each other.
	inet2 := create(sandbox.Network{Mode: NetworkInternet})
	st2, _ := sbdir.Read(rt.dir(inet2.ID()))
	if st2.Init.Net.Addr.Overlaps(st.Init.Net.Addr) {
		t.Fatalf("two sandboxes share network %s", st.Init.Net.Addr)
	}
	run(t, inet2, "nohup python3 -m http.server 8000 >/dev/null 2>&1 &")
	if out, code := fetch(t, inet, st2.Init.Net.Addr.Addr().String()+":8000"); code == 0 || code == 124 {
		t.Errorf("one sandbox reached another (or hung): %d %q", code, out)
	}

	// Stop, resume: the network comes back. Delete: nothing is left.
	if err := rt.Stop(ctx, inet.ID()); err != nil {
		t.Fatal(err)
	}
	if _, err := netlink.LinkByName(st.Init.Net.HostIf); err == nil {
		t.Errorf("interface %s outlived its stopped sandbox", st.Init.Net.HostIf)
	}
	if n := sandboxRules(t, inet.ID()); n != 0 {
		t.Errorf("%d rules of a stopped sandbox remain", n)
	}
	inet, err = rt.Resume(ctx, inet.ID())
	if err != nil {
		t.Fatal(err)
	}
	if out, code := fetch(t, inet, "203.0.113.10:8080"); code != 0 {
		t.Errorf("after resume: %d %q", code, out)
	}
	if err := rt.Delete(ctx, inet.ID()); err != nil {
		t.Fatal(err)
	}
	if _, err := netlink.LinkByName(st.Init.Net.HostIf); err == nil {
		t.Errorf("interface %s outlived its sandbox", st.Init.Net.HostIf)
	}
	if n := sandboxRules(t, inet.ID()); n != 0 {
		t.Errorf("%d rules of a deleted sandbox remain", n)
	}
}

func sandboxRules(t *testing.T, id string) int {
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	rules, err := c.GetRules(host.Table, host.SandboxChain)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range rules {
		if string(r.UserData) == host.Tag(id) {
			n++
		}
	}
	return n
}

func TestNetworkBadSpecs(t *testing.T) {
	rt := newRuntime(t)
	for _, n := range []sandbox.Network{
		{Mode: "host"},
		{Mode: NetworkAllow},
		{Mode: NetworkInternet, Allow: []string{"1.2.3.4"}},
		{Allow: []string{"1.2.3.4"}},
		{Mode: NetworkAllow, Allow: []string{"1.2.3.4:99999"}},
		{Mode: NetworkAllow, Allow: []string{"2001:db8::1"}},
		{Mode: NetworkAllow, Allow: []string{"no-such-host.invalid:443"}},
	} {
		_, err := rt.Create(context.Background(), sandbox.Spec{Network: n})
		if !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("network %+v: err = %v, want ErrInvalid", n, err)
		}
	}
}

// TestPidsTooLow: a pids limit the daemon itself would exhaust is refused
// at create, saying what to ask for, and leaves nothing behind.
func TestPidsTooLow(t *testing.T) {
	rt := newRuntime(t)
	before, _ := os.ReadDir(rt.cfg.Dir)
	for _, n := range []int{1, 8, MinPids - 1} {
		_, err := rt.Create(context.Background(), sandbox.Spec{Limits: sandbox.Limits{Pids: n}})
		if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), fmt.Sprintf("at least %d", MinPids)) {
			t.Errorf("pids %d: err = %v, want ErrInvalid saying to ask for at least %d", n, err, MinPids)
		}
	}
	after, _ := os.ReadDir(rt.cfg.Dir)
	if len(after) != len(before) {
		t.Errorf("refused creates left %d entries in the state dir (had %d)", len(after), len(before))
	}
	s, err := rt.Create(context.Background(), sandbox.Spec{Limits: sandbox.Limits{Pids: MinPids}})
	if err != nil {
		t.Fatalf("pids %d: %v", MinPids, err)
	}
	defer rt.Delete(context.Background(), s.ID())
	var out strings.Builder
	if st, err := s.Exec(context.Background(), sandbox.ExecRequest{Cmd: "sh", Args: []string{"-c", "echo ok"}, Stdout: &out}); err != nil || st.Code != 0 || out.String() != "ok\n" {
		t.Errorf("a command under the lowest pids limit: %q %+v %v", out.String(), st, err)
	}
}
