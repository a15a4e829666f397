package sbutil

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/sandbox"
)

// ParseAllow reads each form of entry, and refuses bad ports, IPv6 and
// what check refuses, saying which entry and why.
func TestParseAllow(t *testing.T) {
	noPrivate := func(p netip.Prefix) error {
		if p.Overlaps(netip.MustParsePrefix("10.0.0.0/8")) {
			return errors.New("is private")
		}
		return nil
	}
	got, err := ParseAllow(context.Background(), []string{"203.0.113.7", "198.51.100.0/24", "203.0.113.8:443", "198.51.100.77/24"}, noPrivate)
	want := []Allow{
		{netip.MustParsePrefix("203.0.113.7/32"), 0}, {netip.MustParsePrefix("198.51.100.0/24"), 0},
		{netip.MustParsePrefix("203.0.113.8/32"), 443}, {netip.MustParsePrefix("198.51.100.0/24"), 0},
	}
	if err != nil || len(got) != len(want) {
		t.Fatalf("got %v, %v; want %v", got, err, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d: %v, want %v", i, got[i], want[i])
		}
	}
	for entry, says := range map[string]string{
		"203.0.113.7:0":            "port",
		"203.0.113.7:70000":        "port",
		"[2001:db8::1]:443":        "IPv4",
		"10.1.2.3":                 "is private",
		"10.0.0.0/7":               "is private",
		"no-such-host.invalid:443": "does not resolve",
	} {
		_, err := ParseAllow(context.Background(), []string{entry}, noPrivate)
		if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), says) || !strings.Contains(err.Error(), entry) {
			t.Errorf("%q: %v, want ErrInvalid naming it and saying %q", entry, err, says)
		}
	}
}
