package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/sandbox"
)

// echoApp is an HTTP server for inside a sandbox: it answers with what
// it was sent, as JSON, so a test sees the request as the app saw it.
const echoApp = `
import http.server, json, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = json.dumps({"method": self.command, "path": self.path,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "body": self.rfile.read(n).decode()}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Set-Cookie", "app=1; Path=/")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_POST = do_GET
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
`

// wsEchoApp is a WebSocket echo server in plain Python (no websocket
// module in the standard library): the RFC 6455 handshake, then each
// text or binary frame sent back unmasked.
const wsEchoApp = `
import base64, hashlib, socket, sys, threading
def handle(c):
    f = c.makefile("rb")
    key = ""
    while True:
        line = f.readline()
        if line in (b"\r\n", b""): break
        k, _, v = line.decode().partition(":")
        if k.strip().lower() == "sec-websocket-key": key = v.strip()
    acc = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
    c.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n" % acc).encode())
    while True:
        h = f.read(2)
        if len(h) < 2: break
        op, n = h[0] & 15, h[1] & 127
        if n == 126: n = int.from_bytes(f.read(2), "big")
        elif n == 127: n = int.from_bytes(f.read(8), "big")
        mask = f.read(4) if h[1] & 128 else b"\0\0\0\0"
        data = bytes(b ^ mask[i % 4] for i, b in enumerate(f.read(n)))
        if op == 8:
            c.sendall(bytes([136, 2]) + data[:2]); break
        if op in (1, 2):
            hdr = bytes([128 | op, len(data)]) if len(data) < 126 else bytes([128 | op, 126]) + len(data).to_bytes(2, "big")
            c.sendall(hdr + data)
    c.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen()
while True:
    c, _ = s.accept()
    threading.Thread(target=handle, args=(c,), daemon=True).start()
`

