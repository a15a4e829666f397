package server

import (
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/agent"
	"github.com/cove-sandbox/cove/agent/model/fake"
	"github.com/cove-sandbox/cove/api"
)

// TestRunUsageLiveAndAcrossRestart: a run's usage is on its record after
// each model call, while the run still works, and a server restarted in
// the middle of a command (before the next checkpoint) keeps the counts
// of the calls made before it.
func TestRunUsageLiveAndAcrossRestart(t *testing.T) {
	model := fake.NewServer(t,
		fake.Call("exec_command", `{"cmd":"sleep 60","yield_time_ms":30000}`).WithUsage(fake.Usage{InputTokens: 100, OutputTokens: 10}),
		fake.Text("done after the restart").WithUsage(fake.Usage{InputTokens: 200, OutputTokens: 20}),
	)
	prices := map[string]agent.Price{"test-model": {Input: 1, Output: 2}}
	ts := newTestServer(t, Config{Model: ModelConfig{BaseURL: model.URL, APIKey: "sk-server", DefaultModel: "test-model", Prices: prices}})
	key := ts.teamKey(t, "alpha")
	var run api.Run
	ts.must(t, 201, "POST", "/v1/runs", key, api.CreateRun{Input: "wait a minute", Agent: api.RunAgent{Approval: "never"}}, &run)
	if run.Agent.Model != "test-model" {
		t.Errorf("the run records model %q, want the server's default resolved (test-model)", run.Agent.Model)
	}
	// The first call's usage shows while its command still runs.
	deadline := time.Now().Add(time.Minute)
	for {
		ts.must(t, 200, "GET", "/v1/runs/"+run.ID, key, nil, &run)
		if run.Usage.Requests == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run's record never showed the first call's usage: %+v", run.Usage)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if run.Status != api.RunRunning || run.Usage.InputTokens != 100 || run.Usage.OutputTokens != 10 {
		t.Errorf("while the command runs: status %s usage %+v, want running with 100 in and 10 out", run.Status, run.Usage)
	}
	if want := (100*1.0 + 10*2.0) / 1e6; run.CostUSD == nil || *run.CostUSD != want {
		t.Errorf("while the command runs: cost %v, want %v", run.CostUSD, want)
	}
	ts2 := ts.restart(t)
	evs := ts2.readEvents(t, key, run.ID, 0, "")
	if lastStatus(evs) != api.RunIdle {
		t.Fatalf("after the restart: %+v", ofType(evs, "run_status"))
	}
	ts2.must(t, 200, "GET", "/v1/runs/"+run.ID, key, nil, &run)
	if run.Output != "done after the restart" {
		t.Errorf("output %q", run.Output)
	}
	// Both calls count: the one before the restart and the one after.
	if run.Usage.Requests != 2 || run.Usage.InputTokens != 300 || run.Usage.OutputTokens != 30 {
		t.Errorf("after the restart: usage %+v, want 2 requests, 300 in, 30 out", run.Usage)
	}
	if want := (300*1.0 + 30*2.0) / 1e6; run.CostUSD == nil || *run.CostUSD != want {
		t.Errorf("after the restart: cost %v, want %v", run.CostUSD, want)
	}
	// The log carries a usage event per call, with the model's name.
	usage := ofType(evs, string(agent.EventUsage))
	if len(usage) != 2 || usage[0].str("model") != "test-model" {
		t.Errorf("usage events %+v, want 2 naming test-model", usage)
	}
}

// TestModelInfo: GET /v1/model says which model a team's runs use, or
// that there is none and how to fix it, naming cove serve's settings and
// showing no key; a run started anyway fails with the same words.
func TestModelInfo(t *testing.T) {
	model := fake.NewServer(t)
	ts := newTestServer(t, Config{Model: ModelConfig{BaseURL: model.URL, APIKey: "sk-server-secret", DefaultModel: "test-model"}})
	key := ts.teamKey(t, "alpha")
	var info api.ModelInfo
	code, body := ts.call(t, "GET", "/v1/model", key, nil)
	if code != 200 || strings.Contains(string(body), "sk-server-secret") || strings.Contains(string(body), model.URL) {
		t.Fatalf("GET /v1/model: %d %s", code, body)
	}
	ts.must(t, 200, "GET", "/v1/model", key, nil, &info)
	if !info.Configured || info.Model != "test-model" || info.Key != "server" || info.Problem != "" {
		t.Errorf("with a model: %+v", info)
	}
	if code, _ := ts.call(t, "GET", "/v1/model", "", nil); code != 401 {
		t.Errorf("without a key: %d, want 401", code)
	}

	// OpenAI's API without a key anywhere: not configured.
	none := newTestServer(t, Config{Model: ModelConfig{BaseURL: "https://api.openai.com/v1"}})
	key = none.teamKey(t, "alpha")
	none.must(t, 200, "GET", "/v1/model", key, nil, &info)
	if info.Configured || info.Key != "none" || !strings.Contains(info.Problem, "--model-base-url") || len(info.Fix) < 3 {
		t.Errorf("without a key: %+v", info)
	}
	if strings.Contains(info.Problem, "--base-url") || strings.Contains(info.Problem, "export it") {
		t.Errorf("the problem names the CLI's settings: %q", info.Problem)
	}
	code, body = none.call(t, "POST", "/v1/runs", key, api.CreateRun{Input: "hi"})
	if code != 400 || !strings.Contains(string(body), "cove serve") || strings.Contains(string(body), "pass --base-url") {
		t.Errorf("a run without a model: %d %s; want a 400 naming cove serve's settings", code, body)
	}
	// A team secret is a key: runs can start.
	none.must(t, 200, "PUT", "/v1/secrets/OPENAI_API_KEY", key, api.SetSecret{Value: "sk-team"}, nil)
	none.must(t, 200, "GET", "/v1/model", key, nil, &info)
	if !info.Configured || info.Key != "team" || info.Model == "" {
		t.Errorf("with the team's secret: %+v", info)
	}
}

// TestRunFailureNamesServerSettings: a run at the server's own endpoint
// refused for its key says where the server's key is set, not a CLI flag.
func TestRunFailureNamesServerSettings(t *testing.T) {
	model := fake.NewServer(t, fake.Error(401, "bad key").Forever())
	ts := newTestServer(t, Config{Model: ModelConfig{BaseURL: model.URL, APIKey: "sk-wrong", DefaultModel: "test-model"}})
	key := ts.teamKey(t, "alpha")
	var run api.Run
	ts.must(t, 201, "POST", "/v1/runs", key, api.CreateRun{Input: "hi", Agent: api.RunAgent{Approval: "never"}}, &run)
	ts.readEvents(t, key, run.ID, 0, "")
	ts.must(t, 200, "GET", "/v1/runs/"+run.ID, key, nil, &run)
	if run.Status != api.RunFailed || !strings.Contains(run.Error, "cove serve's environment") || strings.Contains(run.Error, "--base-url") {
		t.Errorf("run %s: %q; want failed, naming OPENAI_API_KEY in cove serve's environment", run.Status, run.Error)
	}
}
