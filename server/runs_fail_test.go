package server

import (
	"net"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/agent/model/fake"
	"github.com/cove-sandbox/cove/api"
)

// TestRunFailsBeforeModelLeavesNothingRunning: a run whose model never
// answers (a key the endpoint refuses, an endpoint nobody listens on)
// fails and stops the sandbox it made for itself; a sandbox the caller
// chose is left running; a follow-up once the model answers resumes the
// stopped one.
func TestRunFailsBeforeModelLeavesNothingRunning(t *testing.T) {
	model := fake.NewServer(t,
		fake.Error(401, "Incorrect API key provided").Times(2),
		fake.Text("done"),
	)
	ts := runServer(t, model)
	key := ts.teamKey(t, "alpha")
	manifest := map[string]any{"entries": map[string]any{"notes.txt": map[string]any{"type": "file", "content": "one\n"}}}

	// A sandbox made for the run is stopped when the model refuses the key.
	var run api.Run
	ts.must(t, 201, "POST", "/v1/runs", key, map[string]any{"input": "read notes.txt", "manifest": manifest}, &run)
	evs := ts.readEvents(t, key, run.ID, 0, "")
	if got := lastStatus(evs); got != api.RunFailed {
		t.Fatalf("status %q, want failed; events %+v", got, evs)
	}
	var sb api.Sandbox
	ts.must(t, 200, "GET", "/v1/sandboxes/"+run.SandboxID, key, nil, &sb)
	if sb.State != "stopped" {
		t.Errorf("the run's own sandbox is %s after a failure before the first model call, want stopped", sb.State)
	}
	var got api.Run
	ts.must(t, 200, "GET", "/v1/runs/"+run.ID, key, nil, &got)
	// The refusal is named by its status (the provider's own text, which
	// may quote part of the server's key, stays in the server's log).
	if !strings.Contains(got.Error, "401") || !strings.Contains(got.Error, "check the key") || !strings.Contains(got.Error, "stopped") {
		t.Errorf("run error %q: want the model's refusal and that the sandbox was stopped", got.Error)
	}

	// A sandbox the caller picked is the caller's: it stays running.
	mine := ts.create(t, key, api.CreateSandbox{})
	var run2 api.Run
	ts.must(t, 201, "POST", "/v1/runs", key, map[string]any{"input": "look around", "sandbox_id": mine.ID}, &run2)
	if got := lastStatus(ts.readEvents(t, key, run2.ID, 0, "")); got != api.RunFailed {
		t.Fatalf("run in the caller's sandbox: status %q, want failed", got)
	}
	ts.must(t, 200, "GET", "/v1/sandboxes/"+mine.ID, key, nil, &sb)
	if sb.State != "running" {
		t.Errorf("the caller's own sandbox is %s after the run failed, want running (left alone)", sb.State)
	}

	// The model answers now: a message goes on in the stopped sandbox.
	ts.must(t, 200, "POST", "/v1/runs/"+run.ID+"/messages", key, api.RunMessage{Input: "again"}, nil)
	if got := lastStatus(ts.readEvents(t, key, run.ID, run.LastEventID, "")); got != api.RunIdle {
		t.Fatalf("follow-up after the key was fixed: status %q, want idle", got)
	}
	ts.must(t, 200, "GET", "/v1/sandboxes/"+run.SandboxID, key, nil, &sb)
	if sb.State != "running" {
		t.Errorf("after a follow-up the run's sandbox is %s, want running (resumed)", sb.State)
	}
}

// TestRunUnreachableModelStopsSandbox: an agent.base_url nobody listens
// on fails the run, and the sandbox made for it does not stay running.
func TestRunUnreachableModelStopsSandbox(t *testing.T) {
	ts := runServer(t, fake.NewServer(t))
	key := ts.teamKey(t, "alpha")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String() + "/v1"
	l.Close() // nobody listens there now

	var run api.Run
	ts.must(t, 201, "POST", "/v1/runs", key, map[string]any{"input": "hello", "agent": map[string]any{"base_url": dead, "model": "m"}}, &run)
	if got := lastStatus(ts.readEvents(t, key, run.ID, 0, "")); got != api.RunFailed {
		t.Fatalf("status %q, want failed", got)
	}
	var sb api.Sandbox
	ts.must(t, 200, "GET", "/v1/sandboxes/"+run.SandboxID, key, nil, &sb)
	if sb.State != "stopped" {
		t.Errorf("the run's own sandbox is %s after its endpoint was unreachable, want stopped", sb.State)
	}
}

// TestRunWithoutModelMakesNoSandbox: on a server with no model, a run
// is refused before any sandbox is made.
func TestRunWithoutModelMakesNoSandbox(t *testing.T) {
	ts := newTestServer(t, Config{}) // no OPENAI_API_KEY, no --model-base-url
	key := ts.teamKey(t, "alpha")
	code, body := ts.call(t, "POST", "/v1/runs", key, map[string]any{"input": "hello"})
	if code < 400 || code >= 500 {
		t.Fatalf("run without a model: %d %s, want a 4xx that says what to set", code, body)
	}
	var list api.SandboxList
	ts.must(t, 200, "GET", "/v1/sandboxes", key, nil, &list)
	if len(list.Sandboxes) != 0 {
		t.Errorf("a refused run left %d sandboxes: %+v", len(list.Sandboxes), list.Sandboxes)
	}
}
