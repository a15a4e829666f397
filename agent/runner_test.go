package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cove-sandbox/cove/agent"
	"github.com/cove-sandbox/cove/manifest"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/sandboxtest/fake"
)

// scripted is a Model that answers from a list of turns and records the
// requests it got. (The HTTP-level fake in agent/model/fake tests the
// wire; this one tests the loop.)
type scripted struct {
	mu    sync.Mutex
	turns []func(agent.ModelRequest) []agent.Item
	reqs  []agent.ModelRequest
}

func (m *scripted) Name() string { return "gpt-4o-mini" }

func (m *scripted) Respond(ctx context.Context, req agent.ModelRequest, delta func(string)) (*agent.ModelResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reqs = append(m.reqs, req)
	if len(m.turns) == 0 {
		return nil, errors.New("scripted model: out of turns")
	}
	t := m.turns[0]
	m.turns = m.turns[1:]
	out := t(req)
	for _, it := range out {
		if it.Type == agent.ItemMessage && delta != nil {
			delta(agent.Text(it.Content))
		}
	}
	return &agent.ModelResponse{Output: out, Usage: agent.Usage{Requests: 1, InputTokens: 100, OutputTokens: 10}}, nil
}

func say(text string) func(agent.ModelRequest) []agent.Item {
	return func(agent.ModelRequest) []agent.Item {
		return []agent.Item{{Type: agent.ItemMessage, Role: agent.RoleAssistant, Content: []agent.Content{{Type: agent.ContentText, Text: text}}}}
	}
}

func call(id, name, args string) func(agent.ModelRequest) []agent.Item {
	return func(agent.ModelRequest) []agent.Item {
		return []agent.Item{{Type: agent.ItemToolCall, CallID: id, Name: name, Arguments: args}}
	}
}

// lastOutput returns the text of the tool output for callID in req.
func lastOutput(req agent.ModelRequest, callID string) string {
	for _, it := range req.Input {
		if it.Type == agent.ItemToolOutput && it.CallID == callID {
			return agent.Text(it.Output)
		}
	}
	return "<none>"
}

func echoTool() agent.Tool {
	return agent.FunctionTool{
		Name: "echo", Description: "echoes its text",
		Parameters: map[string]any{"type": "object", "properties": map[string]any{"text": map[string]any{"type": "string"}}, "required": []string{"text"}},
		Fn: func(_ context.Context, args json.RawMessage) (string, error) {
			var a struct{ Text string }
			if err := json.Unmarshal(args, &a); err != nil {
				return "", fmt.Errorf("bad arguments: %v", err)
			}
			return "echo: " + a.Text, nil
		},
	}
}

