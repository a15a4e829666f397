// Package egress is the policy for connections Cove makes on a tenant's
// behalf (a run's model base_url, its webhook, a manifest's git_repo):
// non-public targets are refused unless the operator lists them, and the
// check is made on the address actually dialled.
package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
)

// Connections the server makes on a tenant's behalf (a run's model
// base_url, its webhook, a manifest's git_repo) go where the tenant says,
// from inside the operator's network: left alone, a tenant could reach
// the server's own loopback services, its LAN or the cloud's metadata
// endpoint and read the answers. Such targets are refused unless the
// operator lists them (cove serve --outbound-allow), and the check is
// made on the address actually dialled, so neither a DNS answer that
// changes after a check (rebinding) nor a redirect gets around it.

// ErrRefused marks a connection the policy refused.
var ErrRefused = errors.New("refused by the server's outbound policy")

// Error is a refused connection: what was refused and why.
type Error struct {
	host string
	addr netip.Addr
	// what the address is ("a loopback address", ...).
	what string
}

func (e *Error) Error() string {
	target := e.addr.String()
	if e.host != "" && e.host != target {
		target = e.host + " (" + target + ")"
	}
	return fmt.Sprintf("%s is %s; the server does not connect to such addresses for a tenant unless its operator allows them (cove serve --outbound-allow)", target, e.what)
}

func (e *Error) Unwrap() []error { return []error{ErrRefused, sandbox.ErrInvalid} }

// nonPublic are the ranges that are not the public internet, each with
// what it is. Addresses in none of them are public.
var nonPublic = []struct {
	prefix netip.Prefix
	what   string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "an unspecified (\"this network\") address"},
	{netip.MustParsePrefix("10.0.0.0/8"), "a private address"},
	{netip.MustParsePrefix("100.64.0.0/10"), "a shared (carrier-grade NAT) address"},
	{netip.MustParsePrefix("127.0.0.0/8"), "a loopback address"},
	{netip.MustParsePrefix("169.254.0.0/16"), "a link-local address"},
	{netip.MustParsePrefix("172.16.0.0/12"), "a private address"},
	{netip.MustParsePrefix("192.0.0.0/24"), "a reserved address"},
	{netip.MustParsePrefix("192.0.2.0/24"), "a documentation address"},
	{netip.MustParsePrefix("192.168.0.0/16"), "a private address"},
	{netip.MustParsePrefix("198.18.0.0/15"), "a benchmarking address"},
	{netip.MustParsePrefix("198.51.100.0/24"), "a documentation address"},
	{netip.MustParsePrefix("203.0.113.0/24"), "a documentation address"},
	{netip.MustParsePrefix("224.0.0.0/4"), "a multicast address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "a reserved address"},
	{netip.MustParsePrefix("::/128"), "an unspecified address"},
	{netip.MustParsePrefix("::1/128"), "a loopback address"},
	{netip.MustParsePrefix("64:ff9b::/96"), "a NAT64 address"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "a NAT64 address"},
	{netip.MustParsePrefix("100::/64"), "a discard address"},
	{netip.MustParsePrefix("2001:db8::/32"), "a documentation address"},
	{netip.MustParsePrefix("2002::/16"), "a 6to4 address"},
	{netip.MustParsePrefix("fc00::/7"), "a private (unique local) address"},
	{netip.MustParsePrefix("fe80::/10"), "a link-local address"},
	{netip.MustParsePrefix("fec0::/10"), "a site-local address"},
	{netip.MustParsePrefix("ff00::/8"), "a multicast address"},
}

// metadata are the cloud metadata endpoints: never reached for a tenant,
// whatever the operator allows, as they hand out the machine's own
// credentials.
var metadata = []netip.Addr{
	netip.MustParseAddr("169.254.169.254"), // AWS, GCP, Azure, OpenStack, ...
	netip.MustParseAddr("169.254.170.2"),   // AWS ECS task credentials
	netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud
	netip.MustParseAddr("fd00:ec2::254"),   // AWS over IPv6
}

