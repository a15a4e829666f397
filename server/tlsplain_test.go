package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// TestPlainOnTLSPort: with TLS on, the same port answers plain HTTP for a
// sandbox's port by host name (the Agents SDK's E2B client takes a host
// with a port for plain HTTP), and refuses everything else in plain text
// (the API, envd, a key sent in the clear) with a 400 that says to use
// https, while TLS (HTTP/2 too) goes on as before.
func TestPlainOnTLSPort(t *testing.T) {
	es := newE2BServer(t, Config{})
	key := es.e2bKey(t, "plain")
	_, port, _ := strings.Cut(es.domain, ":")
	addr := "127.0.0.1:" + port
	plain := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	}}}
	get := func(c *http.Client, url string, hdr map[string]string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", url, nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(data)
	}

	sb := es.e2bCreate(t, key, map[string]any{})
	for _, url := range []string{
		"http://" + es.domain + "/health",
		"http://" + es.domain + "/sandboxes",
		fmt.Sprintf("http://49983-%s.%s/health", sb.SandboxID, es.domain),
	} {
		code, body := get(plain, url, map[string]string{"X-API-Key": key})
		if code != 400 || !strings.Contains(body, "https://") {
			t.Errorf("plain GET %s: %d %s, want 400 saying to use https", url, code, body)
		}
	}

	es.exec(t, key, sb.SandboxID, "mkdir -p /tmp/www && echo served in plain text > /tmp/www/index.html && (cd /tmp/www && nohup python3 -m http.server 8000 >/dev/null 2>&1 &)")
	url := fmt.Sprintf("http://8000-%s.%s/", sb.SandboxID, es.domain)
	// A port's host name does not carry envd, named in E2B's headers,
	// into plain text.
	code, body := get(plain, url+"health", map[string]string{"E2b-Sandbox-Id": sb.SandboxID, "E2b-Sandbox-Port": "49983",
		"X-Access-Token": sb.EnvdAccessToken})
	if code != 400 || !strings.Contains(body, "https://") {
		t.Errorf("plain GET %s naming envd in headers: %d %s, want 400 saying to use https", url, code, body)
	}
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if code, body = get(plain, url, nil); code == 200 {
			break
		}
	}
	if code != 200 || body != "served in plain text\n" {
		t.Errorf("plain GET %s: %d %q", url, code, body)
	}

	// TLS on the same port, HTTP/2 as the E2B SDK asks.
	ca, err := os.ReadFile(es.caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true,
		DialContext: plain.Transport.(*http.Transport).DialContext}
	secure := &http.Client{Transport: tr}
	req, _ := http.NewRequest("GET", "https://"+es.domain+"/health", nil)
	resp, err := secure.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.ProtoMajor != 2 {
		t.Errorf("https GET /health: %d over %s, want 200 over HTTP/2", resp.StatusCode, resp.Proto)
	}
}

// TestSnifferCloseEndsSilentConns: a client that connects and sends
// nothing is closed when the listener is, not left (its goroutine, its
// connection) until the sniff's timeout.
func TestSnifferCloseEndsSilentConns(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sn := &sniffer{Listener: l, conns: make(chan net.Conn), errs: make(chan error), done: make(chan struct{})}
	go sn.loop()
	var conns []net.Conn
	for range 5 {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	// Wait until all five are being sniffed.
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		sn.mu.Lock()
		n := len(sn.pending)
		sn.mu.Unlock()
		if n == 5 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("%d connections being sniffed, want 5", n)
		}
	}
	sn.Close()
	for _, c := range conns {
		c.SetReadDeadline(time.Now().Add(sniffTimeout / 2))
		if _, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("silent client after Close: read %v, want EOF (closed by the server at once)", err)
		}
	}
}
