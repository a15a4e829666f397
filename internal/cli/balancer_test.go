package cli

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/api"
)

// backend is a real HTTP server that counts requests by method, and,
// while dropping, closes each connection with no answer (a server
// SIGKILLed mid-request) but for GET /health's.
type backend struct {
	*httptest.Server
	// mu guards dropping and got.
	mu       sync.Mutex
	dropping bool
	got      map[string]int
}

func newBackend(t *testing.T, name string) *backend {
	b := &backend{got: map[string]int{}}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		b.mu.Lock()
		drop := b.dropping && r.URL.Path != "/health"
		if r.URL.Path != "/health" {
			b.got[r.Method]++
		}
		b.mu.Unlock()
		if drop {
			if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
				conn.Close()
			}
			return
		}
		io.WriteString(w, name)
	}))
	t.Cleanup(b.Close)
	return b
}

func (b *backend) count(method string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.got[method]
}

func (b *backend) setDropping(v bool) {
	b.mu.Lock()
	b.dropping = v
	b.mu.Unlock()
}

// lbDo sends one request through the balancer and returns its status
// and body.
func lbDo(t *testing.T, url, method string, hdr map[string]string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url+"/v1/x", strings.NewReader("body"))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

// TestBalancerRetriesOnlyWhatIsSafe: a backend that cuts connections
// before answering: GET, PUT, DELETE and a POST with an Idempotency-Key
// go on to the other backend; a POST without one is a 502 (the cut
// backend may have done it), counted in cut.
func TestBalancerRetriesOnlyWhatIsSafe(t *testing.T) {
	a, b := newBackend(t, "a"), newBackend(t, "b")
	a.setDropping(true)
	rr := &roundRobin{}
	front := httptest.NewServer(rr)
	defer front.Close()
	for _, tc := range []struct {
		method string
		hdr    map[string]string
	}{
		{"GET", nil}, {"PUT", nil}, {"DELETE", nil},
		{"POST", map[string]string{api.IdempotencyKeyHeader: "k1"}},
	} {
		for range 2 { // one of the two starts at a
			rr.set(a.URL, b.URL)
			if code, body := lbDo(t, front.URL, tc.method, tc.hdr); code != 200 || body != "b" {
				t.Errorf("%s %v with a cutting: %d %q, want b's answer", tc.method, tc.hdr, code, body)
			}
		}
	}
	cutPosts := 0
	for range 2 {
		rr.set(a.URL, b.URL)
		code, body := lbDo(t, front.URL, "POST", nil)
		switch {
		case code == http.StatusBadGateway:
			cutPosts++
		case code != 200 || body != "b":
			t.Errorf("POST without a key: %d %q", code, body)
		}
	}
	if cutPosts != 1 || rr.cut.Load() != 1 {
		t.Errorf("POSTs without a key cut: %d (balancer counted %d), want the one sent to a", cutPosts, rr.cut.Load())
	}
	if n := b.count("POST"); n != 3 {
		t.Errorf("b got %d POSTs, want 3 (two keyed, one not)", n)
	}
}

// TestBalancerHealth: a backend whose /health stops answering gets no
// requests once the check sees it; back up, it gets them again.
func TestBalancerHealth(t *testing.T) {
	a, b := newBackend(t, "a"), newBackend(t, "b")
	rr := &roundRobin{}
	rr.set(a.URL, b.URL)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go rr.checkHealth(ctx, 20*time.Millisecond)
	front := httptest.NewServer(rr)
	defer front.Close()
	a.Close() // dead: refuses connections, and its /health
	waitFor(t, "the check marks a down", func() bool {
		rr.mu.Lock()
		defer rr.mu.Unlock()
		return rr.down[a.URL]
	})
	for range 6 {
		if code, body := lbDo(t, front.URL, "POST", nil); code != 200 || body != "b" {
			t.Fatalf("POST with a dead: %d %q, want b's answer", code, body)
		}
	}
	if rr.retried.Load() != 0 {
		t.Errorf("%d requests tried the dead backend first", rr.retried.Load())
	}
}