// addrClass says what a non-public address is, "" for a public one.
func addrClass(a netip.Addr) string {
	a = a.Unmap()
	if a.Zone() != "" {
		return "a link-local address"
	}
	for _, n := range nonPublic {
		if n.prefix.Contains(a) {
			return n.what
		}
	}
	if !a.IsGlobalUnicast() {
		return "not a public unicast address"
	}
	return ""
}

// rule is one entry of the operator's allow list: an address range
// or a host name, and a port (0: any).
type rule struct {
	prefix netip.Prefix // valid for a range
	host   string       // lower case, for a name
	port   uint16
}

// parseAllow reads the operator's allow list: CIDRs, addresses or
// host names, each with an optional ":port".
func parseAllow(entries []string) ([]rule, error) {
	var rules []rule
	for _, e := range entries {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		bad := func() error {
			return fmt.Errorf("outbound allow entry %q: want a CIDR, an address or a host name, each with an optional :port (10.0.0.0/8, 10.0.0.0/8:443, 127.0.0.1:11434, [fd00::1]:8080, ollama.lan:11434): %w", e, sandbox.ErrInvalid)
		}
		if cidr, rest, ok := strings.Cut(e, "/"); ok {
			// A CIDR, with a port after its length when it has one.
			bits, p, hasPort := strings.Cut(rest, ":")
			prefix, err := netip.ParsePrefix(cidr + "/" + bits)
			if err != nil {
				return nil, bad()
			}
			var port uint64
			if hasPort {
				if port, err = strconv.ParseUint(p, 10, 16); err != nil || port == 0 {
					return nil, bad()
				}
			}
			if prefix.Addr().Is4In6() {
				prefix = netip.PrefixFrom(prefix.Addr().Unmap(), prefix.Bits()-96)
			}
			rules = append(rules, rule{prefix: prefix.Masked(), port: uint16(port)})
			continue
		}
		if a, err := netip.ParseAddr(e); err == nil {
			rules = append(rules, rule{prefix: netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())})
			continue
		}
		host, port := e, uint16(0)
		if h, p, err := net.SplitHostPort(e); err == nil {
			n, err := strconv.ParseUint(p, 10, 16)
			if err != nil || n == 0 {
				return nil, bad()
			}
			host, port = h, uint16(n)
		}
		if a, err := netip.ParseAddr(host); err == nil {
			rules = append(rules, rule{prefix: netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()), port: port})
			continue
		}
		if !validHostName(host) {
			return nil, bad()
		}
		rules = append(rules, rule{host: strings.ToLower(strings.TrimSuffix(host, ".")), port: port})
	}
	return rules, nil
}

// validHostName reports whether s is a DNS name (letters, digits, '-'
// and '.').
func validHostName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}

// Policy is the policy for connections made on a tenant's behalf. Make
// it with New.
type Policy struct {
	allow []rule
	// ownAddrs lists this host's own addresses (those of its interfaces):
	// a public one reaches the host's own services as surely as loopback.
	ownAddrs func() []netip.Addr
	// lookup resolves host names (Config.LookupHost or the system's).
	lookup func(ctx context.Context, host string) ([]netip.Addr, error)
	// client makes HTTP requests under the policy.
	client *http.Client
}

// Client makes HTTP requests under the policy (redirects included).
func (e *Policy) Client() *http.Client { return e.client }

// Lookup resolves a host name as the policy does (for a caller that pins
// the addresses it checked, as git does).
func (e *Policy) Lookup(ctx context.Context, host string) ([]netip.Addr, error) {
	return e.lookup(ctx, host)
}

// New returns the policy that allows, beyond the public internet, the
// operator's entries (CIDRs, addresses or host names, each with an
// optional ":port"), resolving names with lookup (nil: the system's
// resolver). An entry it cannot read is an error wrapping
// sandbox.ErrInvalid.
func New(allow []string, lookup func(ctx context.Context, host string) ([]netip.Addr, error)) (*Policy, error) {
	rules, err := parseAllow(allow)
	if err != nil {
		return nil, err
	}
	if lookup == nil {
		lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	e := &Policy{allow: rules, lookup: lookup, ownAddrs: hostAddrs}
	e.client = &http.Client{
		Transport: &http.Transport{
			// No proxy: through one, the only connection checked would
			// be the one to the proxy.
			Proxy:                 nil,
			DialContext:           e.Dial,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          100,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ExpectContinueTimeout: time.Second,
		},
		// Each redirect dials through the same check.
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 5 {
				return errors.New("stopped after 5 redirects")
			}
			return nil
		},
	}
	return e, nil
}