func TestRunToolLoop(t *testing.T) {
	m := &scripted{turns: []func(agent.ModelRequest) []agent.Item{
		call("c1", "echo", `{"text":"hi"}`),
		call("c2", "nope", `{}`),
		call("c3", "echo", `{not json`),
		say("all done"),
	}}
	a := &agent.Agent{Name: "t", Instructions: "be brief", Model: m, Tools: []agent.Tool{echoTool()}}
	var events []agent.EventType
	res, err := (&agent.Runner{}).Run(context.Background(), a, "go", agent.RunConfig{OnEvent: func(e agent.Event) { events = append(events, e.Type) }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Output != "all done" {
		t.Errorf("output = %q, want %q", res.Output, "all done")
	}
	last := m.reqs[len(m.reqs)-1]
	if got := lastOutput(last, "c1"); got != "echo: hi" {
		t.Errorf("c1 output = %q", got)
	}
	if got := lastOutput(last, "c2"); !strings.Contains(got, `no tool named "nope"`) || !strings.Contains(got, "echo") {
		t.Errorf("unknown tool output = %q, want it to name the tool and list the tools", got)
	}
	if got := lastOutput(last, "c3"); !strings.HasPrefix(got, "error: bad arguments") {
		t.Errorf("malformed arguments output = %q, want an error for the model", got)
	}
	if last.Instructions != "be brief" {
		t.Errorf("instructions = %q", last.Instructions)
	}
	if want := (agent.Usage{Requests: 4, InputTokens: 400, OutputTokens: 40}); res.Usage != want {
		t.Errorf("usage = %+v, want %+v", res.Usage, want)
	}
	if !res.CostKnown || res.Cost <= 0 {
		t.Errorf("cost = %v (known %v), want a positive estimate for gpt-4o-mini", res.Cost, res.CostKnown)
	}
	if events[0] != agent.EventRunStarted || events[len(events)-1] != agent.EventRunFinished {
		t.Errorf("events start/end = %v ... %v", events[0], events[len(events)-1])
	}
	count := map[agent.EventType]int{}
	for _, e := range events {
		count[e]++
	}
	if count[agent.EventToolCallStarted] != 3 || count[agent.EventToolCallFinished] != 3 || count[agent.EventTurnStarted] != 4 {
		t.Errorf("event counts = %v", count)
	}
}

func TestRunMaxTurns(t *testing.T) {
	var turns []func(agent.ModelRequest) []agent.Item
	for i := range 5 {
		turns = append(turns, call(fmt.Sprint("c", i), "echo", `{"text":"x"}`))
	}
	a := &agent.Agent{Name: "loop", Model: &scripted{turns: turns}, Tools: []agent.Tool{echoTool()}}
	_, err := (&agent.Runner{}).Run(context.Background(), a, "go", agent.RunConfig{MaxTurns: 3})
	if !errors.Is(err, agent.ErrMaxTurns) {
		t.Fatalf("err = %v, want ErrMaxTurns", err)
	}
}

// fsCap is a minimal capability for the tests: a "write" tool that writes
// a file in the session.
type fsCap struct{}

func (fsCap) Name() string { return "testfs" }
func (fsCap) Bind(ctx context.Context, env agent.SandboxEnv) (agent.Binding, error) {
	return agent.Binding{
		Instructions: "workspace at " + env.Root,
		Tools: []agent.Tool{agent.FunctionTool{Name: "write", Fn: func(ctx context.Context, args json.RawMessage) (string, error) {
			var a struct{ Path, Text string }
			if err := json.Unmarshal(args, &a); err != nil {
				return "", err
			}
			if err := env.Session.WriteFile(ctx, a.Path, strings.NewReader(a.Text), 0o644); err != nil {
				return "", err
			}
			return "wrote " + a.Path, nil
		}}},
	}, nil
}

func readFile(t *testing.T, s sandbox.Session, p string) string {
	t.Helper()
	rc, err := s.ReadFile(context.Background(), p)
	if err != nil {
		t.Fatalf("reading %s: %v", p, err)
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	return string(b)
}

func TestApprovalInterruptAndResume(t *testing.T) {
	for _, tc := range []struct {
		name       string
		decide     func(*agent.RunState) error
		deleteSB   bool // the sandbox is gone when resuming
		wantOutput string
		wantFile   bool
	}{
		{name: "approved, sandbox alive", decide: func(s *agent.RunState) error { return s.Approve("w1") }, wantOutput: "wrote b.txt", wantFile: true},
		{name: "approved, sandbox recreated from snapshot", decide: func(s *agent.RunState) error { return s.Approve("w1") }, deleteSB: true, wantOutput: "wrote b.txt", wantFile: true},
		{name: "rejected", decide: func(s *agent.RunState) error { return s.Reject("w1", "not now") }, wantOutput: "The user rejected this tool call; it was not run. Reason: not now"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			rt := fake.New()
			m := &scripted{turns: []func(agent.ModelRequest) []agent.Item{
				call("w0", "write", `{"path":"a.txt","text":"first"}`),
				call("w1", "write", `{"path":"b.txt","text":"second"}`),
				say("finished"),
			}}
			man := &manifest.Manifest{Entries: map[string]manifest.Entry{"README.md": manifest.File{Content: []byte("hello")}}}
			a := &agent.Agent{Name: "ap", Model: m,
				Approval: func(_ context.Context, r agent.ApprovalRequest) (string, bool) {
					return "writes b", strings.Contains(r.Arguments, "b.txt")
				},
				Sandbox: &agent.SandboxAgent{DefaultManifest: man, Capabilities: []agent.Capability{fsCap{}}}}
			cfg := agent.RunConfig{Sandbox: &agent.SandboxRunConfig{Runtime: rt}}
			res, err := (&agent.Runner{}).Run(ctx, a, "write two files", cfg)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Interruptions) != 1 || res.Interruptions[0].CallID != "w1" || res.Interruptions[0].Reason != "writes b" {
				t.Fatalf("interruptions = %+v, want w1", res.Interruptions)
			}
			if !strings.Contains(m.reqs[0].Instructions, "workspace at /workspace") {
				t.Errorf("instructions = %q, want the capability's", m.reqs[0].Instructions)
			}
			data, err := json.Marshal(res.State)
			if err != nil {
				t.Fatal(err)
			}
			if tc.deleteSB {
				if err := rt.Delete(ctx, res.SandboxID); err != nil {
					t.Fatal(err)
				}
			}
			// A new runner, in what could be another process, from JSON.
			st, err := agent.ParseRunState(data)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := (&agent.Runner{}).Resume(ctx, a, st, cfg); !errors.Is(err, agent.ErrUndecided) {
				t.Fatalf("resume before deciding: err = %v, want ErrUndecided", err)
			}
			if err := tc.decide(st); err != nil {
				t.Fatal(err)
			}
			var kept sandbox.Session
			cfg.Sandbox.KeepSandbox = true
			cfg.Sandbox.OnFinish = func(ctx context.Context, s sandbox.Session) error { kept = s; return nil }
			res2, err := (&agent.Runner{}).Resume(ctx, a, st, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if res2.Output != "finished" {
				t.Errorf("output = %q", res2.Output)
			}
			if got := lastOutput(m.reqs[len(m.reqs)-1], "w1"); got != tc.wantOutput {
				t.Errorf("w1 output = %q, want %q", got, tc.wantOutput)
			}
			if got := readFile(t, kept, "a.txt") + "|" + readFile(t, kept, "README.md"); got != "first|hello" {
				t.Errorf("workspace = %q, want the manifest's file and the first write", got)
			}
			_, err = kept.Stat(ctx, "b.txt")
			if tc.wantFile != (err == nil) {
				t.Errorf("b.txt exists = %v, want %v", err == nil, tc.wantFile)
			}
			if tc.deleteSB == (kept.ID() == res.SandboxID) {
				t.Errorf("sandbox id after resume = %s (before %s); deleted=%v", kept.ID(), res.SandboxID, tc.deleteSB)
			}
		})
	}
}

func TestOwnedSandboxDeletedAtEnd(t *testing.T) {
	ctx := context.Background()
	rt := fake.New()
	a := &agent.Agent{Name: "x", Model: &scripted{turns: []func(agent.ModelRequest) []agent.Item{say("ok"), say("ok")}},
		Sandbox: &agent.SandboxAgent{Capabilities: []agent.Capability{fsCap{}}}}
	caller, err := rt.Create(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (&agent.Runner{}).Run(ctx, a, "hi", agent.RunConfig{Sandbox: &agent.SandboxRunConfig{Runtime: rt}}); err != nil {
		t.Fatal(err)
	}
	if _, err := (&agent.Runner{}).Run(ctx, a, "hi", agent.RunConfig{Sandbox: &agent.SandboxRunConfig{Session: caller}}); err != nil {
		t.Fatal(err)
	}
	infos, _ := rt.List(ctx)
	var ids []string
	for _, i := range infos {
		ids = append(ids, i.ID)
	}
	if diff := cmp.Diff([]string{caller.ID()}, ids); diff != "" {
		t.Errorf("sandboxes left (-want +got):\n%s", diff)
	}
}

func TestRunStateVersion(t *testing.T) {
	if _, err := agent.ParseRunState([]byte(`{"version":99}`)); !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "version 99") {
		t.Errorf("err = %v, want a schema version error", err)
	}
	if _, err := agent.ParseRunState([]byte(`{`)); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("err = %v, want ErrInvalid", err)
	}
}

func TestRestoreSnapshotOnStart(t *testing.T) {
	ctx := context.Background()
	rt := fake.New()
	src, _ := rt.Create(ctx, sandbox.Spec{})
	if err := src.WriteFile(ctx, "notes/todo.txt", strings.NewReader("from last time"), 0o644); err != nil {
		t.Fatal(err)
	}
	var snap bytes.Buffer
	if err := src.SnapshotWorkspace(ctx, &snap); err != nil {
		t.Fatal(err)
	}
	var got string
	a := &agent.Agent{Name: "x", Model: &scripted{turns: []func(agent.ModelRequest) []agent.Item{say("ok")}},
		Sandbox: &agent.SandboxAgent{Capabilities: []agent.Capability{fsCap{}},
			DefaultManifest: &manifest.Manifest{Entries: map[string]manifest.Entry{"manifest.txt": manifest.File{Content: []byte("m")}}}}}
	cfg := agent.RunConfig{Sandbox: &agent.SandboxRunConfig{Runtime: rt, Snapshot: snap.Bytes(), OnFinish: func(ctx context.Context, s sandbox.Session) error {
		got = readFile(t, s, "notes/todo.txt")
		if _, err := s.Stat(ctx, "manifest.txt"); err == nil {
			t.Error("the manifest was applied although a snapshot was given")
		}
		return nil
	}}}
	if _, err := (&agent.Runner{}).Run(ctx, a, "hi", cfg); err != nil {
		t.Fatal(err)
	}
	if got != "from last time" {
		t.Errorf("restored file = %q", got)
	}
}

func TestRunStreamed(t *testing.T) {
	a := &agent.Agent{Name: "s", Model: &scripted{turns: []func(agent.ModelRequest) []agent.Item{call("c1", "echo", `{"text":"x"}`), say("streamed answer")}},
		Tools: []agent.Tool{echoTool()}}
	s := (&agent.Runner{}).RunStreamed(context.Background(), a, "go", agent.RunConfig{})
	var types []agent.EventType
	var deltas string
	for e := range s.Events() {
		types = append(types, e.Type)
		if e.Type == agent.EventTextDelta {
			deltas += e.Text
		}
	}
	res, err := s.Wait()
	if err != nil {
		t.Fatal(err)
	}
	want := []agent.EventType{agent.EventRunStarted, agent.EventTurnStarted, agent.EventUsage, agent.EventToolCallStarted, agent.EventToolCallFinished,
		agent.EventTurnStarted, agent.EventTextDelta, agent.EventMessage, agent.EventUsage, agent.EventRunFinished}
	if diff := cmp.Diff(want, types); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if deltas != "streamed answer" || res.Output != "streamed answer" {
		t.Errorf("deltas %q, output %q", deltas, res.Output)
	}
}

func TestResultDecode(t *testing.T) {
	var v struct{ N int }
	if err := (&agent.Result{Output: "not json"}).Decode(&v); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("decoding prose: %v, want ErrInvalid", err)
	}
	if err := (&agent.Result{Output: `{"N":3}`}).Decode(&v); err != nil || v.N != 3 {
		t.Errorf("decoding JSON: %v %+v", err, v)
	}
	o := agent.OutputFor[struct {
		Name string `json:"name"`
		Tags []string
		skip int
	}]("x")
	if req := o.Schema["required"].([]string); len(req) != 2 || !o.Strict {
		t.Errorf("schema %v", o.Schema)
	}
}

