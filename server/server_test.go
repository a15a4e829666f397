package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/guest"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/hostproc"
	"github.com/cove-sandbox/cove/sandbox/local"
	"github.com/cove-sandbox/cove/sandbox/sandboxtest"
	"github.com/cove-sandbox/cove/store/sqlite"
)

// The runtimes re-execute the test binary for a sandbox's roles.
func TestMain(m *testing.M) {
	sandboxtest.Main(m, func(args []string) (bool, error) {
		switch a := args[0]; {
		case a == "guest":
			return true, guest.Main(context.Background(), args[1:], os.Stderr)
		case strings.HasPrefix(a, "local-"):
			return true, local.Main(context.Background(), args, os.Stderr)
		}
		return false, nil
	})
}

// testServer is a real server on 127.0.0.1:0 over the local runtime (as
// root; hostproc otherwise) and a SQLite store in a temp dir.
type testServer struct {
	*Server
	URL     string
	Admin   string // the admin key's secret
	Runtime sandbox.Runtime
	dir     string
	http    *http.Server
}

// newTestServer starts a server; cfg's Runtime, Store and DataDir are
// filled in.
func newTestServer(t testing.TB, cfg Config) *testServer {
	t.Helper()
	dir, err := os.MkdirTemp("", "srv") // short: unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if cfg.Runtime == nil {
		cfg.Runtime = testRuntime(t, dir)
	}
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store = st
	cfg.DataDir = filepath.Join(dir, "data")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.BaseURL = "http://" + l.Addr().String()
	if cfg.Models == nil {
		cfg.Models = testModels
	}
	if cfg.Logger == nil {
		// The server's log is shown when the test fails: what the
		// background loops did is often the explanation.
		logs := &sandboxtest.SyncBuffer{}
		cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("server log:\n%s", logs.String())
			}
		})
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := s.EnsureAdmin(context.Background())
	if err != nil || admin == "" {
		t.Fatalf("admin key: %q %v", admin, err)
	}
	if err := s.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.Start()
	hs := &http.Server{Handler: s.Handler()}
	go hs.Serve(l)
	ts := &testServer{Server: s, URL: cfg.BaseURL, Admin: admin, Runtime: cfg.Runtime, dir: dir, http: hs}
	t.Cleanup(func() {
		hs.Close()
		s.Close()
		ctx := context.Background()
		if infos, err := cfg.Runtime.List(ctx); err == nil {
			for _, in := range infos {
				cfg.Runtime.Delete(ctx, in.ID)
			}
		}
		st.Close()
	})
	return ts
}

func testRuntime(t testing.TB, dir string) sandbox.Runtime {
	t.Helper()
	if os.Geteuid() == 0 {
		rt, err := local.New(local.Config{Dir: filepath.Join(dir, "sb"), Env: []string{"GORACE=atexit_sleep_ms=0"}})
		if err == nil {
			return rt
		}
		t.Logf("local runtime unavailable (%v); using hostproc", err)
	}
	rt, err := hostproc.New(hostproc.Config{Dir: filepath.Join(dir, "hp"), GuestEnv: []string{"GORACE=atexit_sleep_ms=0"}})
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

// call makes an API request with key (none when "") and a JSON body
// (none when nil; a string or []byte is sent as is), and returns the
// status and body.
func (ts *testServer) call(t testing.TB, method, path, key string, body any) (int, []byte) {
	t.Helper()
	var hdr map[string]string
	if key != "" {
		hdr = map[string]string{"Authorization": "Bearer " + key}
	}
	resp, data := ts.do(t, method, path, body, hdr)
	return resp.StatusCode, data
}

// do makes a request with a JSON body (none when nil; a string or []byte
// is sent as is) and headers, and returns the response with its body
// read.
func (ts *testServer) do(t testing.TB, method, path string, body any, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, ts.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp, data
}

// must is call that fails the test unless the status is want, and decodes
// the body into out (when not nil).
func (ts *testServer) must(t testing.TB, want int, method, path, key string, body, out any) {
	t.Helper()
	code, data := ts.call(t, method, path, key, body)
	if code != want {
		t.Fatalf("%s %s: status %d, want %d: %s", method, path, code, want, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: decoding %s: %v", method, path, data, err)
		}
	}
}

// teamKey makes a team (if new) and a key for it, and returns the secret.
func (ts *testServer) teamKey(t testing.TB, team string) string {
	t.Helper()
	var k api.Key
	code, data := ts.call(t, "POST", "/v1/keys", ts.Admin, api.CreateKey{Name: team + "-key", NewTeam: team})
	if code == http.StatusConflict {
		ts.must(t, http.StatusCreated, "POST", "/v1/keys", ts.Admin, api.CreateKey{Name: team + "-key", Team: team}, &k)
		return k.Secret
	}
	if code != http.StatusCreated {
		t.Fatalf("making a key for team %s: %d %s", team, code, data)
	}
	json.Unmarshal(data, &k)
	return k.Secret
}

// create makes a sandbox for key and returns it.
func (ts *testServer) create(t testing.TB, key string, req api.CreateSandbox) api.Sandbox {
	t.Helper()
	var sb api.Sandbox
	ts.must(t, http.StatusCreated, "POST", "/v1/sandboxes", key, req, &sb)
	return sb
}

// apiError decodes an error body.
func apiError(t *testing.T, data []byte) api.Error {
	t.Helper()
	var e api.Error
	if err := json.Unmarshal(data, &e); err != nil || e.Code == "" {
		t.Fatalf("not an API error body: %s", data)
	}
	return e
}