// Check says whether the server may connect to addr (host is the name
// it was reached by, "" when none) for a tenant: nil, or an *Error.
func (e *Policy) Check(host string, addr netip.AddrPort) error {
	a := addr.Addr().Unmap()
	for _, m := range metadata {
		if a == m {
			return &Error{host: host, addr: a, what: "a cloud metadata endpoint"}
		}
	}
	what := addrClass(a)
	if what == "" {
		for _, own := range e.ownAddrs() {
			if a == own {
				what = "one of this server's own addresses"
				break
			}
		}
	}
	if what == "" {
		return nil
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, r := range e.allow {
		if r.port != 0 && r.port != addr.Port() {
			continue
		}
		if r.prefix.IsValid() && r.prefix.Contains(a) || r.host != "" && r.host == host {
			return nil
		}
	}
	return &Error{host: host, addr: a, what: what}
}

// hostAddrs lists the addresses of this host's interfaces.
func hostAddrs() []netip.Addr {
	ifaddrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, ia := range ifaddrs {
		if p, err := netip.ParsePrefix(ia.String()); err == nil {
			out = append(out, p.Addr().Unmap())
		}
	}
	return out
}

// Resolve returns the addresses of host (itself when it is one), all of
// which the policy allows on port: one refused address refuses the host,
// as the connection could go to any of them.
func (e *Policy) Resolve(ctx context.Context, host string, port uint16) ([]netip.Addr, error) {
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a.Unmap()}
	} else {
		found, err := e.lookup(ctx, host)
		if err != nil || len(found) == 0 {
			return nil, fmt.Errorf("the host %s could not be resolved", host)
		}
		for _, a := range found {
			addrs = append(addrs, a.Unmap())
		}
	}
	for _, a := range addrs {
		if err := e.Check(host, netip.AddrPortFrom(a, port)); err != nil {
			return nil, err
		}
	}
	return addrs, nil
}

// Dial connects to address (host:port) for a tenant: the host is resolved
// once, every address checked, and only those addresses dialled; the
// dialer checks again on the socket itself, so no path to connect skips
// the policy.
func (e *Policy) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	host, p, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	port, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("port %q: %w", p, sandbox.ErrInvalid)
	}
	addrs, err := e.Resolve(ctx, host, uint16(port))
	if err != nil {
		return nil, err
	}
	d := &net.Dialer{
		Timeout: 30 * time.Second,
		Control: func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("dialling %q: %w", address, ErrRefused)
			}
			return e.Check(host, ap)
		},
	}
	var lastErr error
	for _, a := range addrs {
		conn, err := d.DialContext(ctx, network, netip.AddrPortFrom(a, uint16(port)).String())
		if err == nil {
			return conn, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

// CheckURL refuses, before anything is made, a tenant URL (field names it)
// whose host the policy refuses now. The check at dial time is the one
// that counts; this one turns the obvious cases into a 400.
func (e *Policy) CheckURL(ctx context.Context, field, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%s %q is not an http(s) URL: %w", field, raw, sandbox.ErrInvalid)
	}
	port := uint16(80)
	if u.Scheme == "https" {
		port = 443
	}
	if p := u.Port(); p != "" {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return fmt.Errorf("%s %q: port %q is out of range: %w", field, raw, p, sandbox.ErrInvalid)
		}
		port = uint16(n)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = e.Resolve(ctx, u.Hostname(), port)
	var refused *Error
	if errors.As(err, &refused) {
		return fmt.Errorf("%s: %w", field, err)
	}
	// A name that does not resolve now may later; the dial decides.
	return nil
}
