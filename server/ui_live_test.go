package server

import (
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/agent/model/fake"
	"github.com/cove-sandbox/cove/api"
)

// TestUIBrowserLiveHeader: the run page's header counts tokens, requests
// and cost after each model call while the run still works (a command
// between two calls waits for the test), the elapsed time ticks, and the
// model shown is the one used (the server's default, by name).
func TestUIBrowserLiveHeader(t *testing.T) {
	model := fake.NewServer(t,
		fake.Call("exec_command", `{"cmd":"while [ ! -e /workspace/go ]; do sleep 0.1; done; echo released","yield_time_ms":30000}`).
			WithUsage(fake.Usage{InputTokens: 1500, OutputTokens: 15}),
		fake.Text("All done.").WithUsage(fake.Usage{InputTokens: 2500, OutputTokens: 25}),
	)
	ts := newTestServer(t, Config{Model: ModelConfig{BaseURL: model.URL, APIKey: "sk-test", DefaultModel: "gpt-5.1"}})
	key := ts.teamKey(t, "live")
	sb := ts.create(t, key, api.CreateSandbox{})
	b := newBrowser(t, ts.URL)
	b.signIn(key)

	b.open("#/chat?sandbox=" + sb.ID)
	b.wait("the workspace picked", `document.querySelector('#workspace').value === `+js(sb.ID))
	b.wait("the server's model as the placeholder", `document.querySelector('#model').placeholder.includes('gpt-5.1')`)
	if b.eval(`!!document.querySelector('#no-model')`) != "false" {
		t.Error("the no-model notice shows on a server with a model")
	}
	b.fill("#task", "Wait for the go file.")
	b.setValue("#approval", "never")
	b.click("#start-run")
	b.wait("the run's page", `location.hash.startsWith('#/runs/') && !!document.querySelector('#run-meta')`)

	// After the first call, while its command waits: the header has it.
	b.waitText("#run-tokens", "1 request")
	b.waitText("#run-tokens", thousands(1500)+" in")
	b.waitText("#run-status", "running")
	b.wait("a cost", `/\$\d/.test(`+textOf("#run-cost")+`)`)
	if got := b.eval(textOf("#run-model")); got != "gpt-5.1" {
		t.Errorf("model shown %q, want gpt-5.1", got)
	}
	// The elapsed time ticks while the run works.
	first := b.eval(textOf("#run-elapsed"))
	b.wait("the elapsed time to tick", textOf("#run-elapsed")+` !== `+js(first))
	b.screenshot("live-header")
	if got := b.eval(textOf("#run-status")); got != "running" {
		t.Fatalf("the run is %s before the command was released", got)
	}

	ts.must(t, 204, "PUT", "/v1/sandboxes/"+sb.ID+"/files?path=go", key, "", nil)
	b.waitText("#timeline .event.final .answer", "All done.")
	b.waitText("#run-status", "idle")
	b.waitText("#run-tokens", "2 requests")
	b.waitText("#run-tokens", thousands(4000)+" in")
	// Stopped, the elapsed time stays put.
	stopped := b.eval(textOf("#run-elapsed"))
	if b.eval(`document.body.textContent.includes('server default')`) != "false" {
		t.Error(`the page says "server default" instead of the model`)
	}
	b.waitText("#run-model", "gpt-5.1")
	if got := b.eval(textOf("#run-elapsed")); got != stopped {
		t.Errorf("elapsed went from %q to %q after the run stopped", stopped, got)
	}
}

// TestUIBrowserNoModel: on a server without a model (OpenAI's API, no
// key anywhere), the chat page says so before Start, with the ways to fix
// it on this server; settings remembered from the last run are shown,
// and can be dropped.
func TestUIBrowserNoModel(t *testing.T) {
	ts := newTestServer(t, Config{Model: ModelConfig{BaseURL: "https://api.openai.com/v1"}})
	key := ts.teamKey(t, "nomodel")
	b := newBrowser(t, ts.URL)
	b.signIn(key)
	b.open("#/chat")
	b.waitText("#no-model", "No model is configured")
	text := b.eval(textOf("#no-model"))
	for _, want := range []string{"OPENAI_API_KEY", "cove serve --model-base-url", "Settings page"} {
		if !strings.Contains(text, want) {
			t.Errorf("the notice lacks %q: %s", want, text)
		}
	}
	if strings.Contains(text, "pass --base-url") || strings.Contains(text, "export it") {
		t.Errorf("the notice names the CLI's settings: %s", text)
	}
	if b.eval(`!!document.querySelector('#no-model a[href="#/settings"]')`) != "true" {
		t.Error("no link to the Settings page")
	}
	if b.eval(`document.querySelector('#saved-settings').hidden`) != "true" {
		t.Error("a remembered-settings line shows with nothing remembered")
	}
	b.screenshot("no-model")

	// Settings remembered from an earlier run show, visibly.
	b.eval(`localStorage.setItem('cove.agentSettings', JSON.stringify({model: 'my-model', api_key_secret: 'MY_KEY', approval: 'all'}))`)
	b.open("#/sandboxes")
	b.open("#/chat")
	b.wait("the remembered settings", `!document.querySelector('#saved-settings').hidden`)
	line := b.eval(textOf("#saved-settings"))
	for _, want := range []string{"Using your last settings", "my-model", "MY_KEY", "every call"} {
		if !strings.Contains(line, want) {
			t.Errorf("the remembered settings line lacks %q: %s", want, line)
		}
	}
	b.click("#saved-settings-change")
	b.wait("the settings opened", `document.querySelector('details.settings').open`)
	b.click("#saved-settings-reset")
	b.wait("the line gone", `document.querySelector('#saved-settings').hidden`)
	if got := b.eval(`[document.querySelector('#model').value, document.querySelector('#key-secret').value, document.querySelector('#approval').value, String(localStorage.getItem('cove.agentSettings'))].join('|')`); got != "||risky|null" {
		t.Errorf("after the reset: %q, want empty fields, risky and nothing stored", got)
	}
}
