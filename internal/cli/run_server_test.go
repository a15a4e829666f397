package cli

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/cove-sandbox/cove/agent/model/fake"
	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/internal/cli/clibase"
)

// TestRunOnServer: with COVE_SERVER (and COVE_API_KEY) set, cove run
// makes its sandbox on that server, through sandbox/remote, and none on
// this machine; a run saved while it waits for approval goes on in the
// server's sandbox, found again through the saved flags, and the sandbox
// goes when the run ends.
func TestRunOnServer(t *testing.T) {
	home := runEnv(t)
	shome, data := serveHome(t, "cs")
	p := startServe(t, shome, data)
	t.Setenv("COVE_SERVER", p.url)
	t.Setenv("COVE_API_KEY", p.admin)
	ws := newWorkspace(t)
	state := filepath.Join(t.TempDir(), "state.json")
	model := fake.NewServer(t,
		fake.Call("exec_command", `{"cmd":"cat notes.txt"}`),
		fake.Text("done"),
	)
	out, errOut, err := run(t, "run", "--json", "--approve", "all", "--state", state, "--base-url", model.URL, "--workspace", ws, "read the notes")
	if clibase.ExitCode(err) != 3 {
		t.Fatalf("a run waiting for approval: exit %d (%v), want 3\n%s\n%s", clibase.ExitCode(err), err, out, errOut)
	}
	id := savedSandbox(t, state)
	var sb api.Sandbox
	if code := apiCall(t, "GET", p.url+"/v1/sandboxes/"+id, p.admin, nil, &sb); code != http.StatusOK || sb.State != "running" {
		t.Fatalf("the run's sandbox %s on the server: HTTP %d, state %q; want it running there\n%s", id, code, sb.State, p.stderr.String())
	}
	if left := sandboxesIn(t, home); len(left) > 0 {
		t.Errorf("sandboxes on this machine: %v, want none (the run's is the server's)", left)
	}

	// The resume finds the server in the saved flags.
	t.Setenv("COVE_SERVER", "")
	out, errOut, code := coveProcess(t, "run", "--resume", state, "--approve-call", "all", "--json")
	if code != 0 {
		t.Fatalf("resume: exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	evs := jsonEvents(t, out)
	if !strings.Contains(notes(evs), "resuming in sandbox "+id) {
		t.Errorf("the resumed run does not say it reattached %s:\n%s", id, out)
	}
	if got := output(evs, "call_1"); got != "one\ntwo\n" {
		t.Errorf("cat notes.txt in the server's sandbox printed %q, want the uploaded workspace's", got)
	}
	if code := apiCall(t, "GET", p.url+"/v1/sandboxes/"+id, p.admin, nil, nil); code != http.StatusNotFound {
		t.Errorf("the run's sandbox after the run: HTTP %d, want 404 (deleted with the run)", code)
	}
}

// TestRunOnServerKeepsTheModelKey: cove run against a Cove server calls
// the model from this machine; the OpenAI key goes to the model and to
// nothing else: not in any request to the server (headers or bodies), not
// in the sandbox's environment.
func TestRunOnServerKeepsTheModelKey(t *testing.T) {
	runEnv(t)
	const canary = "sk-canary-7f3a9c"
	t.Setenv("OPENAI_API_KEY", canary)
	shome, data := serveHome(t, "ck")
	p := startServe(t, shome, data)
	target, err := url.Parse(p.url)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []string
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.FlushInterval = -1
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		mu.Lock()
		seen = append(seen, fmt.Sprint(r.Method, " ", r.URL, " ", r.Header, " ", string(body)))
		mu.Unlock()
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	t.Setenv("COVE_SERVER", front.URL)
	t.Setenv("COVE_API_KEY", p.admin)
	model := fake.NewServer(t,
		fake.Call("exec_command", `{"cmd":"env"}`),
		fake.Text("done"),
	)
	out, errOut, err := run(t, "run", "--json", "--approve", "never", "--base-url", model.URL, "--workspace", newWorkspace(t), "show the environment")
	if err != nil {
		t.Fatalf("cove run: %v\n%s\n%s", err, out, errOut)
	}
	if got := output(jsonEvents(t, out), "call_1"); got == "" || strings.Contains(got, canary) {
		t.Errorf("the sandbox's environment: %q, want it without the model key", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) == 0 {
		t.Fatal("no request reached the server")
	}
	for _, s := range seen {
		if strings.Contains(s, canary) {
			t.Errorf("the model key reached the server: %s", s)
		}
	}
	if reqs := model.Requests(); len(reqs) == 0 || !strings.Contains(reqs[0].Header.Get("Authorization"), canary) {
		t.Errorf("the model was not called with the key")
	}
}
