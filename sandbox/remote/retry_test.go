package remote

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/sandbox"
)

// seen is one request a flaky server received.
type seen struct {
	method, path, body, key string
}

// flaky is a real HTTP server whose first drops requests it gets are
// dropped (the connection closed with no answer, as a server SIGKILLed
// mid-request), then answered by answer.
type flaky struct {
	*httptest.Server
	// mu guards drops and got: the handler runs on the server's
	// goroutines, the test reads them on its own.
	mu    sync.Mutex
	drops int
	got   []seen
}

func newFlaky(t *testing.T, drops int, answer http.HandlerFunc) *flaky {
	f := &flaky{drops: drops}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.got = append(f.got, seen{r.Method, r.URL.Path, string(body), r.Header.Get(api.IdempotencyKeyHeader)})
		drop := f.drops > 0
		if drop {
			f.drops--
		}
		f.mu.Unlock()
		if drop {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		answer(w, r)
	}))
	t.Cleanup(f.Close)
	return f
}

// requests is what the server received so far.
func (f *flaky) requests() []seen {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]seen(nil), f.got...)
}

func newTestRuntime(t *testing.T, url string, maxRetry time.Duration) *Runtime {
	t.Helper()
	r, err := New(Config{URL: url, APIKey: "cove_test", MaxRetryTime: maxRetry})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestRetryIdempotentMethods: GET, PUT and DELETE whose connections are
// dropped are sent again, the same body each time, until answered.
func TestRetryIdempotentMethods(t *testing.T) {
	for _, method := range []string{http.MethodGet, http.MethodPut, http.MethodDelete} {
		t.Run(method, func(t *testing.T) {
			f := newFlaky(t, 2, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, `{"ok":true}`)
			})
			r := newTestRuntime(t, f.URL, 0)
			var body any
			if method == http.MethodPut {
				body = map[string]string{"content": "abc"}
			}
			var out struct{ OK bool }
			if err := r.call(t.Context(), method, "/v1/thing", body, &out); err != nil || !out.OK {
				t.Fatalf("%s through two dropped connections: %v %+v", method, err, out)
			}
			got := f.requests()
			if len(got) != 3 {
				t.Fatalf("server got %d requests, want 3 (two dropped, one answered)", len(got))
			}
			for _, g := range got {
				if g != got[0] {
					t.Errorf("retry %+v differs from the first %+v", g, got[0])
				}
			}
		})
	}
}

// TestRetryUnavailable: 502, 503 and 504 (a balancer with no server
// behind) are retried for a GET; another error status is not.
func TestRetryUnavailable(t *testing.T) {
	for _, status := range []int{502, 503, 504} {
		var mu sync.Mutex
		n := 0
		f := newFlaky(t, 0, func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			n++
			first := n <= 2
			mu.Unlock()
			if first {
				http.Error(w, "no server", status)
				return
			}
			io.WriteString(w, `{}`)
		})
		if err := newTestRuntime(t, f.URL, 0).call(t.Context(), "GET", "/v1/x", nil, nil); err != nil {
			t.Errorf("GET through two %ds: %v", status, err)
		}
		if got := len(f.requests()); got != 3 {
			t.Errorf("%d: server got %d requests, want 3", status, got)
		}
	}
	f := newFlaky(t, 0, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(404)
		io.WriteString(w, `{"code":"not_found","message":"no such sandbox"}`)
	})
	err := newTestRuntime(t, f.URL, 0).call(t.Context(), "GET", "/v1/x", nil, nil)
	if !errors.Is(err, sandbox.ErrNotFound) || len(f.requests()) != 1 {
		t.Errorf("a 404: %v after %d requests, want ErrNotFound after 1", err, len(f.requests()))
	}
}

