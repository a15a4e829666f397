package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/agent/model/fake"
	"github.com/cove-sandbox/cove/api"
)

// TestTenancyEveryRoute tries every documented route with one team's key
// on another team's sandbox, snapshot, port, run and secret: each answers 404 and
// nothing of the other team shows, and nothing of it changes.
func TestTenancyEveryRoute(t *testing.T) {
	model := fake.NewServer(t, fake.Text("done"))
	ts := newTestServer(t, Config{Model: ModelConfig{BaseURL: model.URL, DefaultModel: "m"}})
	keyA, keyB := ts.teamKey(t, "team-a"), ts.teamKey(t, "team-b")
	var runA api.Run
	ts.must(t, 201, "POST", "/v1/runs", keyA, api.CreateRun{Input: "hello"}, &runA)
	ts.readEvents(t, keyA, runA.ID, 0, "")
	ts.must(t, 200, "PUT", "/v1/secrets/OPENAI_API_KEY", keyA, api.SetSecret{Value: "sk-team-a"}, nil)
	sbA := ts.create(t, keyA, api.CreateSandbox{Labels: map[string]string{"owner": "a"}})
	ts.must(t, 204, "PUT", "/v1/sandboxes/"+sbA.ID+"/files?path=secret.txt", keyA, "a's secret", nil)
	var snapA api.Snapshot
	ts.must(t, 201, "POST", "/v1/sandboxes/"+sbA.ID+"/snapshots", keyA, nil, &snapA)
	var portA api.Port
	ts.must(t, 201, "POST", "/v1/sandboxes/"+sbA.ID+"/ports/8000", keyA, nil, &portA)
	ts.teamKey(t, "team-b") // B has a sandbox too, so its lists are not trivially empty
	ts.create(t, keyB, api.CreateSandbox{})

	fill := strings.NewReplacer("{team}", "team-a", "{id}", sbA.ID, "{sid}", snapA.ID, "{port}", "8000", "{pid}", "1", "{tag}", "web", "{rest...}", "")
	for _, d := range routeDocs {
		method, path, ok := strings.Cut(d.Pattern, " ")
		if !ok {
			method, path = "GET", d.Pattern
		}
		if strings.HasSuffix(path, "/") && strings.Contains(path, "/guest/") {
			path += "health"
		}
		if strings.HasPrefix(path, "/v1/runs/") {
			path = strings.Replace(path, "{id}", runA.ID, 1)
		}
		path = strings.Replace(path, "{name}", "OPENAI_API_KEY", 1)
		path = fill.Replace(path)
		var body any
		switch {
		case strings.HasSuffix(path, "/ttl"):
			body = api.SetTTL{TTLSeconds: 60}
		case strings.HasSuffix(path, "/exec"):
			body = api.Exec{Cmd: "true"}
		case strings.HasSuffix(path, "/move"):
			body = api.Move{From: "secret.txt", To: "stolen.txt"}
		case strings.HasSuffix(path, "/signal"):
			body = api.Signal{Signal: "KILL"}
		case strings.HasSuffix(path, "/restore") || strings.HasSuffix(path, "/fork") || strings.Contains(path, "/ports/"):
			body = "{}"
		case method == "POST" || method == "PUT":
			body = "x"
		}
		if strings.Contains(path, "/files") && !strings.Contains(path, "/move") {
			path += "?path=secret.txt"
		}
		switch {
		case d.Public:
			continue // no key: /health, /metrics, /openapi.json, the port proxy (token-checked)
		case !strings.Contains(d.Pattern, "{"):
			// Lists: B's answers never name A's things.
			if method != "GET" {
				continue
			}
			code, data := ts.call(t, method, path, keyB, nil)
			if code != 200 {
				t.Errorf("%s %s as team B: %d %s", method, path, code, data)
			}
			for _, secret := range []string{sbA.ID, snapA.ID, portA.Token, "team-a"} {
				if strings.Contains(string(data), secret) {
					t.Errorf("%s %s as team B shows team A's %q: %s", method, path, secret, data)
				}
			}
		case strings.HasPrefix(d.Pattern, "DELETE /v1/keys/"):
			// A's key id is not B's to revoke (checked below).
			continue
		case strings.HasPrefix(d.Pattern, "PUT /v1/secrets/"):
			// Sets B's own secret of that name; A's is checked below.
			continue
		case strings.HasPrefix(d.Pattern, "PUT /v1/teams/"):
			// Admin only: 403 for any team key, tested in TestQuota.
			if code, _ := ts.call(t, method, path, keyB, api.Quota{}); code != http.StatusForbidden {
				t.Errorf("%s %s with team B's key: %d, want 403", method, path, code)
			}
		default:
			code, data := ts.call(t, method, path, keyB, body)
			if code != http.StatusNotFound {
				t.Errorf("%s %s with team B's key: %d %s, want 404", method, path, code, data)
			}
		}
	}
	// A's things are untouched.
	var secs api.SecretList
	ts.must(t, 200, "GET", "/v1/secrets", keyA, nil, &secs)
	if len(secs.Secrets) != 1 {
		t.Errorf("A's secrets after B's attempts: %+v", secs)
	}
	if v, err := ts.runs.Secret(context.Background(), "team-a", "OPENAI_API_KEY"); err != nil || v != "sk-team-a" {
		t.Errorf("A's secret after B's attempts: %q %v", v, err)
	}
	ts.must(t, 200, "GET", "/v1/runs/"+runA.ID, keyA, nil, &runA)
	if runA.Status != api.RunIdle || runA.Messages != 1 {
		t.Errorf("A's run after B's attempts: %+v", runA)
	}
	var got api.Sandbox
	ts.must(t, 200, "GET", "/v1/sandboxes/"+sbA.ID, keyA, nil, &got)
	if got.State != "running" {
		t.Errorf("A's sandbox after B's attempts: %+v", got)
	}
	if code, data := ts.call(t, "GET", "/v1/sandboxes/"+sbA.ID+"/files?path=secret.txt", keyA, nil); code != 200 || string(data) != "a's secret" {
		t.Errorf("A's file after B's attempts: %d %q", code, data)
	}
	ts.must(t, 200, "GET", "/v1/snapshots/"+snapA.ID, keyA, nil, nil)
	var ports struct{ Ports []api.Port }
	ts.must(t, 200, "GET", "/v1/sandboxes/"+sbA.ID+"/ports", keyA, nil, &ports)
	if len(ports.Ports) != 1 {
		t.Errorf("A's ports after B's attempts: %+v", ports)
	}
	// B cannot revoke A's key either.
	var keys struct{ Keys []api.Key }
	ts.must(t, 200, "GET", "/v1/keys", keyA, nil, &keys)
	if code, _ := ts.call(t, "DELETE", "/v1/keys/"+keys.Keys[0].ID, keyB, nil); code != http.StatusNotFound {
		t.Errorf("B revoking A's key: %d, want 404", code)
	}
	ts.must(t, 200, "GET", "/v1/sandboxes", keyA, nil, nil)
}

