package server

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/sandbox"
)

// The lifecycle loop ticks fast in tests; the policies run on a fake
// clock that a test moves.
func init() { lifecycleInterval = 20 * time.Millisecond }

// fakeClock is a Config.Now that moves only when told.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

// newFakeClock starts at the real time, whole seconds: deadlines the
// server hands the runtime (POST .../ttl) are then in the runtime's
// future too.
func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Now().UTC().Truncate(time.Second)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// eventually polls cond until it holds, failing the test after a while.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	// A bound, not a timing: the loops tick every 20 ms, but a CI machine
	// running every package's tests at once can starve them for seconds.
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// state is a sandbox's state as its team sees it through the API (a
// status poll), or "gone".
func (ts *testServer) state(t *testing.T, key, id string) string {
	t.Helper()
	code, data := ts.call(t, "GET", "/v1/sandboxes/"+id, key, nil)
	if code == http.StatusNotFound {
		return "gone"
	}
	var sb api.Sandbox
	if code != 200 || json.Unmarshal(data, &sb) != nil {
		t.Fatalf("GET sandbox %s: %d %s", id, code, data)
	}
	return sb.State
}

// runtimeState is what the runtime says of a sandbox, or "gone".
func (ts *testServer) runtimeState(t *testing.T, id string) string {
	t.Helper()
	sess, err := ts.Runtime.Get(t.Context(), id)
	if err != nil {
		return "gone"
	}
	in, err := sess.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return string(in.State)
}

func TestLifecycleTTL(t *testing.T) {
	clock := newFakeClock()
	ts := newTestServer(t, Config{Now: clock.Now})
	key := ts.teamKey(t, "ttl")
	stop := ts.create(t, key, api.CreateSandbox{TTLSeconds: 60})
	del := ts.create(t, key, api.CreateSandbox{TTLSeconds: 60, OnExpire: "delete"})
	keep := ts.create(t, key, api.CreateSandbox{TTLSeconds: 3600})
	moved := ts.create(t, key, api.CreateSandbox{TTLSeconds: 60})
	ts.must(t, 200, "POST", "/v1/sandboxes/"+moved.ID+"/ttl", key, api.SetTTL{TTLSeconds: 600}, nil)
	// The runtime's own TTL timer may stop a sandbox before the server's
	// deadline passes; on_expire=delete must still delete it.
	delStopped := ts.create(t, key, api.CreateSandbox{TTLSeconds: 60, OnExpire: "delete"})
	if err := ts.Runtime.Stop(t.Context(), delStopped.ID); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the runtime's stop to be recorded", func() bool { return ts.state(t, key, delStopped.ID) == "stopped" })

	clock.Add(59 * time.Second)
	time.Sleep(5 * lifecycleInterval)
	if got := ts.state(t, key, stop.ID); got != "running" {
		t.Fatalf("before its deadline: %s", got)
	}
	clock.Add(2 * time.Second)
	eventually(t, "the sandbox past its TTL to stop", func() bool { return ts.state(t, key, stop.ID) == "stopped" })
	eventually(t, "the on_expire=delete sandbox to go", func() bool { return ts.state(t, key, del.ID) == "gone" })
	eventually(t, "the stopped on_expire=delete sandbox to go", func() bool { return ts.state(t, key, delStopped.ID) == "gone" })
	// Both were looked at in the ticks that acted on the others.
	if got := ts.state(t, key, keep.ID); got != "running" {
		t.Errorf("a sandbox within its TTL: %s", got)
	}
	if got := ts.state(t, key, moved.ID); got != "running" {
		t.Errorf("a sandbox whose TTL was moved on: %s", got)
	}
	if got := ts.runtimeState(t, stop.ID); got != "stopped" {
		t.Errorf("runtime state of the stopped one: %s", got)
	}
	if got := ts.runtimeState(t, del.ID); got != "gone" {
		t.Errorf("runtime state of the deleted one: %s", got)
	}
	var sb api.Sandbox
	ts.must(t, 200, "GET", "/v1/sandboxes/"+stop.ID, key, nil, &sb)
	if sb.StoppedAt == nil || sb.StoppedAt.Before(*stop.Deadline) {
		t.Errorf("stopped_at %v, want at or after the deadline %v", sb.StoppedAt, stop.Deadline)
	}
	// Resumed, it gets its TTL afresh and is not stopped again at once.
	ts.must(t, 200, "POST", "/v1/sandboxes/"+stop.ID+"/resume", key, nil, nil)
	time.Sleep(5 * lifecycleInterval)
	if got := ts.state(t, key, stop.ID); got != "running" {
		t.Errorf("resumed after its TTL: %s", got)
	}
}

// TestLifecycleSyncsRuntime: a sandbox the runtime stopped on its own
// (its own TTL timer, a dead supervisor) is recorded stopped.
func TestLifecycleSyncsRuntime(t *testing.T) {
	ts := newTestServer(t, Config{})
	key := ts.teamKey(t, "sync")
	sb := ts.create(t, key, api.CreateSandbox{})
	if err := ts.Runtime.Stop(t.Context(), sb.ID); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the record to say stopped", func() bool { return ts.state(t, key, sb.ID) == "stopped" })
	var got api.Sandbox
	ts.must(t, 200, "GET", "/v1/sandboxes/"+sb.ID, key, nil, &got)
	if got.StoppedAt == nil {
		t.Errorf("no stopped_at: %+v", got)
	}
}

