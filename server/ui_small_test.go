package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/agent/model/fake"
	"github.com/cove-sandbox/cove/api"
)

// TestUIBrowserSmall: the smaller points of a new user's first hour in
// the web UI: the sandbox page's age counts up while it is open, the
// create form offers the templates that exist, and Settings has the
// team's API keys (made with the secret shown once, listed, revoked).
func TestUIBrowserSmall(t *testing.T) {
	ts := newTestServer(t, Config{})
	key := ts.teamKey(t, "small")
	sb := ts.create(t, key, api.CreateSandbox{TTLSeconds: 3600})
	b := newBrowser(t, ts.URL)
	b.signIn(key)

	// The template field's list is the server's templates.
	b.open("#/sandboxes")
	b.wait("the template list", `[...document.querySelectorAll('#new-template-list option')].some((o) => o.value === 'host')`)
	if list := b.eval(`document.getElementById('new-template').getAttribute('list')`); list != "new-template-list" {
		t.Errorf("the template field is not tied to the list: list=%q", list)
	}

	// "Created N ago" on the sandbox page changes while it is open.
	b.open("#/sandboxes/" + sb.ID)
	b.wait("the age", `/ago$/.test(`+textOf("#created-age")+`)`)
	first := b.eval(textOf("#created-age"))
	b.wait("the age to change", textOf("#created-age")+` !== `+js(first))
	b.screenshot("age")

	// Settings: make a key; its secret is shown once and works.
	b.open("#/settings")
	b.wait("the keys table", `document.querySelectorAll('#keys tr').length >= 1`)
	b.fill("#key-name", "ci runner")
	b.click("#key-create")
	b.wait("the new secret", `(document.getElementById('key-secret')?.value || '').startsWith('cove_')`)
	secret := b.eval(`document.getElementById('key-secret').value`)
	b.screenshot("key-made")
	var keys struct{ Keys []api.Key }
	ts.must(t, 200, "GET", "/v1/keys", secret, nil, &keys)
	var made api.Key
	for _, k := range keys.Keys {
		if k.Name == "ci runner" {
			made = k
		}
	}
	if made.ID == "" || !strings.HasPrefix(secret, made.Prefix) || made.LastUsedAt == nil {
		t.Fatalf("the made key is not in the team's list, used: %+v", keys.Keys)
	}
	b.waitText(`#keys tr[data-id="`+made.ID+`"]`, made.Prefix)
	b.click("#key-done")
	b.wait("the secret hidden", `!document.getElementById('key-secret') && !document.body.innerText.includes(`+js(secret)+`)`)

	// Revoke it: the list says so, and the key no longer works.
	b.click(`#keys tr[data-id="` + made.ID + `"] button`)
	b.click(`#keys tr[data-id="` + made.ID + `"] button`) // confirm
	b.waitText(`#keys tr[data-id="`+made.ID+`"]`, "revoked")
	b.screenshot("key-revoked")
	if code, _ := ts.call(t, "GET", "/v1/sandboxes", secret, nil); code != http.StatusUnauthorized {
		t.Errorf("a revoked key: %d, want 401", code)
	}
	// The session's own key still works.
	ts.must(t, 200, "GET", "/v1/sandboxes", key, nil, nil)
}