// TestTenancyE2B tries every route of the E2B control plane with one
// team's key on another team's sandbox: each answers 404 and the sandbox
// is untouched. Envd takes no API key, only the sandbox's own envd
// access token: another sandbox's token (B's) is refused on A's.
func TestTenancyE2B(t *testing.T) {
	ts := newTestServer(t, Config{})
	keyA, keyB := ts.e2bKey(t, "e2b-team-a"), ts.e2bKey(t, "e2b-team-b")
	create := func(key string) e2bSandbox {
		t.Helper()
		var sb e2bSandbox
		resp, data := ts.e2bCall(t, "POST", "/v2/sandboxes", key, map[string]any{"templateID": "base", "timeout": 600, "metadata": map[string]string{"owner": key[:8]}}, nil)
		if resp.StatusCode != 201 || json.Unmarshal(data, &sb) != nil {
			t.Fatalf("create: %d %s", resp.StatusCode, data)
		}
		return sb
	}
	sbA, sbB := create(keyA), create(keyB)
	for _, tc := range []struct {
		method, path string
		body         any
	}{
		{"GET", "/sandboxes/{id}", nil},
		{"GET", "/sandboxes/{id}/metrics", nil},
		{"GET", "/sandboxes/{id}/logs", nil},
		{"GET", "/v2/sandboxes/{id}/logs", nil},
		{"POST", "/sandboxes/{id}/timeout", map[string]any{"timeout": 1}},
		{"POST", "/sandboxes/{id}/refreshes", map[string]any{"duration": 1}},
		{"POST", "/sandboxes/{id}/connect", map[string]any{"timeout": 1}},
		{"POST", "/v2/sandboxes/{id}/connect", map[string]any{"timeout": 1}},
		{"POST", "/sandboxes/{id}/pause", nil},
		{"DELETE", "/sandboxes/{id}", nil},
	} {
		path := strings.Replace(tc.path, "{id}", sbA.SandboxID, 1)
		resp, data := ts.e2bCall(t, tc.method, path, keyB, tc.body, nil)
		if resp.StatusCode != http.StatusNotFound || strings.Contains(string(data), sbA.EnvdAccessToken) {
			t.Errorf("%s %s with team B's key: %d %s, want 404", tc.method, path, resp.StatusCode, data)
		}
	}
	for _, path := range []string{"/sandboxes", "/v2/sandboxes", "/v2/sandboxes?state=running,paused"} {
		resp, data := ts.e2bCall(t, "GET", path, keyB, nil, nil)
		if resp.StatusCode != 200 || strings.Contains(string(data), sbA.SandboxID) || !strings.Contains(string(data), sbB.SandboxID) {
			t.Errorf("GET %s as team B: %d %s, want B's sandbox only", path, resp.StatusCode, data)
		}
	}
	// B's envd token on A's sandbox, by header.
	resp, data := ts.e2bCall(t, "GET", "/files?path=/etc/hostname", "", nil, map[string]string{
		"E2b-Sandbox-Id": sbA.SandboxID, "E2b-Sandbox-Port": "49983", "X-Access-Token": sbB.EnvdAccessToken})
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("B's envd token on A's sandbox: %d %s, want 401", resp.StatusCode, data)
	}
	// A's sandbox is as it was: running, with its timeout.
	var d e2bDetail
	resp, data = ts.e2bCall(t, "GET", "/sandboxes/"+sbA.SandboxID, keyA, nil, nil)
	if resp.StatusCode != 200 || json.Unmarshal(data, &d) != nil || d.State != "running" || time.Until(d.EndAt) < 5*time.Minute {
		t.Errorf("A's sandbox after B's attempts: %d %s", resp.StatusCode, data)
	}
}
