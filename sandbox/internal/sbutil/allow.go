package sbutil

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
)

// Allow lets a sandbox reach Net, on Port (TCP and UDP) when set.
type Allow struct {
	Net  netip.Prefix
	Port uint16
}

// ParseAllow reads a spec's Network.Allow entries, the same for every
// runtime: "203.0.113.7", "203.0.113.0/24", "203.0.113.7:443",
// "example.com:443" (resolved now, every IPv4 address). check vets each
// address or CIDR (for a host name, each address it resolves to: the
// host name is then said in the error); its error completes "p ...".
func ParseAllow(ctx context.Context, entries []string, check func(p netip.Prefix) error) ([]Allow, error) {
	var out []Allow
	for _, e := range entries {
		host, port := e, ""
		if h, p, err := net.SplitHostPort(e); err == nil {
			host, port = h, p
		}
		var pn uint16
		if port != "" {
			n, err := strconv.ParseUint(port, 10, 16)
			if err != nil || n == 0 {
				return nil, fmt.Errorf("network allow %q: port %q is not 1-65535: %w", e, port, sandbox.ErrInvalid)
			}
			pn = uint16(n)
		}
		nets, err := allowNets(ctx, e, host, check)
		if err != nil {
			return nil, err
		}
		for _, p := range nets {
			out = append(out, Allow{Net: p, Port: pn})
		}
	}
	return out, nil
}

// allowNets is what host (an address, a CIDR or a name) of entry e
// names, each vetted by check.
func allowNets(ctx context.Context, e, host string, check func(p netip.Prefix) error) ([]netip.Prefix, error) {
	var nets []netip.Prefix
	if p, err := netip.ParsePrefix(host); err == nil {
		nets = []netip.Prefix{p.Masked()}
	} else if a, err := netip.ParseAddr(host); err == nil {
		nets = []netip.Prefix{netip.PrefixFrom(a, a.BitLen())}
	}
	for _, p := range nets {
		if !p.Addr().Is4() {
			return nil, fmt.Errorf("network allow %q: only IPv4 is routed to sandboxes: %w", e, sandbox.ErrInvalid)
		}
		if err := check(p); err != nil {
			return nil, fmt.Errorf("network allow %q: %s %w: %w", e, showPrefix(p), err, sandbox.ErrInvalid)
		}
	}
	if nets != nil {
		return nets, nil
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	addrs, err := net.DefaultResolver.LookupNetIP(rctx, "ip4", host)
	cancel()
	if err != nil || len(addrs) == 0 {
		return nil, fmt.Errorf("network allow %q: %q does not resolve to an IPv4 address here (%v); give an address or CIDR: %w", e, host, err, sandbox.ErrInvalid)
	}
	for _, a := range addrs {
		p := netip.PrefixFrom(a.Unmap(), 32)
		if err := check(p); err != nil {
			return nil, fmt.Errorf("network allow %q: %s resolves to %s, which %w: %w", e, host, p.Addr(), err, sandbox.ErrInvalid)
		}
		nets = append(nets, p)
	}
	return nets, nil
}

// showPrefix writes a single address without its /32.
func showPrefix(p netip.Prefix) string {
	if p.IsSingleIP() {
		return p.Addr().String()
	}
	return p.String()
}