func TestLifecycleIdle(t *testing.T) {
	clock := newFakeClock()
	ts := newTestServer(t, Config{Now: clock.Now})
	key := ts.teamKey(t, "idle")
	idle := api.CreateSandbox{IdleTimeoutSeconds: 60, TTLSeconds: 3600}
	polled := ts.create(t, key, idle) // only its status is asked for
	proc := ts.create(t, key, idle)   // runs a background process
	stream := ts.create(t, key, idle) // has an open stream
	delIdle := ts.create(t, key, api.CreateSandbox{IdleTimeoutSeconds: 60, TTLSeconds: 3600, OnExpire: "delete"})
	none := ts.create(t, key, api.CreateSandbox{TTLSeconds: 3600}) // no idle timeout

	sess, err := ts.Runtime.Get(t.Context(), proc.ID)
	if err != nil {
		t.Fatal(err)
	}
	p, err := sess.Start(t.Context(), sandbox.ExecRequest{Cmd: "sleep", Args: []string{"1000"}, Tag: "worker"})
	if err != nil {
		t.Fatal(err)
	}
	// What an exec stream or a proxied connection holds while open.
	endStream := ts.begin(stream.ID)

	for range 4 {
		clock.Add(20 * time.Second)
		time.Sleep(2 * lifecycleInterval)
		ts.state(t, key, polled.ID)
	}
	eventually(t, "the polled sandbox to stop: polling is not activity", func() bool { return ts.state(t, key, polled.ID) == "stopped" })
	eventually(t, "the idle on_expire=delete sandbox to go", func() bool { return ts.state(t, key, delIdle.ID) == "gone" })
	for _, sb := range []api.Sandbox{proc, stream, none} {
		if got := ts.state(t, key, sb.ID); got != "running" {
			t.Errorf("%s: %s, want running", sb.ID, got)
		}
	}

	// Activity moves the idle timer: the stream's end counts as activity.
	endStream()
	if err := p.Signal(t.Context(), sandbox.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.Wait(t.Context())
	clock.Add(59 * time.Second)
	time.Sleep(5 * lifecycleInterval)
	if got := ts.state(t, key, stream.ID); got != "running" {
		t.Errorf("59s after its stream ended: %s", got)
	}
	clock.Add(2 * time.Second)
	eventually(t, "the sandbox whose process ended to stop", func() bool { return ts.state(t, key, proc.ID) == "stopped" })
	eventually(t, "the sandbox whose stream ended to stop", func() bool { return ts.state(t, key, stream.ID) == "stopped" })
	if got := ts.state(t, key, none.ID); got != "running" {
		t.Errorf("a sandbox without an idle timeout: %s", got)
	}
}

func TestLifecycleRetention(t *testing.T) {
	clock := newFakeClock()
	ts := newTestServer(t, Config{Now: clock.Now, Retention: time.Hour})
	key := ts.teamKey(t, "retention")
	old := ts.create(t, key, api.CreateSandbox{TTLSeconds: 86400})
	recent := ts.create(t, key, api.CreateSandbox{TTLSeconds: 86400})
	running := ts.create(t, key, api.CreateSandbox{TTLSeconds: 86400})
	ts.must(t, 200, "POST", "/v1/sandboxes/"+old.ID+"/stop", key, nil, nil)
	clock.Add(40 * time.Minute)
	ts.must(t, 200, "POST", "/v1/sandboxes/"+recent.ID+"/stop", key, nil, nil)
	clock.Add(30 * time.Minute)
	eventually(t, "a sandbox stopped 70 minutes ago to be deleted", func() bool { return ts.state(t, key, old.ID) == "gone" })
	if got := ts.runtimeState(t, old.ID); got != "gone" {
		t.Errorf("runtime kept the retired sandbox: %s", got)
	}
	if got := ts.state(t, key, recent.ID); got != "stopped" {
		t.Errorf("stopped 30 minutes ago: %s", got)
	}
	if got := ts.state(t, key, running.ID); got != "running" {
		t.Errorf("running for 70 minutes: %s", got)
	}
}

// restart closes ts's server and starts another over the same store,
// runtime and clock, as a restarted `cove serve` would.
func (ts *testServer) restart(t *testing.T) *testServer {
	t.Helper()
	ts.stop()
	return ts.startAgain(t, "127.0.0.1:0")
}

// stop closes ts's server (its sandboxes and store stay).
func (ts *testServer) stop() {
	ts.http.Close()
	ts.Server.Close()
}

// startAgain starts a new server over ts's store, runtime and clock,
// listening on addr.
func (ts *testServer) startAgain(t *testing.T, addr string) *testServer {
	t.Helper()
	cfg := ts.Server.cfg
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listening on %s: %v", addr, err)
	}
	cfg.BaseURL = "http://" + l.Addr().String()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.Start()
	hs := &http.Server{Handler: s.Handler()}
	go hs.Serve(l)
	t.Cleanup(func() {
		hs.Close()
		s.Close()
	})
	return &testServer{Server: s, URL: cfg.BaseURL, Admin: ts.Admin, Runtime: ts.Runtime, dir: ts.dir, http: hs}
}
