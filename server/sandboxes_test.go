package server

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/api"
)

func TestSandboxLifecycleAPI(t *testing.T) {
	ts := newTestServer(t, Config{})
	key := ts.teamKey(t, "alpha")
	sb := ts.create(t, key, api.CreateSandbox{Labels: map[string]string{"app": "web"}, TTLSeconds: 600})
	if sb.State != "running" || sb.Labels["app"] != "web" || sb.Deadline == nil || sb.CPUs != 1 {
		t.Errorf("created %+v", sb)
	}
	var got api.Sandbox
	ts.must(t, 200, "GET", "/v1/sandboxes/"+sb.ID, key, nil, &got)
	if got.ID != sb.ID {
		t.Errorf("get: %+v", got)
	}
	ts.must(t, 200, "POST", "/v1/sandboxes/"+sb.ID+"/stop", key, nil, &got)
	if got.State != "stopped" || got.StoppedAt == nil {
		t.Errorf("after stop: %+v", got)
	}
	var list api.SandboxList
	ts.must(t, 200, "GET", "/v1/sandboxes?state=stopped&label=app=web", key, nil, &list)
	if len(list.Sandboxes) != 1 {
		t.Errorf("list stopped: %+v", list)
	}
	ts.must(t, 200, "POST", "/v1/sandboxes/"+sb.ID+"/resume", key, nil, &got)
	if got.State != "running" {
		t.Errorf("after resume: %+v", got)
	}
	ts.must(t, 200, "POST", "/v1/sandboxes/"+sb.ID+"/ttl", key, api.SetTTL{TTLSeconds: 3600}, &got)
	if got.Deadline == nil || got.Deadline.Sub(*sb.Deadline) < 2900e9 {
		t.Errorf("ttl not moved: %v -> %v", sb.Deadline, got.Deadline)
	}
	var fork api.Sandbox
	ts.must(t, 201, "POST", "/v1/sandboxes/"+sb.ID+"/fork", key, nil, &fork)
	if fork.ID == sb.ID || fork.Labels["app"] != "web" {
		t.Errorf("fork: %+v", fork)
	}
	ts.must(t, 204, "DELETE", "/v1/sandboxes/"+sb.ID, key, nil, nil)
	code, data := ts.call(t, "GET", "/v1/sandboxes/"+sb.ID, key, nil)
	if code != 404 || apiError(t, data).Code != api.CodeNotFound {
		t.Errorf("get after delete: %d %s", code, data)
	}
}

func TestAuth(t *testing.T) {
	ts := newTestServer(t, Config{})
	for _, key := range []string{"", "sk-wrong", "cove_0000"} {
		code, data := ts.call(t, "GET", "/v1/sandboxes", key, nil)
		if code != http.StatusUnauthorized || apiError(t, data).Code != api.CodeUnauthorized {
			t.Errorf("key %q: %d %s", key, code, data)
		}
	}
	key := ts.teamKey(t, "beta")
	code, data := ts.call(t, "POST", "/v1/keys", key, api.CreateKey{Name: "x", NewTeam: "evil"})
	if code != http.StatusForbidden {
		t.Errorf("non-admin making a team: %d %s", code, data)
	}
	var keys struct{ Keys []api.Key }
	ts.must(t, 200, "GET", "/v1/keys", key, nil, &keys)
	if len(keys.Keys) != 1 || keys.Keys[0].Team != "beta" || keys.Keys[0].Secret != "" {
		t.Errorf("keys of beta: %+v", keys)
	}
	ts.must(t, 204, "DELETE", "/v1/keys/"+keys.Keys[0].ID, key, nil, nil)
	if code, _ := ts.call(t, "GET", "/v1/sandboxes", key, nil); code != http.StatusUnauthorized {
		t.Errorf("revoked key still works: %d", code)
	}
}

func TestBadCreateInput(t *testing.T) {
	ts := newTestServer(t, Config{})
	key := ts.teamKey(t, "gamma")
	for _, tc := range []struct {
		name, body, want string
		status           int
	}{
		{"malformed", `{"template":`, "malformed JSON", 400},
		{"unknown field", `{"tempate":"host"}`, `unknown field "tempate"`, 400},
		{"wrong type", `{"cpus":"two"}`, `field "cpus" must be float64`, 400},
		{"negative size", `{"memory_bytes":-1}`, "memory_bytes: -1 is out of range", 400},
		{"ttl overflow", `{"ttl_seconds":9223372036854775807}`, "over the limit", 400},
		{"negative ttl", `{"ttl_seconds":-5}`, "negative", 400},
		{"bad size", `{"size":"huge"}`, "use small, medium or large", 400},
		{"bad expiry", `{"on_expire":"explode"}`, "use stop", 400},
		{"reserved label", `{"labels":{"cove.team":"admin"}}`, "may not start with cove.", 400},
		{"bad manifest", `{"manifest":{"entries":{"../x":{"type":"file","content":"x"}}}}`, "manifest", 400},
		{"bad network", `{"network":{"mode":"host"}}`, "want none, internet or allow", 400},
		{"allow without mode", `{"network":{"allow":["1.2.3.4"]}}`, "for mode allow", 400},
		{"allow without list", `{"network":{"mode":"allow"}}`, "needs an allow list", 400},
		{"empty", ``, "empty", 400},
		{"trailing", `{} {}`, "after the JSON", 400},
		{"huge", `{"template":"` + strings.Repeat("a", 2<<20) + `"}`, "over", 413},
	} {
		code, data := ts.call(t, "POST", "/v1/sandboxes", key, tc.body)
		if code != tc.status || !strings.Contains(apiError(t, data).Message, tc.want) {
			t.Errorf("%s: %d %s, want %d with %q", tc.name, code, data, tc.status, tc.want)
		}
	}
	var list api.SandboxList
	ts.must(t, 200, "GET", "/v1/sandboxes", key, nil, &list)
	if len(list.Sandboxes) != 0 {
		t.Errorf("bad requests made sandboxes: %+v", list.Sandboxes)
	}
	if infos, _ := ts.Runtime.List(t.Context()); len(infos) != 0 {
		t.Errorf("bad requests left runtime sandboxes: %+v", infos)
	}
}