// A server saves the state at each turn boundary; resuming from a saved
// checkpoint (after a crash) goes on with the conversation as it was, and
// a run that failed mid-turn continues after Abandon.
func TestCheckpointAndAbandon(t *testing.T) {
	m := &scripted{turns: []func(agent.ModelRequest) []agent.Item{
		call("c1", "echo", `{"text":"one"}`),
		// The model fails on its second turn (out of turns).
	}}
	a := &agent.Agent{Name: "t", Model: m, Tools: []agent.Tool{echoTool()}}
	var saved [][]byte
	cfg := agent.RunConfig{OnCheckpoint: func(st *agent.RunState) {
		if len(st.Pending) != 0 {
			t.Errorf("checkpoint with %d calls pending", len(st.Pending))
		}
		b, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		saved = append(saved, b)
	}}
	res, err := (&agent.Runner{}).Run(context.Background(), a, "go", cfg)
	if err == nil || res == nil {
		t.Fatalf("run = %v, %v; want the model's failure with a state", res, err)
	}
	if len(saved) != 2 {
		t.Fatalf("%d checkpoints, want 2 (before each model call)", len(saved))
	}
	st, err := agent.ParseRunState(saved[1])
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Items[len(st.Items)-1]; got.Type != agent.ItemToolOutput || agent.Text(got.Output) != "echo: one" {
		t.Errorf("last checkpoint ends with %+v, want c1's output", got)
	}
	m.turns = append(m.turns, say("recovered"))
	res, err = (&agent.Runner{}).Resume(context.Background(), a, st, agent.RunConfig{})
	if err != nil || res.Output != "recovered" {
		t.Fatalf("resume from checkpoint = %+v, %v", res, err)
	}

	// A state left with a pending call (cancelled while a tool ran) is
	// refused by Continue until Abandon answers the call.
	st = res.State
	st.Pending = []agent.Item{{Type: agent.ItemToolCall, CallID: "c9", Name: "echo", Arguments: `{"text":"x"}`}}
	if _, err := (&agent.Runner{}).Continue(context.Background(), a, st, "more", agent.RunConfig{}); !errors.Is(err, sandbox.ErrState) {
		t.Fatalf("continue with a pending call: err = %v, want ErrState", err)
	}
	st.Abandon("the run was cancelled")
	m.turns = append(m.turns, say("ok"))
	if res, err = (&agent.Runner{}).Continue(context.Background(), a, st, "more", agent.RunConfig{}); err != nil || res.Output != "ok" {
		t.Fatalf("continue after abandon = %+v, %v", res, err)
	}
	if got := lastOutput(m.reqs[len(m.reqs)-1], "c9"); !strings.Contains(got, "not run: the run was cancelled") {
		t.Errorf("abandoned call's output = %q", got)
	}
}

// TestNoCapabilities: a sandbox agent names its capabilities; none is an
// error that says how to give them, and no sandbox is created for it.
func TestNoCapabilities(t *testing.T) {
	ctx := context.Background()
	rt := fake.New()
	a := &agent.Agent{Name: "bare", Model: &scripted{turns: []func(agent.ModelRequest) []agent.Item{say("ok")}}, Sandbox: &agent.SandboxAgent{}}
	_, err := (&agent.Runner{}).Run(ctx, a, "hi", agent.RunConfig{Sandbox: &agent.SandboxRunConfig{Runtime: rt}})
	if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "SandboxAgent.Capabilities") {
		t.Errorf("err = %v, want ErrInvalid naming SandboxAgent.Capabilities", err)
	}
	if infos, _ := rt.List(ctx); len(infos) > 0 {
		t.Errorf("sandboxes left: %v", infos)
	}
	// An empty list is a choice: the agent gets no capability's tools.
	a.Sandbox.Capabilities = []agent.Capability{}
	if _, err := (&agent.Runner{}).Run(ctx, a, "hi", agent.RunConfig{Sandbox: &agent.SandboxRunConfig{Runtime: rt}}); err != nil {
		t.Errorf("run with an empty capability list: %v", err)
	}
}
