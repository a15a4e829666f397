package cli

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/store/postgres/pgtest"
)

// uiSession signs in to the web UI of the server at base with key, as
// the UI does, and returns the session's cookie and CSRF token.
func uiSession(t *testing.T, base, key string) (cookie *http.Cookie, csrf string) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"key": key})
	req, _ := http.NewRequest("POST", base+"/v1/session", bytes.NewReader(body))
	req.Header.Set("X-Cove-CSRF", "1")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct{ CSRF string }
	json.NewDecoder(resp.Body).Decode(&out)
	for _, c := range resp.Cookies() {
		if c.Name == "cove_session" {
			cookie = c
		}
	}
	if resp.StatusCode != 200 || cookie == nil || out.CSRF == "" {
		t.Fatalf("signing in at %s: %d, cookie %v", base, resp.StatusCode, cookie)
	}
	return cookie, out.CSRF
}

// withSession is the status of GET /v1/keys at base with a UI session.
func withSession(t *testing.T, base string, cookie *http.Cookie, csrf string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/v1/keys", nil)
	req.AddCookie(cookie)
	req.Header.Set("X-Cove-CSRF", csrf)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestServeSecretKeyFile: two servers on one PostgreSQL, each with a
// data directory of its own (replicas on two hosts), accept each other's
// web UI sessions when they read one --secret-key-file, and refuse them
// when each keeps its own key. A key file of the wrong length, or one
// others may read, stops the start with what to do.
func TestServeSecretKeyFile(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("cove serve runs the local runtime, which needs root (CI runs as root)")
	}
	url := pgtest.NewDatabase(t)
	keyFile := filepath.Join(t.TempDir(), "cove.key")
	key := make([]byte, 32)
	rand.Read(key)
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	start := func(prefix string, extra ...string) *serveProc {
		home, data := serveHome(t, prefix)
		return startServe(t, home, data, append([]string{"--store", url}, extra...)...)
	}
	a := start("ska", "--secret-key-file", keyFile)
	b := start("skb", "--secret-key-file", keyFile)
	if a.admin == "" {
		t.Fatalf("no admin key printed:\n%s", a.stderr.String())
	}
	ck, csrf := uiSession(t, a.url, a.admin)
	if code := withSession(t, b.url, ck, csrf); code != 200 {
		t.Errorf("a session signed in on one replica, on the other (one key file): %d, want 200", code)
	}
	ck, csrf = uiSession(t, b.url, a.admin)
	if code := withSession(t, a.url, ck, csrf); code != 200 {
		t.Errorf("and the other way: %d, want 200", code)
	}

	// Without the file each makes its own key in its data directory.
	c, d := start("skc"), start("skd")
	ck, csrf = uiSession(t, c.url, a.admin)
	if code := withSession(t, c.url, ck, csrf); code != 200 {
		t.Errorf("a session on the server that signed it: %d, want 200", code)
	}
	for name, p := range map[string]*serveProc{"another server with its own key": d, "a server with the key file": a} {
		if code := withSession(t, p.url, ck, csrf); code != 401 {
			t.Errorf("a session of a server with its own key, on %s: %d, want 401", name, code)
		}
	}

	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		data []byte
		mode os.FileMode
		want string
	}{
		{"short", []byte("0123456789abcdef\n"), 0o600, "head -c 32 /dev/urandom"},
		{"readable", key, 0o644, "chmod 600"},
	} {
		p := filepath.Join(dir, tc.name)
		os.WriteFile(p, tc.data, tc.mode)
		os.Chmod(p, tc.mode)
		_, errOut, err := run(t, "serve", "--addr", "127.0.0.1:0", "--data", t.TempDir(), "--pool", "0", "--store", url, "--secret-key-file", p)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("serve --secret-key-file (%s): got %v %s, want an error saying %q", tc.name, err, errOut, tc.want)
		}
	}
}

// getReady is GET /ready at base: its status and body.
func getReady(base string) (int, string) {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(base + "/ready")
	if err != nil {
		return -1, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestServeReady: GET /ready of a server on PostgreSQL answers 200 while
// the database does, 503 with a short reason (no host, no URL) while it
// is killed, and 200 again once it is back; /health answers 200 all
// along (the process is alive).
func TestServeReady(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("cove serve runs the local runtime, which needs root (CI runs as root)")
	}
	pg := pgtest.Start(t) // its own: the test kills it
	url, err := pg.CreateDatabase(t.Context(), "ready")
	if err != nil {
		t.Fatal(err)
	}
	home, data := serveHome(t, "rdy")
	p := startServe(t, home, data, "--store", url)
	if code, body := getReady(p.url); code != 200 || !strings.Contains(body, `"ready"`) {
		t.Fatalf("GET /ready with the database up: %d %s", code, body)
	}

	pg.Kill()
	var body string
	waitFor(t, "/ready answers 503 with the database killed", func() bool {
		var code int
		code, body = getReady(p.url)
		return code == 503
	})
	if !strings.Contains(body, `"reason":"the store does not answer"`) {
		t.Errorf("503's body: %s, want the reason", body)
	}
	for _, leak := range []string{pg.Dir, "postgres", "host", "sock", "127.0.0.1", "dial", "connect"} {
		if strings.Contains(body, leak) {
			t.Errorf("/ready's body shows %q: %s", leak, body)
		}
	}
	c := &http.Client{Timeout: 10 * time.Second}
	if resp, err := c.Get(p.url + "/health"); err != nil || resp.StatusCode != 200 {
		t.Errorf("/health with the database down: %v %v, want 200 (alive)", resp, err)
	} else {
		resp.Body.Close()
	}

	if err := pg.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "/ready answers 200 with the database back", func() bool {
		code, _ := getReady(p.url)
		return code == 200
	})
	// The log comes through the server's stderr pipe, which may land
	// after the answer did.
	waitFor(t, "the log says when readiness was lost and back", func() bool {
		s := p.stderr.String()
		return strings.Contains(s, "not ready") && strings.Contains(s, "ready again")
	})
}
