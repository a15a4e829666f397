package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"maps"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cove-sandbox/cove/api"
)

// roundRobin is a small load balancer for `cove bench --server
// --replicas` (and its tests), behaving as a production one (nginx,
// Envoy) set up for Cove should:
//   - each request goes to the next healthy backend; a backend is
//     healthy while GET /health answers 200 (checkHealth polls it) and
//     no connection to it has failed since;
//   - a request whose connection failed before any byte of an answer
//     came back is sent to the next backend: any request that never
//     reached one (the dial failed), and, cut after, one the next may do
//     again safely: GET, HEAD, PUT, DELETE, OPTIONS, or a POST with an
//     Idempotency-Key (nginx's proxy_next_upstream error with
//     non_idempotent off, plus the key);
//   - any other request cut by a backend's death is a 502, counted in
//     cut: the client decides (a Go client retries what is safe).
//
// Bodies are read whole first (a bench's are small).
type roundRobin struct {
	// mu guards backends, next and down.
	mu       sync.Mutex
	backends []string
	next     int
	down     map[string]bool

	cut     atomic.Int64 // answered 502: cut mid-request, not retried
	retried atomic.Int64 // sent to another backend after a failure
}

// set replaces the backends (base URLs); all start healthy.
func (rr *roundRobin) set(urls ...string) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	rr.backends = urls
	rr.down = map[string]bool{}
}

// order is the backends to try for one request: the healthy ones from
// the next in turn, then the others (a backend marked down may be back
// before the check sees it).
func (rr *roundRobin) order() []string {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	rr.next++
	var up, down []string
	for i := range rr.backends {
		b := rr.backends[(rr.next+i)%len(rr.backends)]
		if rr.down[b] {
			down = append(down, b)
		} else {
			up = append(up, b)
		}
	}
	return append(up, down...)
}

// mark records a backend's health.
func (rr *roundRobin) mark(b string, healthy bool) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if rr.down == nil {
		rr.down = map[string]bool{}
	}
	rr.down[b] = !healthy
}

// checkHealth polls every backend's GET /health each interval until ctx
// ends.
func (rr *roundRobin) checkHealth(ctx context.Context, every time.Duration) {
	hc := &http.Client{Timeout: 2 * time.Second}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		rr.mu.Lock()
		backends := append([]string(nil), rr.backends...)
		rr.mu.Unlock()
		for _, b := range backends {
			ok := false
			if resp, err := hc.Get(b + "/health"); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				ok = resp.StatusCode == http.StatusOK
			}
			rr.mark(b, ok)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// safeAgain says whether a request may be sent to another backend after
// one may have received it.
func safeAgain(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete, http.MethodOptions:
		return true
	}
	return r.Header.Get(api.IdempotencyKeyHeader) != ""
}

func (rr *roundRobin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	for i, b := range rr.order() {
		if i > 0 {
			rr.retried.Add(1)
		}
		req, _ := http.NewRequestWithContext(r.Context(), r.Method, b+r.URL.RequestURI(), bytes.NewReader(body))
		req.Header = r.Header.Clone()
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil && r.Context().Err() == nil {
			rr.mark(b, false)
			var op *net.OpError
			if (errors.As(err, &op) && op.Op == "dial") || safeAgain(r) {
				continue // no answer began: the next one
			}
			rr.cut.Add(1)
			http.Error(w, "the server went away mid-request", http.StatusBadGateway)
			return
		}
		if err != nil {
			return // the client left
		}
		maps.Copy(w.Header(), resp.Header)
		w.WriteHeader(resp.StatusCode)
		copyFlushing(w, resp.Body)
		resp.Body.Close()
		return
	}
	http.Error(w, "no server answers", http.StatusBadGateway)
}

// copyFlushing copies a response body, flushing each read so streams
// (exec's events) pass as they come.
func copyFlushing(w http.ResponseWriter, body io.Reader) {
	f, _ := w.(http.Flusher)
	buf := make([]byte, 32<<10)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			if f != nil {
				f.Flush()
			}
		}
		if err != nil {
			return
		}
	}
}