// TestFavicon: /favicon.ico is served (browsers ask for it on every
// site; a 404 is noise in the console), and the page links it.
func TestFavicon(t *testing.T) {
	ts := newTestServer(t, Config{})
	resp, err := http.Get(ts.URL + "/favicon.ico")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "image/svg+xml" || !strings.Contains(string(body), "<svg") {
		t.Errorf("/favicon.ico: %d %q %.60s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	resp, err = http.Get(ts.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(page), `rel="icon"`) {
		t.Errorf("the page links no icon")
	}
}

// TestTemplatesList: GET /v1/templates lists the server's templates,
// "host" first, to any team, with names only: nothing of the host.
func TestTemplatesList(t *testing.T) {
	ts := newTestServer(t, Config{})
	key := ts.teamKey(t, "tmpl")
	code, data := ts.call(t, "GET", "/v1/templates", key, nil)
	if code != 200 {
		t.Fatalf("GET /v1/templates: %d %s", code, data)
	}
	var list api.TemplateList
	if err := json.Unmarshal(data, &list); err != nil || len(list.Templates) == 0 || list.Templates[0].Name != "host" {
		t.Fatalf("templates: %s (%v)", data, err)
	}
	if strings.Contains(string(data), "/") {
		t.Errorf("the list names a path: %s", data)
	}
	if code, _ := ts.call(t, "GET", "/v1/templates", "", nil); code != http.StatusUnauthorized {
		t.Errorf("without a key: %d, want 401", code)
	}
}

// TestKeysTenancy: a team's key lists only its team's keys and cannot
// revoke another team's (404, as if it did not exist), which keeps
// working.
func TestKeysTenancy(t *testing.T) {
	ts := newTestServer(t, Config{})
	keyA, keyB := ts.teamKey(t, "keys-a"), ts.teamKey(t, "keys-b")
	var a api.Key
	ts.must(t, http.StatusCreated, "POST", "/v1/keys", keyA, api.CreateKey{Name: "a second"}, &a)
	var listB struct{ Keys []api.Key }
	ts.must(t, 200, "GET", "/v1/keys", keyB, nil, &listB)
	for _, k := range listB.Keys {
		if k.Team != "keys-b" {
			t.Errorf("team B sees a key of team %s: %+v", k.Team, k)
		}
	}
	// all=true is an admin's; a team key gets its own team's only.
	ts.must(t, 200, "GET", "/v1/keys?all=true", keyB, nil, &listB)
	if slices.ContainsFunc(listB.Keys, func(k api.Key) bool { return k.Team != "keys-b" }) {
		t.Errorf("all=true with a team key shows other teams' keys: %+v", listB.Keys)
	}
	if code, data := ts.call(t, "DELETE", "/v1/keys/"+a.ID, keyB, nil); code != http.StatusNotFound {
		t.Errorf("team B revoking team A's key: %d %s, want 404", code, data)
	}
	ts.must(t, 200, "GET", "/v1/sandboxes", a.Secret, nil, nil)
	// Its own team may.
	ts.must(t, http.StatusNoContent, "DELETE", "/v1/keys/"+a.ID, keyA, nil, nil)
	if code, _ := ts.call(t, "GET", "/v1/sandboxes", a.Secret, nil); code != http.StatusUnauthorized {
		t.Errorf("revoked by its team: %d, want 401", code)
	}
}

// TestUsageCountsCPUUsed: CPU-seconds are the CPU a sandbox used, not
// its CPUs x the time: an idle sandbox counts far below its allocation,
// one that ran a busy loop (and was then stopped: its last CPU time is
// read before the stop) counts the loop, and a restarted server does
// not count again what the one before it recorded.
func TestUsageCountsCPUUsed(t *testing.T) {
	clock := newFakeClock()
	ts := newTestServer(t, Config{Now: clock.Now})
	key := ts.teamKey(t, "cpu")
	from := clock.Now().Add(-time.Hour)
	idle := ts.create(t, key, api.CreateSandbox{CPUs: 2, TTLSeconds: 86400})
	busy := ts.create(t, key, api.CreateSandbox{CPUs: 2, TTLSeconds: 86400})
	if out := ts.execAs(t, key, busy.ID, "", burn(1.5)); !strings.Contains(out, "done") {
		t.Fatalf("the busy loop: %q", out)
	}
	ts.must(t, 200, "POST", "/v1/sandboxes/"+busy.ID+"/stop", key, nil, nil)
	clock.Add(10 * time.Minute) // allocation would be 2 x 600 = 1200 CPU-seconds each

	byID := func() map[string]api.SandboxUsage {
		rep := ts.usageOver(t, key, from, clock.Now().Add(time.Hour))
		out := map[string]api.SandboxUsage{}
		for _, u := range rep.Sandboxes {
			out[u.SandboxID] = u
		}
		return out
	}
	var got map[string]api.SandboxUsage
	eventually(t, "both metered", func() bool {
		got = byID()
		return got[idle.ID].MemoryGiBSecs > 0 && got[busy.ID].DiskGiBHours > 0
	})
	if c := got[idle.ID].CPUSeconds; c > 60 {
		t.Errorf("an idle sandbox counts %.1f CPU-seconds over 10 minutes, want far below its 1200 allocated", c)
	}
	if c := got[busy.ID].CPUSeconds; c < 1.5 || c > 60 {
		t.Errorf("a sandbox that burnt 1.5 s of CPU counts %.2f CPU-seconds", c)
	}
	t.Logf("CPU-seconds: idle %.3f, busy %.3f", got[idle.ID].CPUSeconds, got[busy.ID].CPUSeconds)

	// The idle sandbox burns some CPU now; a restarted server records
	// it, and not again what was recorded before.
	if out := ts.execAs(t, key, idle.ID, "", burn(1)); !strings.Contains(out, "done") {
		t.Fatalf("the busy loop: %q", out)
	}
	clock.Add(2 * time.Minute)
	var mid map[string]api.SandboxUsage
	eventually(t, "the loop metered", func() bool {
		mid = byID()
		return mid[idle.ID].CPUSeconds >= got[idle.ID].CPUSeconds+1
	})
	ts = ts.restart(t)
	clock.Add(2 * time.Minute)
	eventually(t, "metered after the restart", func() bool {
		return byID()[idle.ID].MemoryGiBSecs > mid[idle.ID].MemoryGiBSecs
	})
	if after := byID()[idle.ID].CPUSeconds; after > mid[idle.ID].CPUSeconds+1 {
		t.Errorf("after a restart: %.2f CPU-seconds, was %.2f: what was recorded counted again", after, mid[idle.ID].CPUSeconds)
	}
}

// burn is a command that busy-loops until it has used secs of CPU time
// (not of wall time: a loaded machine gives it a smaller share), then
// says done.
func burn(secs float64) string {
	return fmt.Sprintf(`python3 -c 'import time
while time.process_time() < %g: pass
print("done")'`, secs)
}

// TestUsageShowsModels: the usage report and the Usage page show the
// agent runs' model tokens and cost, per team (another team's runs are
// not in it) and per day.
func TestUsageShowsModels(t *testing.T) {
	model := fake.NewServer(t,
		fake.Text("done").WithUsage(fake.Usage{InputTokens: 1200, OutputTokens: 34}),
		fake.Text("theirs").WithUsage(fake.Usage{InputTokens: 5000, OutputTokens: 500}))
	ts := newTestServer(t, Config{Model: ModelConfig{BaseURL: model.URL, APIKey: "sk-test", DefaultModel: "gpt-5.1"}, OutboundAllow: []string{"127.0.0.1"}})
	keyA, keyB := ts.teamKey(t, "models-a"), ts.teamKey(t, "models-b")
	for _, key := range []string{keyA, keyB} {
		var run api.Run
		ts.must(t, 201, "POST", "/v1/runs", key, api.CreateRun{Input: "go", Agent: api.RunAgent{Approval: "never"}}, &run)
		if evs := ts.readEvents(t, key, run.ID, 0, ""); lastStatus(evs) != api.RunIdle {
			t.Fatalf("run %s did not finish: %+v", run.ID, evs)
		}
	}
	var rep api.UsageReport
	ts.must(t, 200, "GET", "/v1/usage?by=day", keyA, nil, &rep)
	m := rep.Models
	if m == nil || m.Runs != 1 || m.Requests != 1 || m.InputTokens != 1200 || m.OutputTokens != 34 || m.CostUSD <= 0 {
		t.Fatalf("team A's model use: %+v", m)
	}
	today := time.Now().UTC().Format(time.DateOnly)
	for _, d := range rep.Days {
		if d.Models == nil {
			t.Fatalf("day %s has no model use: %+v", d.Date, d)
		}
		if d.Date == today && d.Models.InputTokens != 1200 || d.Date != today && d.Models.Runs != 0 {
			t.Errorf("day %s: %+v", d.Date, d.Models)
		}
	}

	b := newBrowser(t, ts.URL)
	b.signIn(keyA)
	b.open("#/usage")
	b.wait("the model totals", `/1[,. ]?200/.test(`+textOf("#usage-models")+`)`)
	b.waitText("#usage-models", "$")
	b.wait("the tokens chart", `document.querySelectorAll('#chart-tokens svg rect.bar').length === 14`)
	if txt := b.eval(textOf("#usage-models")); strings.Contains(txt, "5,000") || strings.Contains(txt, "5000") {
		t.Errorf("team A's page shows team B's tokens: %q", txt)
	}
	b.screenshot("usage-models")
}
