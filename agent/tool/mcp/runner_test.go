package mcp

import (
	"context"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/agent"
)

// scriptedModel calls one MCP tool, then answers with what it got back.
type scriptedModel struct {
	n    int
	seen string
}

func (m *scriptedModel) Name() string { return "scripted" }
func (m *scriptedModel) Respond(_ context.Context, req agent.ModelRequest, _ func(string)) (*agent.ModelResponse, error) {
	m.n++
	if m.n == 1 {
		return &agent.ModelResponse{Output: []agent.Item{{Type: agent.ItemToolCall, CallID: "m1", Name: "mcp__test__echo", Arguments: `{"text":"hello"}`}}}, nil
	}
	for _, it := range req.Input {
		if it.Type == agent.ItemToolOutput && it.CallID == "m1" {
			m.seen = agent.Text(it.Output)
		}
	}
	return &agent.ModelResponse{Output: []agent.Item{{Type: agent.ItemMessage, Role: agent.RoleAssistant, Content: []agent.Content{{Type: agent.ContentText, Text: "done"}}}}}, nil
}

// TestRunnerWithMCP: an agent's MCP server starts with the run, its tool
// is offered and routed, the risky-approval policy stops on it (it acts
// outside the sandbox), and the server is gone when the run ends.
func TestRunnerWithMCP(t *testing.T) {
	ctx := context.Background()
	src := NewSource(stdioServer("test"))
	m := &scriptedModel{}
	a := &agent.Agent{Name: "mcp", Model: m, ToolSources: []agent.ToolSource{src}, Approval: agent.ApproveRisky}
	res, err := (&agent.Runner{}).Run(ctx, a, "echo hello", agent.RunConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Interruptions) != 1 || res.Interruptions[0].Tool != "mcp__test__echo" {
		t.Fatalf("interruptions = %+v, want the MCP call to wait for approval", res.Interruptions)
	}
	if src.set != nil {
		t.Error("the MCP server is still connected after the run stopped")
	}
	if err := res.State.Approve("m1"); err != nil {
		t.Fatal(err)
	}
	res, err = (&agent.Runner{}).Resume(ctx, a, res.State, agent.RunConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Output != "done" || !strings.Contains(m.seen, "echo: hello") {
		t.Errorf("output %q, the model saw %q", res.Output, m.seen)
	}
}
