package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/sandbox"
)

// hostLeaks are what a message a tenant sees must never hold: host
// paths, loop devices, cgroup files.
var hostLeaks = []string{"/var/", "/tmp/", "/dev/loop", "/sys/fs/cgroup", "level="}

func noHostDetail(t *testing.T, what string, data []byte) {
	t.Helper()
	for _, l := range hostLeaks {
		if strings.Contains(string(data), l) {
			t.Errorf("%s shows the tenant %q: %s", what, l, data)
		}
	}
}

// TestCreateLimitsInput: every resource a create asks for is checked
// against a documented range and refused with a 400 that gives the
// range, before any sandbox is made; labels with control characters are
// refused too. Nothing in the answers shows the host.
func TestCreateLimitsInput(t *testing.T) {
	ts := newTestServer(t, Config{})
	key := ts.teamKey(t, "limits")
	for _, tc := range []struct {
		name, body, want string
	}{
		{"cpus below the minimum", `{"cpus":0.01}`, "cpus: 0.01 is out of range; give 0.1 to 64"},
		{"cpus over the maximum", `{"cpus":65}`, "cpus: 65 is out of range"},
		{"tiny memory", `{"memory_bytes":1048576}`, "memory_bytes: 1048576 is out of range; give 67108864 (64 MiB) to 1099511627776 (1 TiB)"},
		{"one byte of memory", `{"memory_bytes":1}`, "memory_bytes: 1 is out of range"},
		{"huge memory", `{"memory_bytes":4611686018427387904}`, "memory_bytes: 4611686018427387904 is out of range"},
		{"tiny disk", `{"disk_bytes":1}`, "disk_bytes: 1 is out of range; give 16777216 (16 MiB) to 1099511627776 (1 TiB)"},
		{"huge disk", `{"disk_bytes":4611686018427387904}`, "disk_bytes: 4611686018427387904 is out of range"},
		{"disk past ext4", `{"disk_bytes":17592186044416}`, "disk_bytes: 17592186044416 is out of range"},
		{"too few pids", `{"pids":5}`, "pids: 5 is out of range; give 32 to 8192"},
		{"too many pids", `{"pids":100000}`, "pids: 100000 is out of range; give 32 to 8192"},
		{"unlimited pids", `{"pids":-1}`, "pids: -1 (no limit) is not allowed on this server; give 32 to 8192"},
		{"negative pids", `{"pids":-2}`, "pids: -2 is out of range"},
		{"NUL in a label key", `{"labels":{"a\u0000b":"x"}}`, "keys may not hold control characters"},
		{"escape in a label key", `{"labels":{"a\u001b[2Jb":"x"}}`, "keys may not hold control characters"},
		{"= in a label key", `{"labels":{"a=b":"x"}}`, `or "="`},
		{"NUL in a label value", `{"labels":{"app":"x\u0000y"}}`, `label "app": values may not hold control characters`},
		{"C1 control in a label value", `{"labels":{"app":"x\u009by"}}`, "values may not hold control characters"},
	} {
		code, data := ts.call(t, "POST", "/v1/sandboxes", key, tc.body)
		if code != http.StatusBadRequest || !strings.Contains(apiError(t, data).Message, tc.want) {
			t.Errorf("%s: %d %s, want 400 with %q", tc.name, code, data, tc.want)
		}
		noHostDetail(t, tc.name, data)
	}
	// E2B's create names labels metadata.
	code, data := ts.call(t, "POST", "/sandboxes", key, `{"templateID":"base","metadata":{"a\u0000b":"x"}}`)
	if code != http.StatusBadRequest || !strings.Contains(string(data), "metadata key") {
		t.Errorf("E2B create with a NUL in a metadata key: %d %s, want 400", code, data)
	}
	if infos, _ := ts.Runtime.List(t.Context()); len(infos) != 0 {
		t.Errorf("refused creates left sandboxes: %+v", infos)
	}
}