// startApp runs a Python script in sandbox id as a tagged background
// process, the way a user's dev server runs, and waits until it listens
// on port.
func startApp(t *testing.T, ts *testServer, id, script string, port int) {
	t.Helper()
	ctx := t.Context()
	sess, err := ts.Runtime.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("app%d.py", port)
	if err := sess.WriteFile(ctx, name, strings.NewReader(script), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := sess.Start(ctx, sandbox.ExecRequest{Cmd: "python3", Args: []string{name, fmt.Sprint(port)}, Tag: name}); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := sess.DialPort(ctx, port)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never listened on %d: %v", name, port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// echoed is what echoApp saw.
type echoed struct {
	Method, Path, Body string
	Headers            map[string]string
}

// proxyGet sends a request and returns its status, body and response.
func proxyGet(t *testing.T, c *http.Client, method, u, host string, hdr map[string]string, body string) (int, []byte, *http.Response) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data, resp
}

func TestPortProxy(t *testing.T) {
	ts := newTestServer(t, Config{Domain: "example.test"})
	key := ts.teamKey(t, "ports")
	sb := ts.create(t, key, api.CreateSandbox{})
	startApp(t, ts, sb.ID, echoApp, 8000)

	var p api.Port
	ts.must(t, http.StatusCreated, "POST", "/v1/sandboxes/"+sb.ID+"/ports/8000", key, nil, &p)
	u, _ := url.Parse(ts.URL)
	wantPath := fmt.Sprintf("%s/p/%s/8000/", ts.URL, sb.ID)
	wantURL := fmt.Sprintf("http://8000-%s.example.test:%s/", sb.ID, u.Port())
	if p.Port != 8000 || p.Public || len(p.Token) != 32 || p.PathURL != wantPath || p.URL != wantURL {
		t.Fatalf("exposed %+v, want path_url %s, url %s and a token", p, wantPath, wantURL)
	}
	tok := map[string]string{portTokenHeader: p.Token}

	t.Run("path", func(t *testing.T) {
		code, data, _ := proxyGet(t, nil, "GET", p.PathURL+"a/b%2Fc?x=1&y=2", "", tok, "")
		var e echoed
		if code != 200 || json.Unmarshal(data, &e) != nil {
			t.Fatalf("GET with the token: %d %s", code, data)
		}
		if e.Path != "/a/b%2Fc?x=1&y=2" {
			t.Errorf("app saw path %q, want the prefix gone and the rest as sent", e.Path)
		}
		if e.Headers[strings.ToLower(portTokenHeader)] != "" || e.Headers["authorization"] != "" {
			t.Errorf("the app saw the token: %v", e.Headers)
		}
		if e.Headers["x-forwarded-prefix"] != "/p/"+sb.ID+"/8000" || e.Headers["host"] != u.Host {
			t.Errorf("forwarding headers: %v", e.Headers)
		}
		noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		code, _, resp := proxyGet(t, noFollow, "GET", strings.TrimSuffix(p.PathURL, "/")+"?x=1", "", tok, "")
		if loc := resp.Header.Get("Location"); code/100 != 3 || loc != "/p/"+sb.ID+"/8000/?x=1" {
			t.Errorf("without the trailing slash: %d to %q, want a redirect to the port's root", code, loc)
		}
		code, data, _ = proxyGet(t, nil, "POST", p.PathURL+"up", "", tok, "payload")
		if json.Unmarshal(data, &e); code != 200 || e.Body != "payload" || e.Method != "POST" {
			t.Errorf("POST: %d %s", code, data)
		}
	})

	t.Run("host", func(t *testing.T) {
		host := fmt.Sprintf("8000-%s.EXAMPLE.test:%s", sb.ID, u.Port())
		code, data, _ := proxyGet(t, nil, "GET", ts.URL+"/v1/sandboxes?q=1", host, tok, "")
		var e echoed
		if code != 200 || json.Unmarshal(data, &e) != nil || e.Path != "/v1/sandboxes?q=1" {
			t.Fatalf("GET by host name: %d %s", code, data)
		}
		// The API itself is not reachable under a port's host name, and
		// other names of the domain go to the API.
		if code, _, _ := proxyGet(t, nil, "GET", ts.URL+"/health", "api.example.test", nil, ""); code != 200 {
			t.Errorf("api.example.test/health: %d", code)
		}
		if code, _, _ := proxyGet(t, nil, "GET", ts.URL+"/x", "8000-"+sb.ID+".example.test", nil, ""); code != http.StatusForbidden {
			t.Errorf("by host name without a token: %d", code)
		}
	})

	t.Run("refused", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			hdr  map[string]string
			q    string
			want string
		}{
			{"no token", nil, "", "is private"},
			{"wrong header", map[string]string{portTokenHeader: "0123"}, "", "wrong token"},
			{"wrong query", nil, "?cove_token=abc", "wrong token"},
			{"an API key is not a port token", map[string]string{"Authorization": "Bearer " + key}, "", "is private"},
		} {
			code, data, _ := proxyGet(t, nil, "GET", p.PathURL+tc.q, "", tc.hdr, "")
			if e := apiError(t, data); code != http.StatusForbidden || e.Code != api.CodeForbidden || !strings.Contains(e.Message, tc.want) {
				t.Errorf("%s: %d %s, want 403 with %q", tc.name, code, data, tc.want)
			}
		}
	})

	t.Run("browser cookie", func(t *testing.T) {
		jar, _ := cookiejar.New(nil)
		c := &http.Client{Jar: jar}
		code, data, resp := proxyGet(t, c, "GET", p.PathURL+"?cove_token="+p.Token+"&keep=1", "", nil, "")
		var e echoed
		if code != 200 || json.Unmarshal(data, &e) != nil || e.Path != "/?keep=1" {
			t.Fatalf("GET with ?cove_token: %d %s (the app must not see the token)", code, data)
		}
		var ck *http.Cookie
		for _, c := range resp.Cookies() {
			if c.Name == portCookie {
				ck = c
			}
		}
		if ck == nil || ck.Path != "/p/"+sb.ID+"/8000/" || !ck.HttpOnly || ck.SameSite != http.SameSiteLaxMode {
			t.Fatalf("token cookie: %+v", ck)
		}
		code, data, _ = proxyGet(t, c, "GET", p.PathURL+"page2", "", nil, "")
		if json.Unmarshal(data, &e); code != 200 || strings.Contains(e.Headers["cookie"], p.Token) || !strings.Contains(e.Headers["cookie"], "app=1") {
			t.Errorf("later request with the cookie only: %d %s (the app's own cookie passes, ours does not)", code, data)
		}
	})

	t.Run("public", func(t *testing.T) {
		var pub api.Port
		ts.must(t, http.StatusOK, "POST", "/v1/sandboxes/"+sb.ID+"/ports/8000", key, api.ExposePort{Public: true}, &pub)
		if !pub.Public || pub.Token != "" {
			t.Errorf("made public: %+v", pub)
		}
		if code, data, _ := proxyGet(t, nil, "GET", p.PathURL, "", nil, ""); code != 200 {
			t.Errorf("public port without a token: %d %s", code, data)
		}
		var priv api.Port
		ts.must(t, http.StatusOK, "POST", "/v1/sandboxes/"+sb.ID+"/ports/8000", key, `{}`, &priv)
		if priv.Public || priv.Token == "" || priv.Token == p.Token {
			t.Errorf("private again: %+v, want a new token", priv)
		}
		if code, _, _ := proxyGet(t, nil, "GET", p.PathURL, "", tok, ""); code != http.StatusForbidden {
			t.Errorf("the old token after a new one: %d", code)
		}
		var again api.Port
		ts.must(t, http.StatusOK, "POST", "/v1/sandboxes/"+sb.ID+"/ports/8000", key, nil, &again)
		if again.Token != priv.Token {
			t.Errorf("exposing again changed the token: %q -> %q", priv.Token, again.Token)
		}
		tok = map[string]string{portTokenHeader: priv.Token}
	})

	t.Run("errors", func(t *testing.T) {
		code, data, _ := proxyGet(t, nil, "GET", fmt.Sprintf("%s/p/%s/9000/", ts.URL, sb.ID), "", nil, "")
		if code != 404 || apiError(t, data).Code != api.CodeNotFound {
			t.Errorf("unexposed port: %d %s", code, data)
		}
		code, data, _ = proxyGet(t, nil, "GET", ts.URL+"/p/sb-nosuch/8000/", "", nil, "")
		if code != 404 {
			t.Errorf("no such sandbox: %d %s", code, data)
		}
		ts.must(t, http.StatusCreated, "POST", "/v1/sandboxes/"+sb.ID+"/ports/9001", key, api.ExposePort{Public: true}, nil)
		code, data, _ = proxyGet(t, nil, "GET", fmt.Sprintf("%s/p/%s/9001/", ts.URL, sb.ID), "", nil, "")
		if e := apiError(t, data); code != http.StatusBadGateway || e.Code != api.CodeUpstream || !strings.Contains(e.Message, "nothing is listening on port 9001") {
			t.Errorf("nothing listening: %d %s", code, data)
		}
		for _, bad := range []string{"0", "65536", "http", "080"} {
			if code, _ := ts.call(t, "POST", "/v1/sandboxes/"+sb.ID+"/ports/"+bad, key, nil); code != 400 {
				t.Errorf("port %q: %d, want 400", bad, code)
			}
		}
		if code, data := ts.call(t, "POST", "/v1/sandboxes/"+sb.ID+"/ports/8000", key, `{"public":"yes"}`); code != 400 {
			t.Errorf("bad body: %d %s", code, data)
		}
	})

	t.Run("other team", func(t *testing.T) {
		other := ts.teamKey(t, "intruders")
		for _, m := range []string{"POST /ports/8000", "GET /ports", "DELETE /ports/8000"} {
			method, path, _ := strings.Cut(m, " ")
			code, data := ts.call(t, method, "/v1/sandboxes/"+sb.ID+path, other, nil)
			if code != 404 || apiError(t, data).Code != api.CodeNotFound {
				t.Errorf("another team's %s: %d %s", m, code, data)
			}
		}
		if code, _ := ts.call(t, "GET", "/v1/sandboxes/"+sb.ID+"/ports", "", nil); code != 401 {
			t.Errorf("listing ports without a key: %d", code)
		}
	})

	t.Run("list", func(t *testing.T) {
		var list struct{ Ports []api.Port }
		ts.must(t, 200, "GET", "/v1/sandboxes/"+sb.ID+"/ports", key, nil, &list)
		if len(list.Ports) != 2 || list.Ports[0].Port != 8000 || list.Ports[1].Port != 9001 || list.Ports[0].PathURL != p.PathURL {
			t.Errorf("ports: %+v", list.Ports)
		}
	})

	if in, out := ts.fleet.Traffic(sb.ID); in == 0 || out == 0 {
		t.Errorf("proxied bytes not metered: in %d, out %d", in, out)
	}

	t.Run("stopped", func(t *testing.T) {
		// Stopped by the runtime (its own TTL), before or after the
		// lifecycle loop records so: 409 either way.
		if err := ts.Runtime.Stop(t.Context(), sb.ID); err != nil {
			t.Fatal(err)
		}
		code, data, _ := proxyGet(t, nil, "GET", p.PathURL, "", tok, "")
		if e := apiError(t, data); code != http.StatusConflict || e.Code != api.CodeState {
			t.Errorf("sandbox the runtime stopped: %d %s", code, data)
		}
		ts.must(t, 200, "POST", "/v1/sandboxes/"+sb.ID+"/stop", key, nil, nil)
		code, data, _ = proxyGet(t, nil, "GET", p.PathURL, "", tok, "")
		if e := apiError(t, data); code != http.StatusConflict || e.Code != api.CodeState || !strings.Contains(e.Message, "resume") {
			t.Errorf("stopped sandbox: %d %s", code, data)
		}
		// Without the token a stopped sandbox's private port says no
		// more than a running one's.
		if code, _, _ := proxyGet(t, nil, "GET", p.PathURL, "", nil, ""); code != http.StatusForbidden {
			t.Errorf("stopped sandbox, no token: %d", code)
		}
	})

	t.Run("unexpose", func(t *testing.T) {
		ts.must(t, http.StatusNoContent, "DELETE", "/v1/sandboxes/"+sb.ID+"/ports/8000", key, nil, nil)
		if code, _, _ := proxyGet(t, nil, "GET", p.PathURL, "", tok, ""); code != 404 {
			t.Errorf("after unexposing: %d", code)
		}
		if code, _ := ts.call(t, "DELETE", "/v1/sandboxes/"+sb.ID+"/ports/8000", key, nil); code != 404 {
			t.Errorf("unexposing twice: %d", code)
		}
	})
}

