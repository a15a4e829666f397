package connlimit

import (
	"net/netip"
	"syscall"
	"testing"
)

func TestClientKey(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"192.0.2.1", "192.0.2.1"},
		{"2001:db8:1:2:3:4:5:6", "2001:db8:1:2::"},
		{"2001:db8:1:2:ffff::1", "2001:db8:1:2::"},
	} {
		if got := clientKey(netip.MustParseAddr(tc.in)).String(); got != tc.want {
			t.Errorf("clientKey(%s) = %s, want %s", tc.in, got, tc.want)
		}
	}
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	if n := DefaultMaxConns(); n < 64 || uint64(n) >= rl.Cur {
		t.Errorf("DefaultMaxConns() = %d with an open-file limit of %d: want a cap below it", n, rl.Cur)
	}
}