// TestNoRetryPost: a POST without an Idempotency-Key (exec, stop, fork)
// whose connection dropped is not sent again: the server may have done
// it. The caller gets ErrUnavailable.
func TestNoRetryPost(t *testing.T) {
	f := newFlaky(t, 1, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{}`) })
	r := newTestRuntime(t, f.URL, 0)
	_, err := r.APIExec(t.Context(), "sb-1", api.Exec{Cmd: "true"}, nil, nil)
	if !errors.Is(err, sandbox.ErrUnavailable) {
		t.Errorf("exec over a dropped connection: %v, want ErrUnavailable", err)
	}
	if got := len(f.requests()); got != 1 {
		t.Errorf("server got %d execs, want 1 (never retried)", got)
	}
	err = r.Stop(t.Context(), "sb-1")
	if got := len(f.requests()); err != nil || got != 2 {
		t.Errorf("stop after: %v, %d requests in all, want 2", err, got)
	}
}

// TestCreateRetriesWithItsKey: Create sends an Idempotency-Key of its
// own, and a create whose connection dropped is sent again with the
// same key; the next create has another key. A 409 "still in flight"
// is waited out; another 409 is the caller's.
func TestCreateRetriesWithItsKey(t *testing.T) {
	var mu sync.Mutex
	inFlight := 1
	f := newFlaky(t, 2, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		mu.Lock()
		busy := inFlight > 0
		inFlight--
		mu.Unlock()
		if busy {
			w.WriteHeader(http.StatusConflict)
			io.WriteString(w, `{"code":"`+api.CodeIdempotencyInFlight+`","message":"retry"}`)
			return
		}
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(api.Sandbox{ID: "sb-made", State: "running"})
	})
	r := newTestRuntime(t, f.URL, 0)
	s, err := r.Create(t.Context(), sandbox.Spec{})
	if err != nil || s.ID() != "sb-made" {
		t.Fatalf("create through two dropped connections and a 409: %v", err)
	}
	got := f.requests()
	if len(got) != 4 {
		t.Fatalf("server got %d creates, want 4", len(got))
	}
	for _, g := range got {
		if g.key == "" || g.key != got[0].key || g.body != got[0].body {
			t.Errorf("create retry %+v: want the first one's key and body %+v", g, got[0])
		}
	}
	if _, err := r.Create(t.Context(), sandbox.Spec{}); err != nil {
		t.Fatal(err)
	}
	if last := f.requests()[4]; last.key == got[0].key {
		t.Errorf("a second create reused the first one's key %q", last.key)
	}

	// A 409 of another kind is not retried.
	g := newFlaky(t, 0, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		io.WriteString(w, `{"code":"conflict","message":"no"}`)
	})
	_, err = newTestRuntime(t, g.URL, 0).Create(t.Context(), sandbox.Spec{})
	if !errors.Is(err, sandbox.ErrState) || !strings.Contains(err.Error(), "no") || len(g.requests()) != 1 {
		t.Errorf("create answered 409 conflict: %v after %d requests, want ErrState with the message after 1", err, len(g.requests()))
	}
}

// TestRetryGivesUp: a server that never answers fails the request once
// the retry time is spent, or at once when retries are off; a cancelled
// ctx stops the retries.
func TestRetryGivesUp(t *testing.T) {
	f := newFlaky(t, 1<<30, nil)
	err := newTestRuntime(t, f.URL, 300*time.Millisecond).call(t.Context(), "GET", "/v1/x", nil, nil)
	if !errors.Is(err, sandbox.ErrUnavailable) || len(f.requests()) < 2 {
		t.Errorf("GET of a server that drops everything: %v after %d requests, want ErrUnavailable after retries", err, len(f.requests()))
	}
	before := len(f.requests())
	err = newTestRuntime(t, f.URL, -1).call(t.Context(), "GET", "/v1/x", nil, nil)
	if !errors.Is(err, sandbox.ErrUnavailable) || len(f.requests()) != before+1 {
		t.Errorf("with retries off: %v after %d requests, want one", err, len(f.requests())-before)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	err = newTestRuntime(t, f.URL, time.Hour).call(ctx, "GET", "/v1/x", nil, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("retrying past the ctx's deadline: %v, want DeadlineExceeded", err)
	}
}

// TestDeleteRetriedFindsItGone: a delete whose answer was lost (the
// server did it and died) is retried, and the retry's 404 means done;
// a delete of a sandbox that was never there is still ErrNotFound.
func TestDeleteRetriedFindsItGone(t *testing.T) {
	gone := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(404)
		io.WriteString(w, `{"code":"not_found","message":"sandbox sb-1 not found"}`)
	}
	f := newFlaky(t, 1, gone)
	if err := newTestRuntime(t, f.URL, 0).Delete(t.Context(), "sb-1"); err != nil {
		t.Errorf("delete whose first answer was lost, retry 404: %v, want nil", err)
	}
	g := newFlaky(t, 0, gone)
	if err := newTestRuntime(t, g.URL, 0).Delete(t.Context(), "sb-1"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("delete of a sandbox never there: %v, want ErrNotFound", err)
	}
}
