package server

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cove-sandbox/cove/sandbox/sandboxtest/fake"
)

// pingRuntime is a runtime whose service behind it (an API server) can
// be made to stop answering.
type pingRuntime struct {
	*fake.Runtime
	down atomic.Bool
}

func (r *pingRuntime) Ping(ctx context.Context) error {
	if r.down.Load() {
		return errors.New(`Get "https://10.96.0.1:443/api/v1/namespaces/cove/secrets": dial tcp 10.96.0.1:443: connection refused`)
	}
	return nil
}

// TestReadyRuntime: GET /ready answers 503 while a runtime with a service
// behind it (the kube runtime's API server) does not answer, naming the
// part but not the error (no address), and 200 again once it does.
func TestReadyRuntime(t *testing.T) {
	rt := &pingRuntime{Runtime: fake.New()}
	ts := newTestServer(t, Config{Runtime: rt})
	if code, body := ts.call(t, "GET", "/ready", "", nil); code != 200 || !strings.Contains(string(body), `"ready"`) {
		t.Fatalf("GET /ready with the runtime answering: %d %s", code, body)
	}
	rt.down.Store(true)
	code, body := ts.call(t, "GET", "/ready", "", nil)
	if code != 503 || !strings.Contains(string(body), "the sandbox runtime does not answer") {
		t.Errorf("GET /ready with the runtime away: %d %s, want 503 naming the runtime", code, body)
	}
	if strings.Contains(string(body), "10.96.0.1") || strings.Contains(string(body), "secrets") {
		t.Errorf("GET /ready shows the runtime's error: %s", body)
	}
	rt.down.Store(false)
	if code, body := ts.call(t, "GET", "/ready", "", nil); code != 200 {
		t.Errorf("GET /ready with the runtime back: %d %s", code, body)
	}
}
