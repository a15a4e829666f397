package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/cove-sandbox/cove/api"
)

// proxyEchoApp answers with the request as it saw it: as JSON over
// HTTP, or as one WebSocket message after the handshake.
const proxyEchoApp = `
import base64, hashlib, http.server, json, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        seen = json.dumps({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}}).encode()
        if self.headers.get("Upgrade", "").lower() == "websocket":
            acc = base64.b64encode(hashlib.sha1((self.headers.get("Sec-WebSocket-Key", "") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
            self.wfile.write(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n" % acc).encode())
            n = len(seen)
            self.wfile.write((bytes([0x81, n]) if n < 126 else bytes([0x81, 126]) + n.to_bytes(2, "big")) + seen)
            self.wfile.write(bytes([0x88, 2, 3, 232]))
            self.wfile.flush()
            self.close_connection = True
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Set-Cookie", "cove_session=planted; Path=/v1")
        self.send_header("Clear-Site-Data", '"cookies", "storage"')
        self.send_header("Content-Length", str(len(seen)))
        self.end_headers()
        self.wfile.write(seen)
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
`

// TestAttackProxy: through `cove serve` on the wire, a sandbox's page on
// the path form is sandboxed (CSP sandbox without allow-same-origin,
// nosniff, no origin-wide header, no cookie of Cove's name), and no Cove
// credential a client sends (the API key in Authorization, X-API-Key or
// the query, the web UI's session cookie and CSRF header, the port's
// token) reaches the app, by path or host name, over HTTP or WebSocket.
// The UI's session cookie is HttpOnly, SameSite=Strict and kept to /v1,
// and refused to another origin.
func TestAttackProxy(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("cove serve runs the local runtime, which needs root (CI runs as root)")
	}
	home, data := serveHome(t, "cp")
	p := startServe(t, home, data, "--domain", "example.test")
	u, _ := url.Parse(p.url)
	var k api.Key
	if code := apiCall(t, "POST", p.url+"/v1/keys", p.admin, api.CreateKey{Name: "proxy", NewTeam: "proxy"}, &k); code != 201 {
		t.Fatalf("making a key: %d", code)
	}
	key := k.Secret
	var sb api.Sandbox
	if code := apiCall(t, "POST", p.url+"/v1/sandboxes", key, api.CreateSandbox{}, &sb); code != 201 {
		t.Fatalf("create: %d", code)
	}
	connsStartApp(t, p.url, key, sb.ID, proxyEchoApp, 8000)
	var port api.Port
	if code := apiCall(t, "POST", p.url+"/v1/sandboxes/"+sb.ID+"/ports/8000", key, nil, &port); code != 201 {
		t.Fatalf("exposing: %d", code)
	}

	// The UI's sign-in, as the browser sees it.
	req, _ := http.NewRequest("POST", p.url+"/v1/session", strings.NewReader(`{"key":"`+key+`"}`))
	req.Header.Set("X-Cove-CSRF", "-")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var signedIn struct{ CSRF string }
	json.NewDecoder(resp.Body).Decode(&signedIn)
	resp.Body.Close()
	setCookie := resp.Header.Get("Set-Cookie")
	for _, attr := range []string{"cove_session=", "Path=/v1", "HttpOnly", "SameSite=Strict"} {
		if !strings.Contains(setCookie, attr) {
			t.Errorf("the session cookie %q lacks %s", setCookie, attr)
		}
	}
	if resp.StatusCode != 200 || signedIn.CSRF == "" || strings.Contains(setCookie, key) {
		t.Fatalf("sign-in: %d %q %q", resp.StatusCode, setCookie, signedIn.CSRF)
	}
	session := strings.SplitN(setCookie, ";", 2)[0]
	for _, tc := range []struct {
		origin string
		want   int
	}{{p.url, 200}, {"null", 403}, {fmt.Sprintf("http://8000-%s.example.test:%s", sb.ID, u.Port()), 403}} {
		req, _ := http.NewRequest("GET", p.url+"/v1/sandboxes", nil)
		req.Header.Set("Cookie", session)
		req.Header.Set("X-Cove-CSRF", signedIn.CSRF)
		req.Header.Set("Origin", tc.origin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("the session from origin %s: %d, want %d", tc.origin, resp.StatusCode, tc.want)
		}
	}

	creds := []string{key, port.Token, strings.TrimPrefix(session, "cove_session="), signedIn.CSRF}
	sent := http.Header{
		"Authorization":     {"Bearer " + key},
		"X-Api-Key":         {key},
		"Cookie":            {session + "; app=1; cove_port_token=" + port.Token},
		"X-Cove-Csrf":       {signedIn.CSRF},
		"X-Cove-Port-Token": {port.Token},
	}
	query := "?keep=1&access_token=" + key
	check := func(t *testing.T, how string, seen []byte) {
		t.Helper()
		var e struct {
			Path    string
			Headers map[string]string
		}
		if err := json.Unmarshal(seen, &e); err != nil {
			t.Fatalf("%s: %s", how, seen)
		}
		if e.Path != "/echo?keep=1" || e.Headers["cookie"] != "app=1" {
			t.Errorf("%s: the app saw path %q and cookies %q", how, e.Path, e.Headers["cookie"])
		}
		for h, v := range e.Headers {
			for _, c := range creds {
				if strings.Contains(v, c) {
					t.Errorf("%s: the app saw a Cove credential in %s: %s", how, h, v)
				}
			}
		}
	}
	hostName := fmt.Sprintf("8000-%s.example.test:%s", sb.ID, u.Port())
	for _, rt := range []struct{ name, url, host string }{
		{"path", port.PathURL + "echo" + query, ""},
		{"host", p.url + "/echo" + query, hostName},
	} {
		t.Run(rt.name, func(t *testing.T) {
			var resp *http.Response
			var body []byte
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				req, _ := http.NewRequest("GET", rt.url, nil)
				req.Header = sent.Clone()
				req.Host = rt.host
				var err error
				if resp, err = http.DefaultClient.Do(req); err != nil {
					t.Fatal(err)
				}
				body, _ = io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusBadGateway || time.Now().After(deadline) {
					break // 502 while the app starts
				}
			}
			if resp.StatusCode != 200 {
				t.Fatalf("GET: %d %s", resp.StatusCode, body)
			}
			check(t, "HTTP", body)
			if rt.host == "" {
				csp := resp.Header.Get("Content-Security-Policy")
				if !strings.HasPrefix(csp, "sandbox ") || strings.Contains(csp, "allow-same-origin") || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
					t.Errorf("the path form's page: CSP %q, X-Content-Type-Options %q", csp, resp.Header.Get("X-Content-Type-Options"))
				}
				if resp.Header.Get("Clear-Site-Data") != "" || strings.Contains(strings.Join(resp.Header.Values("Set-Cookie"), "\n"), "cove_session") {
					t.Errorf("the app acted on the UI's origin: %v", resp.Header)
				}
			}

			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			ws, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(rt.url, "http"), &websocket.DialOptions{HTTPHeader: sent.Clone(), Host: rt.host})
			if err != nil {
				t.Fatalf("WebSocket: %v %+v", err, resp)
			}
			defer ws.CloseNow()
			_, msg, err := ws.Read(ctx)
			if err != nil {
				t.Fatal(err)
			}
			check(t, "WebSocket", msg)
		})
	}
}
