package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/sandbox/local"
)

// needGVisor skips a test of the gvisor tier where the server's runtime
// cannot have it: not root (no local runtime), or no runsc (scripts/deps.sh
// installs it; CI has it).
func needGVisor(t *testing.T, ts *testServer) {
	t.Helper()
	if _, ok := ts.Runtime.(*local.Runtime); !ok {
		t.Skip("the gvisor tier is the local runtime's, which needs root")
	}
	if _, err := exec.LookPath("runsc"); err != nil {
		if _, err := os.Stat("/usr/local/bin/runsc"); err != nil {
			t.Skip("runsc is not installed (scripts/deps.sh installs it)")
		}
	}
}

// processTags lists the tags of a sandbox's running background
// processes.
func (ts *testServer) processTags(t *testing.T, key, id string) []string {
	t.Helper()
	var pl api.ProcessList
	ts.must(t, http.StatusOK, "GET", "/v1/sandboxes/"+id+"/processes", key, nil, &pl)
	var tags []string
	for _, p := range pl.Processes {
		tags = append(tags, p.Tag)
	}
	return tags
}

// wantCodeError checks a call failed with status and an API error whose
// message holds every part of want and no host path of the server's.
func (ts *testServer) wantCodeError(t *testing.T, what string, status int, method, path, key string, body any, want ...string) {
	t.Helper()
	code, data := ts.call(t, method, path, key, body)
	if code != status {
		t.Errorf("%s: status %d, want %d: %s", what, code, status, data)
		return
	}
	e := apiError(t, data)
	for _, w := range want {
		if !strings.Contains(e.Message, w) {
			t.Errorf("%s: message %q does not say %q", what, e.Message, w)
		}
	}
	if strings.Contains(e.Message, ts.dir) {
		t.Errorf("%s: message %q shows a host path", what, e.Message)
	}
}

// TestIsolationAPI: /v1 takes and shows the tier; bad input says what
// to do; a native sandbox's pause keeps its disk and refuses to keep
// memory; forks of N check their count; another team reaches none of it.
func TestIsolationAPI(t *testing.T) {
	ts := newTestServer(t, Config{})
	key := ts.teamKey(t, "iso")
	other := ts.teamKey(t, "iso-other")

	ts.wantCodeError(t, "create with an unknown isolation", 400, "POST", "/v1/sandboxes", key,
		api.CreateSandbox{Isolation: "firecracker"}, `isolation "firecracker"`, "native", "gvisor")
	sb := ts.create(t, key, api.CreateSandbox{})
	if sb.Isolation != "native" || sb.Paused {
		t.Errorf("a default create: isolation %q paused %v, want native, not paused", sb.Isolation, sb.Paused)
	}
	var raw map[string]any
	ts.must(t, 200, "GET", "/v1/sandboxes/"+sb.ID, key, nil, &raw)
	if raw["isolation"] != "native" {
		t.Errorf("GET shows isolation %v, want native", raw["isolation"])
	}

	for _, body := range []any{api.Fork{Count: 0}, api.Fork{Count: 1000}, map[string]any{"count": -1}} {
		ts.wantCodeError(t, fmt.Sprintf("forks %v", body), 400, "POST", "/v1/sandboxes/"+sb.ID+"/forks", key, body, "count", fmt.Sprint(api.MaxForks))
	}
	ts.wantCodeError(t, "another team's forks", 404, "POST", "/v1/sandboxes/"+sb.ID+"/forks", other, api.Fork{Count: 1})
	ts.wantCodeError(t, "another team's pause", 404, "POST", "/v1/sandboxes/"+sb.ID+"/pause", other, nil)
	if ts.state(t, key, sb.ID) != "running" {
		t.Fatal("another team's calls changed the sandbox")
	}

	var forks api.SandboxList
	ts.must(t, 201, "POST", "/v1/sandboxes/"+sb.ID+"/forks", key, api.Fork{Count: 2}, &forks)
	if len(forks.Sandboxes) != 2 {
		t.Fatalf("forks of 2: %d sandboxes", len(forks.Sandboxes))
	}
	for _, f := range forks.Sandboxes {
		if f.State != "running" || f.Isolation != "native" || f.ID == sb.ID {
			t.Errorf("a fork: %+v, want a new running native sandbox", f)
		}
		ts.must(t, 204, "DELETE", "/v1/sandboxes/"+f.ID, key, nil, nil)
	}

	keep := true
	ts.wantCodeError(t, "a native pause keeping memory", 400, "POST", "/v1/sandboxes/"+sb.ID+"/pause", key,
		api.Pause{KeepMemory: &keep}, "native", "disk only", "gvisor")
	if ts.state(t, key, sb.ID) != "running" {
		t.Fatal("a refused pause stopped the sandbox")
	}
	var paused api.Sandbox
	ts.must(t, 200, "POST", "/v1/sandboxes/"+sb.ID+"/pause", key, nil, &paused)
	if paused.State != "stopped" || paused.Paused || paused.Deadline != nil {
		t.Errorf("a native pause: state %s paused %v deadline %v; want stopped with the disk only, no deadline", paused.State, paused.Paused, paused.Deadline)
	}
	ts.wantCodeError(t, "a pause of a stopped sandbox", 409, "POST", "/v1/sandboxes/"+sb.ID+"/pause", key, nil, "stopped")
	ts.must(t, 204, "DELETE", "/v1/sandboxes/"+sb.ID, key, nil, nil)
}

