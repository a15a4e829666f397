package agent_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cove-sandbox/cove/agent"
)

// shellTool is a tool that judges and describes its calls as a shell
// would: {"cmd": ...} is risky when it names "rm".
type shellTool struct{ agent.FunctionTool }

func newShellTool() shellTool {
	return shellTool{agent.FunctionTool{Name: "sh", Fn: func(_ context.Context, args json.RawMessage) (string, error) {
		return "ran " + string(args), nil
	}}}
}

func (shellTool) cmd(arguments string) string {
	var a struct{ Cmd string }
	_ = json.Unmarshal([]byte(arguments), &a)
	return a.Cmd
}

func (s shellTool) Risk(arguments, root string) (string, bool) {
	if strings.Contains(s.cmd(arguments), "rm") {
		return "deletes in " + root, true
	}
	return "", false
}

func (s shellTool) Describe(arguments string) agent.CallView {
	return agent.CallView{Kind: agent.CallCommand, Command: s.cmd(arguments)}
}

func TestApproveRisky(t *testing.T) {
	for _, tc := range []struct {
		name       string
		req        agent.ApprovalRequest
		wantReason string
		wantNeed   bool
	}{
		{"the tool judges: safe", agent.ApprovalRequest{Tool: "sh", Arguments: `{"cmd":"ls"}`, Root: "/w", Handler: newShellTool()}, "", false},
		{"the tool judges: risky", agent.ApprovalRequest{Tool: "sh", Arguments: `{"cmd":"rm x"}`, Root: "/w", Handler: newShellTool()}, "deletes in /w", true},
		{"a tool that does not judge", agent.ApprovalRequest{Tool: "echo", Arguments: `{}`, Handler: echoTool()}, "the tool echo acts outside the sandbox", true},
		{"no such tool", agent.ApprovalRequest{Tool: "nope", Arguments: `{}`}, "the tool nope acts outside the sandbox", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reason, need := agent.ApproveRisky(context.Background(), tc.req)
			if reason != tc.wantReason || need != tc.wantNeed {
				t.Errorf("ApproveRisky = %q, %v; want %q, %v", reason, need, tc.wantReason, tc.wantNeed)
			}
		})
	}
}

// TestRunCallView: the Runner asks the policy with the tool called, and
// puts the tool's view of each call in tool_call_started, in
// approval_requested and in the Approval it saves.
func TestRunCallView(t *testing.T) {
	m := &scripted{turns: []func(agent.ModelRequest) []agent.Item{
		call("c1", "sh", `{"cmd":"ls"}`),
		call("c2", "sh", `{"cmd":"rm -r x"}`),
	}}
	a := &agent.Agent{Name: "v", Model: m, Tools: []agent.Tool{newShellTool(), echoTool()}, Approval: agent.ApproveRisky}
	var started, asked []agent.Event
	res, err := (&agent.Runner{}).Run(context.Background(), a, "go", agent.RunConfig{OnEvent: func(e agent.Event) {
		switch e.Type {
		case agent.EventToolCallStarted:
			started = append(started, e)
		case agent.EventApprovalRequested:
			asked = append(asked, e)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	lsView := agent.CallView{Kind: agent.CallCommand, Command: "ls"}
	if len(started) != 1 || started[0].CallView != lsView {
		t.Errorf("tool_call_started events = %+v, want c1 with %+v", started, lsView)
	}
	rmView := agent.CallView{Kind: agent.CallCommand, Command: "rm -r x"}
	want := []agent.Approval{{CallID: "c2", Tool: "sh", Arguments: `{"cmd":"rm -r x"}`, CallView: rmView, Reason: "deletes in "}}
	if diff := cmp.Diff(want, res.Interruptions); diff != "" {
		t.Errorf("interruptions (-want +got):\n%s", diff)
	}
	if len(asked) != 1 || asked[0].CallView != rmView || asked[0].Approval == nil || asked[0].Approval.CallView != rmView {
		t.Errorf("approval_requested events = %+v, want c2 with %+v", asked, rmView)
	}
	// The view is part of the saved state, and of the JSON events.
	b, err := json.Marshal(asked[0])
	if err != nil {
		t.Fatal(err)
	}
	if s := string(b); !strings.Contains(s, `"call_kind":"command","command":"rm -r x"`) {
		t.Errorf("approval_requested as JSON = %s, want the call_kind and command", s)
	}
	data, _ := json.Marshal(res.State)
	st, err := agent.ParseRunState(data)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Approvals[0].CallView; got != rmView {
		t.Errorf("saved approval's view = %+v, want %+v", got, rmView)
	}
}
