package server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/sandbox/sandboxtest/fake"
)

// The connection caps of Server.HTTPServer (limits.go). The timeouts
// and the per-client cap are tested through the real binary
// (internal/cli/attack_conns_test.go); here, the total cap and clients
// behind trusted proxies.

// limitServer serves a server over a fake runtime (only /health and
// the sign-in's body read are used) with lim, and returns its address.
func limitServer(t *testing.T, lim Limits) string {
	t.Helper()
	s, err := New(Config{Runtime: fake.New(), Store: nilStore{}})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs, ll := s.HTTPServer(l, lim)
	go hs.Serve(ll)
	t.Cleanup(func() { hs.Close() })
	return l.Addr().String()
}

// limitGet sends GET /health on c with headers and returns the
// response's status, or an error when the connection was closed first.
func limitGet(c net.Conn, hdr string) (int, error) {
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := fmt.Fprintf(c, "GET /health HTTP/1.1\r\nHost: x\r\n%s\r\n", hdr); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

func limitDial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestConnLimitTotal: over the total cap, a new connection is closed at
// once, whoever opens it; one closed makes room.
func TestConnLimitTotal(t *testing.T) {
	addr := limitServer(t, Limits{MaxConns: 3, MaxConnsPerClient: -1})
	var held []net.Conn
	for i := range 3 {
		c := limitDial(t, addr)
		if code, err := limitGet(c, ""); code != 200 {
			t.Fatalf("connection %d within the cap: %d %v", i, code, err)
		}
		held = append(held, c)
	}
	if code, err := limitGet(limitDial(t, addr), ""); err == nil {
		t.Errorf("a fourth connection over a total cap of 3 was answered: %d", code)
	}
	held[0].Close()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		code, err := limitGet(limitDial(t, addr), "")
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no room after a connection closed: %d %v", code, err)
		}
	}
}

// TestConnLimitTrustedProxy: behind a trusted proxy, the client is the
// X-Forwarded-For address the proxy wrote (the right-most one not a
// proxy's), and its concurrent requests are capped; what a client
// writes itself into X-Forwarded-For does not make it someone else.
// From an untrusted address X-Forwarded-For is ignored.
func TestConnLimitTrustedProxy(t *testing.T) {
	addr := limitServer(t, Limits{MaxConnsPerClient: 2, ReadTimeout: time.Minute,
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	// Two requests in flight from 203.0.113.5: bodies never finished, so
	// the handler waits on them.
	for range 2 {
		c := limitDial(t, addr)
		fmt.Fprintf(c, "POST /v1/session HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 203.0.113.5\r\nX-Cove-CSRF: -\r\nContent-Length: 100\r\n\r\n{")
	}
	time.Sleep(200 * time.Millisecond) // let the server take them in (no effect on what passes)
	for _, tc := range []struct {
		xff  string
		want int
	}{
		{"203.0.113.5", 429},
		{"198.51.100.7, 203.0.113.5", 429}, // a forged first hop changes nothing
		{"203.0.113.5, 127.0.0.1", 429},    // a proxy's own hop is skipped
		{"203.0.113.6", 200},
		{"", 200}, // the proxy itself
	} {
		hdr := ""
		if tc.xff != "" {
			hdr = "X-Forwarded-For: " + tc.xff + "\r\n"
		}
		var code int
		var err error
		// The two requests may still be on their way in: retry a 200
		// that should be a 429 for a while.
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			code, err = limitGet(limitDial(t, addr), hdr)
			if code == tc.want || time.Now().After(deadline) {
				break
			}
		}
		if code != tc.want {
			t.Errorf("X-Forwarded-For %q: %d %v, want %d", tc.xff, code, err, tc.want)
		}
	}

	// A client not behind a trusted proxy cannot claim another address.
	addr2 := limitServer(t, Limits{MaxConnsPerClient: 1})
	c := limitDial(t, addr2)
	if code, err := limitGet(c, ""); code != 200 {
		t.Fatalf("first connection: %d %v", code, err)
	}
	if code, _ := limitGet(limitDial(t, addr2), "X-Forwarded-For: 203.0.113.9\r\n"); code != 429 {
		t.Errorf("a second connection claiming another address: %d, want 429", code)
	}
}