// TestPortWebSocket: a WebSocket through the proxy reaches an echo
// server inside the sandbox, by path and by host name, and while it is
// open the sandbox counts as busy.
func TestPortWebSocket(t *testing.T) {
	ts := newTestServer(t, Config{Domain: "example.test"})
	key := ts.teamKey(t, "ws")
	sb := ts.create(t, key, api.CreateSandbox{})
	startApp(t, ts, sb.ID, wsEchoApp, 8765)
	var p api.Port
	ts.must(t, http.StatusCreated, "POST", "/v1/sandboxes/"+sb.ID+"/ports/8765", key, nil, &p)

	for _, tc := range []struct{ name, url, host string }{
		{"path", p.PathURL + "ws", ""},
		{"host", ts.URL + "/ws", "8765-" + sb.ID + ".example.test"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			hdr := http.Header{portTokenHeader: {p.Token}}
			opts := &websocket.DialOptions{HTTPHeader: hdr, Host: tc.host}
			c, resp, err := websocket.Dial(ctx, tc.url, opts)
			if err != nil {
				t.Fatalf("dial: %v (%+v)", err, resp)
			}
			defer c.CloseNow()
			if !ts.fleet.Busy(sb.ID) {
				t.Errorf("an open WebSocket does not keep the sandbox busy")
			}
			for _, msg := range []string{"hello", strings.Repeat("x", 1000)} {
				if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
					t.Fatal(err)
				}
				typ, got, err := c.Read(ctx)
				if err != nil || typ != websocket.MessageText || string(got) != msg {
					t.Fatalf("echo of %.10q: %v %.10q %v", msg, typ, got, err)
				}
			}
			c.Close(websocket.StatusNormalClosure, "")
			deadline := time.Now().Add(10 * time.Second)
			for ts.fleet.Busy(sb.ID) {
				if time.Now().After(deadline) {
					t.Fatal("the sandbox is still busy after the WebSocket closed")
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
	// Without the token, the upgrade is refused before it reaches the app.
	_, resp, err := websocket.Dial(t.Context(), p.PathURL+"ws", nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("WebSocket without a token: %v %+v", err, resp)
	}
}
