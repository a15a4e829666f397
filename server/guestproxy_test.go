package server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/guest"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/sandboxtest/fake"
)

// TestGuestProxyAccess: the daemon's API answers only the sandbox's own
// team, and only while the sandbox runs.
func TestGuestProxyAccess(t *testing.T) {
	ts := newTestServer(t, Config{})
	alpha, beta := ts.teamKey(t, "alpha"), ts.teamKey(t, "beta")
	sb := ts.create(t, alpha, api.CreateSandbox{})
	health := "/v1/sandboxes/" + sb.ID + "/guest/health"
	for _, tc := range []struct {
		name, path, key, code string
		status                int
	}{
		{"own key", health, alpha, "", http.StatusNoContent},
		{"no key", health, "", api.CodeUnauthorized, http.StatusUnauthorized},
		{"unknown key", health, "cove_0000", api.CodeUnauthorized, http.StatusUnauthorized},
		{"another team's key", health, beta, api.CodeNotFound, http.StatusNotFound},
		{"unknown sandbox", "/v1/sandboxes/sb-000000000000/guest/health", alpha, api.CodeNotFound, http.StatusNotFound},
	} {
		code, data := ts.call(t, "GET", tc.path, tc.key, nil)
		if code != tc.status || tc.code != "" && apiError(t, data).Code != tc.code {
			t.Errorf("%s: %d %s, want %d %s", tc.name, code, data, tc.status, tc.code)
		}
	}
	ts.must(t, http.StatusOK, "POST", "/v1/sandboxes/"+sb.ID+"/stop", alpha, nil, nil)
	code, data := ts.call(t, "GET", health, alpha, nil)
	if code != http.StatusConflict || apiError(t, data).Code != api.CodeState || !strings.Contains(string(data), "resume") {
		t.Errorf("stopped sandbox: %d %s, want 409 state saying to resume it", code, data)
	}
}