func TestQuota(t *testing.T) {
	ts := newTestServer(t, Config{})
	key := ts.teamKey(t, "small-team")
	if code, _ := ts.call(t, "PUT", "/v1/teams/small-team/quota", key, api.Quota{Sandboxes: 1}); code != http.StatusForbidden {
		t.Errorf("a team setting its own quota: %d, want 403", code)
	}
	ts.must(t, 200, "PUT", "/v1/teams/small-team/quota", ts.Admin, api.Quota{Sandboxes: 1, CPUs: 1.5}, nil)
	first := ts.create(t, key, api.CreateSandbox{})
	code, data := ts.call(t, "POST", "/v1/sandboxes", key, api.CreateSandbox{})
	if code != http.StatusTooManyRequests || apiError(t, data).Code != api.CodeLimit || !strings.Contains(string(data), "1 sandboxes at once") {
		t.Errorf("second sandbox over the quota: %d %s", code, data)
	}
	// Stopped sandboxes do not count; a resume is checked like a create.
	ts.must(t, 200, "POST", "/v1/sandboxes/"+first.ID+"/stop", key, nil, nil)
	second := ts.create(t, key, api.CreateSandbox{})
	if code, data := ts.call(t, "POST", "/v1/sandboxes/"+first.ID+"/resume", key, nil); code != http.StatusTooManyRequests {
		t.Errorf("resume over the quota: %d %s", code, data)
	}
	ts.must(t, 204, "DELETE", "/v1/sandboxes/"+second.ID, key, nil, nil)
	ts.must(t, 200, "PUT", "/v1/teams/small-team/quota", ts.Admin, api.Quota{Sandboxes: 5, CPUs: 1.5}, nil)
	if code, data := ts.call(t, "POST", "/v1/sandboxes", key, api.CreateSandbox{CPUs: 2}); code != http.StatusTooManyRequests || !strings.Contains(string(data), "CPUs") {
		t.Errorf("over the CPU quota: %d %s", code, data)
	}
	var q api.Quota
	ts.must(t, 200, "GET", "/v1/teams/small-team/quota", key, nil, &q)
	if q.Sandboxes != 5 || q.CPUs != 1.5 {
		t.Errorf("quota read back: %+v", q)
	}
	if code, _ := ts.call(t, "GET", "/v1/teams/admin/quota", key, nil); code != http.StatusNotFound {
		t.Errorf("another team's quota: %d, want 404", code)
	}
}

// TestFileOpsAreActivity: using a sandbox's files counts as activity for
// its idle timeout; reading its record does not.
func TestFileOpsAreActivity(t *testing.T) {
	ts := newTestServer(t, Config{})
	key := ts.teamKey(t, "active")
	sb := ts.create(t, key, api.CreateSandbox{})
	before := ts.fleet.LastActivity(sb.ID)
	time.Sleep(5 * time.Millisecond)
	ts.must(t, 200, "GET", "/v1/sandboxes/"+sb.ID, key, nil, nil)
	if got := ts.fleet.LastActivity(sb.ID); !got.Equal(before) {
		t.Errorf("reading the record moved the activity: %v -> %v", before, got)
	}
	ts.must(t, 204, "PUT", "/v1/sandboxes/"+sb.ID+"/files?path=a.txt", key, "x", nil)
	if got := ts.fleet.LastActivity(sb.ID); !got.After(before) {
		t.Errorf("writing a file did not count as activity: %v -> %v", before, got)
	}
}

// TestCreateWithNetwork: the network policy reaches the runtime and shows
// in the sandbox's description.
func TestCreateWithNetwork(t *testing.T) {
	ts := newTestServer(t, Config{})
	key := ts.teamKey(t, "alpha")
	sb := ts.create(t, key, api.CreateSandbox{Network: &api.Network{Mode: "allow", Allow: []string{"203.0.113.7:443"}}})
	if sb.Network == nil || sb.Network.Mode != "allow" || len(sb.Network.Allow) != 1 {
		t.Errorf("network = %+v", sb.Network)
	}
	plain := ts.create(t, key, api.CreateSandbox{})
	if plain.Network != nil {
		t.Errorf("a sandbox without a policy shows network %+v", plain.Network)
	}
}

// TestQuotaConcurrentCreates: creates run side by side, yet a burst of
// them never gets past the quota: the ones admitted count while they are
// being made.
func TestQuotaConcurrentCreates(t *testing.T) {
	ts := newTestServer(t, Config{})
	key := ts.teamKey(t, "burst")
	ts.must(t, 200, "PUT", "/v1/teams/burst/quota", ts.Admin, api.Quota{Sandboxes: 3}, nil)
	codes := make(chan int, 10)
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, _ := ts.call(t, "POST", "/v1/sandboxes", key, api.CreateSandbox{})
			codes <- code
		}()
	}
	wg.Wait()
	close(codes)
	count := map[int]int{}
	for c := range codes {
		count[c]++
	}
	if count[201] != 3 || count[429] != 7 {
		t.Errorf("statuses of 10 creates under a quota of 3: %v", count)
	}
	var list api.SandboxList
	ts.must(t, 200, "GET", "/v1/sandboxes", key, nil, &list)
	if len(list.Sandboxes) != 3 {
		t.Errorf("%d sandboxes listed, want 3", len(list.Sandboxes))
	}
}
