package egress

import (
	"net/netip"
	"strings"
	"testing"
)

// TestEgressPolicy: what the policy refuses and what the operator's list
// lets through.
func TestEgressPolicy(t *testing.T) {
	e, err := New([]string{"10.1.0.0/16", "127.0.0.1:11434", "ollama.lan", "[fd00::1]:8080", "169.254.0.0/16", "192.168.7.0/24:443", "fd00:7::/32:8443"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		host, addr string
		ok         bool
	}{
		{"", "93.184.216.34:443", true},
		{"", "[2606:4700::1111]:443", true},
		{"", "127.0.0.1:443", false},
		{"", "127.0.0.1:11434", true},
		{"", "[::ffff:127.0.0.1]:11434", true},
		{"", "[::ffff:127.0.0.1]:80", false},
		{"", "10.1.2.3:80", true},
		{"", "10.2.0.1:80", false},
		{"ollama.lan", "192.168.1.5:11434", true},
		{"other.lan", "192.168.1.5:11434", false},
		{"", "[fd00::1]:8080", true},
		{"", "[fd00::1]:8081", false},
		{"", "169.254.1.1:80", true},
		{"", "169.254.169.254:80", false}, // metadata, whatever the list says
		{"", "100.100.100.200:80", false},
		{"", "[fe80::1]:80", false},
		{"", "[::]:80", false},
		{"", "0.0.0.0:80", false},
		{"", "100.64.0.1:80", false},
		{"", "[64:ff9b::7f00:1]:80", false},
		{"", "239.1.1.1:80", false},
		{"", "192.168.7.9:443", true},
		{"", "192.168.7.9:80", false},
		{"", "[fd00:7::5]:8443", true},
		{"", "[fd00:7::5]:443", false},
	} {
		err := e.Check(tc.host, netip.MustParseAddrPort(tc.addr))
		if (err == nil) != tc.ok {
			t.Errorf("check(%q, %s) = %v, want allowed %v", tc.host, tc.addr, err, tc.ok)
		}
	}
	// A public address of this server's own is the host's own services:
	// refused as loopback is, unless listed.
	e.ownAddrs = func() []netip.Addr { return []netip.Addr{netip.MustParseAddr("93.184.216.34")} }
	if err := e.Check("", netip.MustParseAddrPort("93.184.216.34:443")); err == nil || !strings.Contains(err.Error(), "own addresses") {
		t.Errorf("check of the server's own public address: %v, want refused as its own", err)
	}
	if err := e.Check("", netip.MustParseAddrPort("93.184.216.35:443")); err != nil {
		t.Errorf("check of another public address: %v", err)
	}
	for _, bad := range []string{"10.0.0.0/33", "10.0.0.0/8:0", "not a host", "host:0", "host:99999", "http://x"} {
		if _, err := New([]string{bad}, nil); err == nil {
			t.Errorf("allow entry %q accepted", bad)
		}
	}
}