// TestGVisorPauseKeepsProcesses: a gvisor sandbox paused through /v1
// comes back with its background process running where it was (same
// process, same memory), and its forks start with that process too.
func TestGVisorPauseKeepsProcesses(t *testing.T) {
	ts := newTestServer(t, Config{})
	needGVisor(t, ts)
	key := ts.teamKey(t, "gvpause")
	sb := ts.create(t, key, api.CreateSandbox{Isolation: "gvisor"})
	if sb.Isolation != "gvisor" {
		t.Fatalf("create: isolation %q, want gvisor", sb.Isolation)
	}
	// A token only this process's memory holds, written with a count
	// that goes on from where it was.
	loop := `tok=$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n'); i=0; while :; do i=$((i+1)); echo "$tok $i" > /tmp/counter; sleep 0.1; done`
	ts.must(t, 200, "POST", "/v1/sandboxes/"+sb.ID+"/exec", key, api.Exec{Cmd: loop, Shell: true, Background: true, Tag: "loop"}, nil)
	read := func(id string) (string, int) {
		t.Helper()
		var tok string
		var n int
		for range 100 {
			if _, err := fmt.Sscan(ts.exec(t, key, id, "cat /tmp/counter"), &tok, &n); err == nil && n > 0 {
				return tok, n
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("sandbox %s: no counter", id)
		return "", 0
	}
	tok, before := read(sb.ID)

	var paused api.Sandbox
	ts.must(t, 200, "POST", "/v1/sandboxes/"+sb.ID+"/pause", key, nil, &paused)
	if paused.State != "stopped" || !paused.Paused {
		t.Fatalf("pause: state %s paused %v, want stopped and paused", paused.State, paused.Paused)
	}
	var list api.SandboxList
	ts.must(t, 200, "GET", "/v1/sandboxes", key, nil, &list)
	if len(list.Sandboxes) != 1 || !list.Sandboxes[0].Paused || list.Sandboxes[0].Isolation != "gvisor" {
		t.Errorf("list: %+v, want the sandbox paused on gvisor", list.Sandboxes)
	}

	var resumed api.Sandbox
	ts.must(t, 200, "POST", "/v1/sandboxes/"+sb.ID+"/resume", key, nil, &resumed)
	if resumed.State != "running" || resumed.Paused {
		t.Fatalf("resume: state %s paused %v", resumed.State, resumed.Paused)
	}
	if tags := ts.processTags(t, key, sb.ID); !slices.Contains(tags, "loop") {
		t.Errorf("after resume the background processes are %q, want the loop", tags)
	}
	// The same process: its token, and a count from where it was.
	var after int
	var tok2 string
	for range 100 {
		if tok2, after = read(sb.ID); after > before {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if tok2 != tok || after <= before {
		t.Errorf("after resume the counter is %q %d, want %q counting on from %d (the same process)", tok2, after, tok, before)
	}

	var forks api.SandboxList
	ts.must(t, 201, "POST", "/v1/sandboxes/"+sb.ID+"/forks", key, api.Fork{Count: 2}, &forks)
	if len(forks.Sandboxes) != 2 {
		t.Fatalf("forks of 2: %d", len(forks.Sandboxes))
	}
	for _, f := range forks.Sandboxes {
		if f.Isolation != "gvisor" || f.State != "running" {
			t.Errorf("fork %s: %s %s, want a running gvisor sandbox", f.ID, f.Isolation, f.State)
		}
		if ftok, _ := read(f.ID); ftok != tok {
			t.Errorf("fork %s: counter token %q, want the source's %q (its process, copied)", f.ID, ftok, tok)
		}
	}
	if tags := ts.processTags(t, key, sb.ID); !slices.Contains(tags, "loop") {
		t.Errorf("the source after its fork: processes %q, want the loop still", tags)
	}

	// keep_memory false: a stop, even on gvisor.
	no := false
	var stopped api.Sandbox
	ts.must(t, 200, "POST", "/v1/sandboxes/"+sb.ID+"/pause", key, api.Pause{KeepMemory: &no}, &stopped)
	if stopped.State != "stopped" || stopped.Paused {
		t.Errorf("pause with keep_memory false: %s paused %v, want stopped without memory", stopped.State, stopped.Paused)
	}
	for _, id := range append([]string{sb.ID}, forks.Sandboxes[0].ID, forks.Sandboxes[1].ID) {
		ts.must(t, 204, "DELETE", "/v1/sandboxes/"+id, key, nil, nil)
	}
	var left api.SandboxList
	ts.must(t, 200, "GET", "/v1/sandboxes", key, nil, &left)
	if len(left.Sandboxes) != 0 {
		data, _ := json.Marshal(left)
		t.Errorf("left after deletes: %s", data)
	}
}

// TestIsolationWithoutRunsc: a server whose host has no runsc refuses a
// gvisor create (400, through /v1 and E2B's API: no retry helps) saying
// the tier is not here and native is, naming no host path, and makes
// nothing; native creates work. The
// E2B create's isolation field and metadata cove.isolation must agree.
func TestIsolationWithoutRunsc(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the gvisor tier is the local runtime's, which needs root")
	}
	dir, err := os.MkdirTemp("", "nrs") // short: unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	rt, err := local.New(local.Config{Dir: filepath.Join(dir, "sb"), Runsc: filepath.Join(dir, "no-runsc"), Env: []string{"GORACE=atexit_sleep_ms=0"}})
	if err != nil {
		t.Skipf("local runtime unavailable: %v", err)
	}
	ts := newTestServer(t, Config{Runtime: rt})
	key := ts.teamKey(t, "norunsc")
	ts.wantCodeError(t, "a gvisor create without runsc", 400, "POST", "/v1/sandboxes", key,
		api.CreateSandbox{Isolation: "gvisor"}, "runsc", "scripts/deps.sh", "native")
	if strings.Contains(fmt.Sprint(ts.call(t, "POST", "/v1/sandboxes", key, api.CreateSandbox{Isolation: "gvisor"})), dir) {
		t.Error("the refusal shows the server's directory")
	}

	ek := ts.e2bKey(t, "norunsc-e2b")
	for _, tc := range []struct {
		body   map[string]any
		status int
		want   string
	}{
		{map[string]any{"metadata": map[string]string{"cove.isolation": "gvisor"}}, 400, "no gvisor tier"},
		{map[string]any{"isolation": "gvisor"}, 400, "no gvisor tier"},
		{map[string]any{"isolation": "gvisor", "metadata": map[string]string{"cove.isolation": "native"}}, 400, "disagree"},
		{map[string]any{"metadata": map[string]string{"cove.isolation": "kvm"}}, 400, "kvm"},
	} {
		resp, data := ts.e2bCall(t, "POST", "/v2/sandboxes", ek, tc.body, nil)
		if resp.StatusCode != tc.status || !strings.Contains(string(data), tc.want) || strings.Contains(string(data), dir) {
			t.Errorf("E2B create %v: %d %s; want %d saying %q, no host path", tc.body, resp.StatusCode, data, tc.status, tc.want)
		}
	}
	if infos, _ := rt.List(t.Context()); len(infos) != 0 {
		t.Errorf("refused creates left %d sandboxes", len(infos))
	}
	sb := ts.create(t, key, api.CreateSandbox{})
	if sb.Isolation != "native" {
		t.Errorf("a native create: %q", sb.Isolation)
	}
	ts.must(t, 204, "DELETE", "/v1/sandboxes/"+sb.ID, key, nil, nil)
	// The templates list says which tiers this server has, for the
	// create form (which disables gvisor) and API clients.
	var tl api.TemplateList
	ts.must(t, 200, "GET", "/v1/templates", key, nil, &tl)
	if fmt.Sprint(tl.Isolations) != "[native]" {
		t.Errorf("a server without runsc lists the tiers %v, want [native]", tl.Isolations)
	}
}
