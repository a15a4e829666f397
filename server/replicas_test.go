package server

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/sandbox/hostproc"
	"github.com/cove-sandbox/cove/sandbox/sandboxtest"
	"github.com/cove-sandbox/cove/store/sqlite"
)

// replicaServers starts two servers over one SQLite store, one runtime
// and one data directory, electing through one shared lease, as two
// `cove serve` replicas over one PostgreSQL; and a round-robin reverse
// proxy in front of them, as any load balancer. It returns the proxy
// (as a testServer), each replica and the admin key.
func replicaServers(t *testing.T) (lb *testServer, reps [2]*testServer) {
	t.Helper()
	dir, err := os.MkdirTemp("", "srv")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	rt, err := hostproc.New(hostproc.Config{Dir: filepath.Join(dir, "hp"), GuestEnv: []string{"GORACE=atexit_sleep_ms=0"}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		if infos, err := rt.List(ctx); err == nil {
			for _, in := range infos {
				rt.Delete(ctx, in.ID)
			}
		}
		st.Close()
	}) // last: after the servers close
	logs := &sandboxtest.SyncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("servers' log:\n%s", logs.String())
		}
	})
	var admin string
	var backends []*url.URL
	for i := range reps {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s, err := New(Config{Runtime: rt, Store: st, DataDir: filepath.Join(dir, "data"), BaseURL: "http://" + l.Addr().String(),
			Models: testModels, Logger: slog.New(slog.NewTextHandler(logs, nil)).With("replica", i),
			Lease: st, Holder: []string{"a", "b"}[i]})
		if err != nil {
			t.Fatal(err)
		}
		// The first start makes the admin key; the second, on the same
		// store, none.
		if key, err := s.EnsureAdmin(context.Background()); err != nil || (key == "") != (i == 1) {
			t.Fatalf("replica %d's admin key: %q %v", i, key, err)
		} else if i == 0 {
			admin = key
		}
		if err := s.Reconcile(context.Background()); err != nil {
			t.Fatal(err)
		}
		s.Start()
		hs := &http.Server{Handler: s.Handler()}
		go hs.Serve(l)
		t.Cleanup(func() { hs.Close(); s.Close() })
		u, _ := url.Parse("http://" + l.Addr().String())
		backends = append(backends, u)
		reps[i] = &testServer{Server: s, URL: u.String(), Runtime: rt, dir: dir, http: hs}
	}
	var next atomic.Int64
	proxy := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(backends[next.Add(1)%2])
	}}
	front := httptest.NewServer(proxy)
	t.Cleanup(front.Close)
	for _, r := range reps {
		r.Admin = admin
	}
	return &testServer{URL: front.URL, Admin: admin, Runtime: rt, dir: dir}, reps
}

// TestReplicasServe: two servers on one store behind a round-robin
// balancer serve one client as one server: what a request to one does,
// the next (to the other) sees; one of them runs the lifecycle loop; a
// key revoked through one is refused by the other at once.
func TestReplicasServe(t *testing.T) {
	lb, reps := replicaServers(t)
	key := lb.teamKey(t, "alpha")
	sb := lb.create(t, key, api.CreateSandbox{})
	for i := range 6 { // each write and read lands on the other replica
		body := []byte{byte('a' + i)}
		lb.must(t, http.StatusNoContent, "PUT", "/v1/sandboxes/"+sb.ID+"/files?path=f.txt", key, body, nil)
		if code, data := lb.call(t, "GET", "/v1/sandboxes/"+sb.ID+"/files?path=f.txt", key, nil); code != 200 || string(data) != string(body) {
			t.Fatalf("read back through the other replica: %d %q, want %q", code, data, body)
		}
	}
	var got api.Sandbox
	lb.must(t, 200, "POST", "/v1/sandboxes/"+sb.ID+"/stop", key, nil, &got)
	lb.must(t, 200, "GET", "/v1/sandboxes/"+sb.ID, key, nil, &got)
	if got.State != "stopped" {
		t.Errorf("after a stop through one replica the other says %s", got.State)
	}
	lb.must(t, 200, "POST", "/v1/sandboxes/"+sb.ID+"/resume", key, nil, &got)
	if code, data := lb.call(t, "GET", "/v1/sandboxes/"+sb.ID+"/files?path=f.txt", key, nil); code != 200 || string(data) != "f" {
		t.Errorf("the file after a resume through the other replica: %d %q", code, data)
	}

	held := 0
	for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		held = 0
		for _, r := range reps {
			if r.fleet.LeaseHeld() {
				held++
			}
		}
		if held == 1 {
			break
		}
	}
	if held != 1 {
		t.Errorf("%d replicas run the lifecycle loop, want 1", held)
	}

	// Used on both, so each would have it cached if keys were.
	var keys struct{ Keys []api.Key }
	for _, r := range reps {
		r.must(t, 200, "GET", "/v1/sandboxes/"+sb.ID, key, nil, nil)
	}
	reps[0].must(t, 200, "GET", "/v1/keys?all=true", lb.Admin, nil, &keys)
	for _, k := range keys.Keys {
		if k.Team == "alpha" {
			reps[0].must(t, http.StatusNoContent, "DELETE", "/v1/keys/"+k.ID, lb.Admin, nil, nil)
		}
	}
	if code, _ := reps[1].call(t, "GET", "/v1/sandboxes/"+sb.ID, key, nil); code != http.StatusUnauthorized {
		t.Errorf("a key revoked through one replica, on the other: %d, want 401", code)
	}
}