// TestPidsLimit: every sandbox gets a finite pids limit, by its size or
// as asked (through /v1 and E2B's API alike), the limit holds against a
// fork bomb, and no limit at all is only for a server that allows it.
func TestPidsLimit(t *testing.T) {
	ts := newTestServer(t, Config{MaxPids: 4096})
	key := ts.teamKey(t, "pids")
	for size, want := range map[string]int{"": 512, "small": 512, "medium": 1024, "large": 2048} {
		sb := ts.create(t, key, api.CreateSandbox{Size: size})
		in := runtimeInfo(t, ts.Runtime, sb.ID)
		if sb.Pids != want || in.Spec.Limits.Pids != want {
			t.Errorf("size %q: the API shows pids %d, the runtime has %d; want %d", size, sb.Pids, in.Spec.Limits.Pids, want)
		}
		ts.must(t, 204, "DELETE", "/v1/sandboxes/"+sb.ID, key, nil, nil)
	}
	var e2b struct {
		SandboxID string `json:"sandboxID"`
	}
	ts.must(t, 201, "POST", "/sandboxes", key, map[string]any{"templateID": "base"}, &e2b)
	var got api.Sandbox
	ts.must(t, 200, "GET", "/v1/sandboxes/"+e2b.SandboxID, key, nil, &got)
	if got.Pids != 512 {
		t.Errorf("E2B create: pids %d, want the small size's 512", got.Pids)
	}
	ts.must(t, 204, "DELETE", "/v1/sandboxes/"+e2b.SandboxID, key, nil, nil)
	if code, data := ts.call(t, "POST", "/v1/sandboxes", key, api.CreateSandbox{Pids: 5000}); code != 400 || !strings.Contains(string(data), "give 32 to 4096") {
		t.Errorf("pids over the operator's maximum: %d %s", code, data)
	}

	// A fork bomb stops at the limit; the sandbox still answers.
	sb := ts.create(t, key, api.CreateSandbox{Pids: 64})
	if sb.Pids != 64 {
		t.Fatalf("asked for 64 pids, got %d", sb.Pids)
	}
	// The loop's shell dies when it cannot fork; after it, builtins
	// only, as the limit leaves no room to fork.
	out := ts.exec(t, key, sb.ID, "(i=0; while [ $i -lt 200 ]; do sleep 60 </dev/null >/dev/null 2>&1 & i=$((i+1)); done) 2>/dev/null; "+
		"set -- /proc/[0-9]*; echo $#; trap '' TERM; kill -TERM 0")
	var n int
	if _, err := fmt.Sscanf(strings.TrimSpace(out), "%d", &n); err != nil || n < 20 || n > 64 {
		t.Errorf("processes after starting 200: %q, want at most the limit of 64", out)
	}
	if out := ts.exec(t, key, sb.ID, "echo alive"); !strings.Contains(out, "alive") {
		t.Errorf("the sandbox after the fork loop: %q", out)
	}

	open := newTestServer(t, Config{AllowUnlimitedPids: true})
	okey := open.teamKey(t, "pids")
	sb = open.create(t, okey, api.CreateSandbox{Pids: api.PidsUnlimited})
	in := runtimeInfo(t, open.Runtime, sb.ID)
	if sb.Pids != api.PidsUnlimited || in.Spec.Limits.Pids != sandbox.NoPidsLimit {
		t.Errorf("unlimited where allowed: the API shows %d, the runtime has %d", sb.Pids, in.Spec.Limits.Pids)
	}
}

// runtimeInfo is what the runtime knows of a sandbox.
func runtimeInfo(t *testing.T, rt sandbox.Runtime, id string) sandbox.Info {
	t.Helper()
	sess, err := rt.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	in, err := sess.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// exec runs a shell command in a sandbox and returns its stdout and
// stderr together.
func (ts *testServer) exec(t *testing.T, key, id, script string) string {
	t.Helper()
	code, data := ts.call(t, "POST", "/v1/sandboxes/"+id+"/exec", key, api.Exec{Cmd: script, Shell: true, TimeoutSeconds: 60})
	if code != 200 {
		t.Fatalf("exec: %d %s", code, data)
	}
	var out strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var ev api.ExecEvent
		if json.Unmarshal([]byte(line), &ev) == nil && (ev.Type == "stdout" || ev.Type == "stderr") {
			out.Write(ev.Data)
		}
	}
	return out.String()
}

// TestOpenAPIDocumentsLimits: the OpenAPI document gives each field's
// range and policy, and every documented field exists.
func TestOpenAPIDocumentsLimits(t *testing.T) {
	doc := buildOpenAPI()
	schemas := doc["components"].(map[string]any)["schemas"].(map[string]any)
	for key := range fieldDocs {
		typ, field, _ := strings.Cut(key, ".")
		s, ok := schemas[typ].(map[string]any)
		if !ok {
			t.Errorf("fieldDocs names %s, which is not a schema", typ)
			continue
		}
		p, ok := s["properties"].(map[string]any)[field].(map[string]any)
		if !ok || p["description"] == nil {
			t.Errorf("%s has no documented property %s", typ, field)
		}
	}
	pids := schemas["CreateSandbox"].(map[string]any)["properties"].(map[string]any)["pids"].(map[string]any)
	if pids["type"] != "integer" || !strings.Contains(pids["description"].(string), "--max-pids") {
		t.Errorf("CreateSandbox.pids = %v", pids)
	}
}