// TestGuestProxySession drives a real sandbox through the proxy with the
// daemon's own client: process streams, stdin, files, the filesystem
// service over HTTP/1.1, tar, and a tunnel refused by the daemon.
func TestGuestProxySession(t *testing.T) {
	ts := newTestServer(t, Config{})
	key := ts.teamKey(t, "alpha")
	sb := ts.create(t, key, api.CreateSandbox{})
	c, err := guest.NewClient(ts.URL+"/v1/sandboxes/"+sb.ID+"/guest", guest.ClientOptions{Header: http.Header{"X-Api-Key": {key}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if addr, _ := c.Endpoint(); addr != "" {
		t.Errorf("a proxied client's Endpoint: got %q, want none", addr)
	}
	s := guest.NewSession(c, guest.SessionOptions{ID: sb.ID, Root: sb.Root})
	ctx := t.Context()

	var out, errOut bytes.Buffer
	st, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "sh", Args: []string{"-c", "echo out; echo err >&2; exit 3"}, Stdout: &out, Stderr: &errOut})
	if err != nil || st.Code != 3 || out.String() != "out\n" || errOut.String() != "err\n" {
		t.Errorf("exec: %+v %v, stdout %q, stderr %q", st, err, out.String(), errOut.String())
	}

	out.Reset()
	p, err := s.Start(ctx, sandbox.ExecRequest{Cmd: "cat", OpenStdin: true, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	if !ts.fleet.Busy(sb.ID) {
		t.Error("an open process stream does not count as activity")
	}
	if err := p.Write(ctx, []byte("through the proxy\n")); err != nil {
		t.Fatal(err)
	}
	if err := p.CloseStdin(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := p.Wait(ctx); err != nil || !st.Success() || out.String() != "through the proxy\n" {
		t.Errorf("cat: %+v %v %q", st, err, out.String())
	}

	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	if err := s.WriteFile(ctx, "d/big", bytes.NewReader(big), 0o600); err != nil {
		t.Fatal(err)
	}
	fi, err := s.Stat(ctx, "d/big")
	if err != nil || fi.Size != int64(len(big)) || fi.Mode != 0o600 {
		t.Errorf("stat: %+v %v", fi, err)
	}
	rc, err := s.ReadFile(ctx, "d/big")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, big) {
		t.Errorf("read back %d bytes (%v), want %d", len(got), err, len(big))
	}
	if _, err := s.Stat(ctx, "missing"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("stat of a missing file: %v, want ErrNotFound", err)
	}
	var tarball bytes.Buffer
	if err := s.SnapshotWorkspace(ctx, &tarball); err != nil || tarball.Len() < len(big) {
		t.Errorf("snapshot: %d bytes, %v", tarball.Len(), err)
	}
	if _, err := s.DialPort(ctx, 1); !errors.Is(err, sandbox.ErrUnavailable) {
		t.Errorf("DialPort to a closed port: %v, want ErrUnavailable", err)
	}
	eventually(t, "the proxy to end its streams", func() bool { return !ts.fleet.Busy(sb.ID) })
}

// TestGuestProxyRequests checks what reaches the daemon, with a fake
// daemon that records it: the path without the prefix, the daemon's
// token instead of the API key, envd's Basic user passed on, streams
// flushed as they come, and an upgraded tunnel spliced both ways.
func TestGuestProxyRequests(t *testing.T) {
	d := startFakeDaemon(t)
	ts := newTestServer(t, Config{Runtime: endpointRuntime{Runtime: fake.New(), addr: "unix://" + d.sock, token: "daemon-secret"}})
	key := ts.teamKey(t, "alpha")
	sb := ts.create(t, key, api.CreateSandbox{})
	prefix := ts.URL + "/v1/sandboxes/" + sb.ID + "/guest"

	for _, tc := range []struct {
		name, path                string
		header                    http.Header
		wantPath, wantQuery, auth string
	}{
		{"bearer key", "/files?path=a%20b", http.Header{"Authorization": {"Bearer " + key}}, "/files", "path=a%20b", ""},
		{"X-API-Key and a Basic user", "/process.Process/List", http.Header{"X-Api-Key": {key}, "Authorization": {"Basic dXNlcjo="}, guest.AccessTokenHeader: {"forged"}},
			"/process.Process/List", "", "Basic dXNlcjo="},
		{"escaped path", "/a%2Fb/c", http.Header{"X-Api-Key": {key}}, "/a%2Fb/c", "", ""},
	} {
		req, _ := http.NewRequest("POST", prefix+tc.path, strings.NewReader("body"))
		req.Header = tc.header
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		r := <-d.seen
		if resp.StatusCode != http.StatusOK || r.path != tc.wantPath || r.query != tc.wantQuery || r.body != "body" {
			t.Errorf("%s: status %d, daemon saw %+v, want path %q query %q", tc.name, resp.StatusCode, r, tc.wantPath, tc.wantQuery)
		}
		if r.header.Get(guest.AccessTokenHeader) != "daemon-secret" || r.header.Get("X-Api-Key") != "" || r.header.Get("Authorization") != tc.auth {
			t.Errorf("%s: daemon saw headers %v, want its token, no API key, Authorization %q", tc.name, r.header, tc.auth)
		}
	}

	// A stream: the first line arrives while the daemon still holds the
	// response open.
	req, _ := http.NewRequest("GET", prefix+"/stream", nil)
	req.Header.Set("X-Api-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	<-d.seen
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "first\n" {
		t.Errorf("first line of a stream: %q %v", line, err)
	}
	if !ts.fleet.Busy(sb.ID) {
		t.Error("an open stream does not count as activity")
	}
	close(d.release)
	resp.Body.Close()
	eventually(t, "the stream to end", func() bool { return !ts.fleet.Busy(sb.ID) })

	// A tunnel through guest.Client, as the remote runtime opens one.
	c, err := guest.NewClient(prefix, guest.ClientOptions{Header: http.Header{"X-Api-Key": {key}}})
	if err != nil {
		t.Fatal(err)
	}
	s := guest.NewSession(c, guest.SessionOptions{ID: sb.ID})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conn, err := s.DialPort(ctx, 7)
	if err != nil {
		t.Fatal(err)
	}
	<-d.seen
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(conn, "ping")
	conn.(interface{ CloseWrite() error }).CloseWrite()
	echo, err := io.ReadAll(conn)
	conn.Close()
	if err != nil || string(echo) != "ping" {
		t.Errorf("echo through the tunnel: %q %v", echo, err)
	}
	eventually(t, "the tunnel to end", func() bool { return !ts.fleet.Busy(sb.ID) })

	// The daemon gone: 503, and the cause (a host path) stays in the log.
	d.srv.Close()
	code, data := ts.call(t, "GET", "/v1/sandboxes/"+sb.ID+"/guest/health", key, nil)
	if code != http.StatusServiceUnavailable || apiError(t, data).Code != api.CodeUnavailable || strings.Contains(string(data), d.sock) {
		t.Errorf("daemon gone: %d %s, want 503 unavailable without the socket path", code, data)
	}

	// Every byte to and from the daemon is metered, the tunnel's too
	// (recorded at the latest when the sandbox stops).
	ts.must(t, http.StatusOK, "POST", "/v1/sandboxes/"+sb.ID+"/stop", key, nil, nil)
	eventually(t, "the proxied bytes metered", func() bool {
		u := ts.usageOver(t, key, time.Now().Add(-time.Hour), time.Now().Add(time.Hour)).Total
		return u.BytesIn > int64(len("ping")) && u.BytesOut > int64(len("ping"))
	})
}

// TestGuestProxyNoEndpoint: a runtime whose sessions do not say where
// their daemon is gets a 501 that says so.
func TestGuestProxyNoEndpoint(t *testing.T) {
	ts := newTestServer(t, Config{Runtime: fake.New()})
	key := ts.teamKey(t, "alpha")
	sb := ts.create(t, key, api.CreateSandbox{})
	code, data := ts.call(t, "GET", "/v1/sandboxes/"+sb.ID+"/guest/health", key, nil)
	if code != http.StatusNotImplemented || !strings.Contains(apiError(t, data).Message, "cannot proxy") {
		t.Errorf("%d %s, want 501", code, data)
	}
}

// endpointRuntime gives every session of a runtime one daemon endpoint.
type endpointRuntime struct {
	sandbox.Runtime
	addr, token string
}

func (r endpointRuntime) Get(ctx context.Context, id string) (sandbox.Session, error) {
	s, err := r.Runtime.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return endpointSession{Session: s, addr: r.addr, token: r.token}, nil
}

type endpointSession struct {
	sandbox.Session
	addr, token string
}

func (s endpointSession) Endpoint() (string, string) { return s.addr, s.token }

// fakeDaemon records the requests it gets on a unix socket. /stream
// writes a line and holds the response until release is closed;
// /cove/port/{port} upgrades and echoes until the client's EOF.
type fakeDaemon struct {
	sock    string
	srv     *http.Server
	seen    chan seenRequest
	release chan struct{}
}

type seenRequest struct {
	path, query, body string
	header            http.Header
}

func startFakeDaemon(t *testing.T) *fakeDaemon {
	t.Helper()
	dir, err := os.MkdirTemp("", "fd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	d := &fakeDaemon{sock: filepath.Join(dir, "d.sock"), seen: make(chan seenRequest, 16), release: make(chan struct{})}
	l, err := net.Listen("unix", d.sock)
	if err != nil {
		t.Fatal(err)
	}
	d.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		d.seen <- seenRequest{path: r.URL.EscapedPath(), query: r.URL.RawQuery, body: string(body), header: r.Header.Clone()}
		switch {
		case r.URL.Path == "/stream":
			io.WriteString(w, "first\n")
			w.(http.Flusher).Flush()
			<-d.release
		case strings.HasPrefix(r.URL.Path, "/cove/port/"):
			w.Header().Set("Connection", "Upgrade")
			w.Header().Set("Upgrade", "tcp")
			w.WriteHeader(http.StatusSwitchingProtocols)
			conn, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			io.Copy(conn, brw)
		}
	})}
	go d.srv.Serve(l)
	t.Cleanup(func() { d.srv.Close() })
	return d
}
