package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/cove-sandbox/cove/api"
)

// Connections a client holds open on `cove serve`, authenticated or
// not: idle, dribbled, never finished, or too many. The server's
// timeouts are set short here (1 s) so the tests run fast; what they
// must never cut (an exec stream, server-sent events through a port, a
// terminal's WebSocket, a slow upload that keeps moving) lasts longer.

// connsSSEApp is a server-sent events source for inside a sandbox: three
// events, 1.5 s apart (each gap longer than the server's timeouts).
const connsSSEApp = `
import http.server, sys, time
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for i in range(3):
            time.sleep(1.5)
            self.wfile.write(b"data: tick %d\n\n" % i)
            self.wfile.flush()
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
`

// connsStartApp writes a Python script into sandbox id through the API
// and starts it in the background with port as its argument.
func connsStartApp(t *testing.T, url, key, id, script string, port int) {
	t.Helper()
	name := fmt.Sprintf("app%d.py", port)
	req, _ := http.NewRequest("PUT", url+"/v1/sandboxes/"+id+"/files?path="+name, strings.NewReader(script))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("writing %s: %d", name, resp.StatusCode)
	}
	if code := apiCall(t, "POST", url+"/v1/sandboxes/"+id+"/exec", key, api.Exec{Cmd: "python3", Args: []string{name, fmt.Sprint(port)}, Background: true, Tag: name}, nil); code != 200 {
		t.Fatalf("starting %s: %d", name, code)
	}
}

// connsDial opens a TCP connection to addr from the loopback address
// from (each 127.x address is a client of its own to the server).
func connsDial(t *testing.T, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 10 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dialing %s from %s: %v", addr, from, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// connsClient is an HTTP client whose connections come from the
// loopback address from.
func connsClient(from string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 10 * time.Second}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
}

// connsClosed waits (up to a generous limit: a busy machine) for the
// server to close c, reading and dropping whatever it sends first; it
// returns what was read, and false if c is still open at the limit.
func connsClosed(c net.Conn, limit time.Duration) (string, bool) {
	c.SetReadDeadline(time.Now().Add(limit))
	var got bytes.Buffer
	_, err := io.Copy(&got, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return got.String(), false
	}
	return got.String(), true
}

// TestAttackConns: idle keep-alive connections are closed after the idle
// timeout; a client that dribbles its headers, or sends headers and
// never its body, is cut; one client holding more connections than its
// cap is refused with a 429 that says why while another is served; and
// exec streams, server-sent events, a terminal's WebSocket and a slow
// upload that outlast every timeout are not cut.
func TestAttackConns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("cove serve runs the local runtime, which needs root (CI runs as root)")
	}
	home, data := serveHome(t, "cc")
	p := startServe(t, home, data, "--read-header-timeout", "1s", "--idle-timeout", "1s", "--read-timeout", "1s", "--write-timeout", "1s",
		"--max-conns-per-client", "4")
	addr := strings.TrimPrefix(p.url, "http://")
	var k api.Key
	if code := apiCall(t, "POST", p.url+"/v1/keys", p.admin, api.CreateKey{Name: "conns", NewTeam: "conns"}, &k); code != 201 {
		t.Fatalf("making a key: %d", code)
	}
	key := k.Secret
	var sb api.Sandbox
	if code := apiCall(t, "POST", p.url+"/v1/sandboxes", key, api.CreateSandbox{}, &sb); code != 201 {
		t.Fatalf("create: %d", code)
	}
	const limit = 30 * time.Second // far over the 1 s timeouts

	t.Run("idle keep-alive", func(t *testing.T) {
		c := connsDial(t, "127.0.0.1", addr)
		fmt.Fprintf(c, "GET /health HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != 200 || resp.Close {
			t.Fatalf("GET /health: %d, close %v", resp.StatusCode, resp.Close)
		}
		if _, closed := connsClosed(c, limit); !closed {
			t.Errorf("an idle keep-alive connection is still open after %s", limit)
		}
	})

	t.Run("headers dribbled", func(t *testing.T) {
		c := connsDial(t, "127.0.0.1", addr)
		go func() {
			if _, err := fmt.Fprintf(c, "GET /health HTTP/1.1\r\nHost: %s\r\n", addr); err != nil {
				return
			}
			for i := 0; i < 300; i++ {
				time.Sleep(200 * time.Millisecond)
				if _, err := fmt.Fprintf(c, "X-Slow-%d: 1\r\n", i); err != nil {
					return
				}
			}
		}()
		if got, closed := connsClosed(c, limit); !closed || strings.Contains(got, "200 OK") {
			t.Errorf("a client dribbling its headers: closed %v, got %q", closed, got)
		}
	})

	t.Run("body never sent", func(t *testing.T) {
		for _, req := range []string{
			// Read by the handler: it says the body stalled.
			"POST /v1/session HTTP/1.1\r\nHost: %s\r\nX-Cove-CSRF: -\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{",
			// Not read (no key): the server's own read of it ends too.
			"PUT /v1/sandboxes/sb-x/files?path=a HTTP/1.1\r\nHost: %s\r\nContent-Length: 100\r\n\r\n",
		} {
			c := connsDial(t, "127.0.0.1", addr)
			fmt.Fprintf(c, req, addr)
			got, closed := connsClosed(c, limit)
			if !closed {
				t.Errorf("%.20s... with a body never sent: still open after %s (got %q)", req, limit, got)
			}
			if strings.HasPrefix(req, "POST") && !strings.Contains(got, "stopped arriving") {
				t.Errorf("a stalled body's answer: %q", got)
			}
		}
	})

	t.Run("long streams", func(t *testing.T) {
		// An exec stream silent for longer than every timeout.
		body, _ := json.Marshal(api.Exec{Cmd: "sh", Args: []string{"-c", "echo start; sleep 3; echo done"}})
		req, _ := http.NewRequest("POST", p.url+"/v1/sandboxes/"+sb.ID+"/exec", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		out, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || !strings.Contains(string(out), `"exit_code":0`) || !strings.Contains(string(out), "ZG9uZQ") { // "done"
			t.Errorf("an exec stream longer than the timeouts: %v\n%s", err, out)
		}

		// A slow upload that keeps moving: 3 s, a chunk every 200 ms.
		pr, pw := io.Pipe()
		go func() {
			for i := 0; i < 15; i++ {
				pw.Write(bytes.Repeat([]byte{'x'}, 1000))
				time.Sleep(200 * time.Millisecond)
			}
			pw.Close()
		}()
		req, _ = http.NewRequest("PUT", p.url+"/v1/sandboxes/"+sb.ID+"/files?path=slow.bin", pr)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		var st api.FileInfo
		if code := apiCall(t, "GET", p.url+"/v1/sandboxes/"+sb.ID+"/files/stat?path=slow.bin", key, nil, &st); resp.StatusCode/100 != 2 || code != 200 || st.Size != 15000 {
			t.Errorf("a slow upload: %d, then stat %d %+v", resp.StatusCode, code, st)
		}

		// Server-sent events through a port, 1.5 s apart.
		connsStartApp(t, p.url, key, sb.ID, connsSSEApp, 8100)
		if code := apiCall(t, "POST", p.url+"/v1/sandboxes/"+sb.ID+"/ports/8100", key, api.ExposePort{Public: true}, nil); code != 201 {
			t.Fatalf("exposing: %d", code)
		}
		var events string
		for deadline := time.Now().Add(limit); ; {
			resp, err := http.Get(fmt.Sprintf("%s/p/%s/8100/", p.url, sb.ID))
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 || time.Now().After(deadline) {
				events = fmt.Sprintf("%d %v %s", resp.StatusCode, err, b)
				break
			}
			time.Sleep(100 * time.Millisecond) // the app is starting
		}
		if !strings.Contains(events, "data: tick 2") {
			t.Errorf("server-sent events longer than the timeouts: %s", events)
		}

		// A terminal left idle longer than every timeout, then used.
		ctx, cancel := context.WithTimeout(t.Context(), limit)
		defer cancel()
		ws, _, err := websocket.Dial(ctx, "ws://"+addr+"/v1/sandboxes/"+sb.ID+"/pty", &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + key}}})
		if err != nil {
			t.Fatal(err)
		}
		defer ws.CloseNow()
		time.Sleep(3 * time.Second)
		if err := ws.Write(ctx, websocket.MessageBinary, []byte("echo $((6*7))z; exit\n")); err != nil {
			t.Fatalf("typing after 3 s idle: %v", err)
		}
		var term strings.Builder
		for !strings.Contains(term.String(), "42z") {
			_, msg, err := ws.Read(ctx)
			if err != nil {
				t.Fatalf("the terminal after 3 s idle: %v (got %q)", err, term.String())
			}
			term.Write(msg)
		}
	})

	t.Run("cap per client", func(t *testing.T) {
		// One client (127.0.0.3) holds four exec streams: its cap.
		busy := connsClient("127.0.0.3")
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		started := make(chan error, 4)
		for range 4 {
			go func() {
				body, _ := json.Marshal(api.Exec{Cmd: "sh", Args: []string{"-c", "echo up; sleep 60"}})
				req, _ := http.NewRequestWithContext(ctx, "POST", p.url+"/v1/sandboxes/"+sb.ID+"/exec", bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+key)
				resp, err := busy.Do(req)
				if err != nil {
					started <- err
					return
				}
				defer resp.Body.Close()
				line, err := bufio.NewReader(resp.Body).ReadString('\n')
				if err == nil && resp.StatusCode != 200 {
					err = fmt.Errorf("%d %s", resp.StatusCode, line)
				}
				started <- err
				io.Copy(io.Discard, resp.Body)
			}()
		}
		for range 4 {
			if err := <-started; err != nil {
				t.Fatalf("an exec stream within the cap: %v", err)
			}
		}
		// A fifth connection of the same client: refused, saying why.
		resp, err := connsClient("127.0.0.3").Get(p.url + "/health")
		if err != nil {
			t.Fatalf("a connection over the cap got no answer: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(b), "--max-conns-per-client") {
			t.Errorf("a fifth connection: %d %s, want 429 naming the cap", resp.StatusCode, b)
		}
		// Another client is served meanwhile.
		resp, err = connsClient("127.0.0.4").Get(p.url + "/health")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("another client while the first is at its cap: %v %v", err, resp)
		}
		resp.Body.Close()
		// Many more from the capped client are closed; the server lives.
		for range 40 {
			if c, err := net.DialTCP("tcp", &net.TCPAddr{IP: net.ParseIP("127.0.0.3")}, must(net.ResolveTCPAddr("tcp", addr))); err == nil {
				defer c.Close()
			}
		}
		if code := apiCall(t, "GET", p.url+"/v1/sandboxes", key, nil, nil); code != 200 {
			t.Errorf("the API after a flood of connections: %d", code)
		}
		// Streams closed, the client is served again.
		cancel()
		busy.CloseIdleConnections()
		for deadline := time.Now().Add(limit); ; time.Sleep(200 * time.Millisecond) {
			resp, err := connsClient("127.0.0.3").Get(p.url + "/health")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("the client is still refused after its streams closed: %v %v", err, resp)
			}
		}
	})
}
