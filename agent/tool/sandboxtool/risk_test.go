package sandboxtool_test

import (
	"context"
	"testing"

	"github.com/cove-sandbox/cove/agent"
	"github.com/cove-sandbox/cove/agent/tool/sandboxtool"
)

func TestRiskyCommand(t *testing.T) {
	for _, tc := range []struct {
		cmd, workdir string
		risky        bool
	}{
		{"ls -la", "", false},
		{"python3 -m pytest -q", "", false},
		{"rm -rf build", "", true},
		{"rm -fr /", "", true},
		{"rm file.txt", "", false},
		{"apt-get install -y jq", "", true},
		{"pip install requests", "", true},
		{"git push origin main", "", true},
		{"git status", "", false},
		{"curl https://example.com", "", true},
		{"echo hi > /etc/motd", "", true},
		{"echo hi > /workspace/notes.txt", "", false},
		{"echo hi > out.txt", "", false},
		{"echo hi > /tmp/x", "", false},
		{"cp a.txt /usr/local/bin/", "", true},
		{"ls", "/etc", true},
		{"sudo id", "", true},
	} {
		_, got := sandboxtool.RiskyCommand(tc.cmd, tc.workdir, "/workspace")
		if got != tc.risky {
			t.Errorf("RiskyCommand(%q, %q) = %v, want %v", tc.cmd, tc.workdir, got, tc.risky)
		}
	}
}

// TestApproveRisky: under agent.ApproveRisky exec_command is judged by
// its command line and workdir, write_stdin by what it types (a shell
// started by exec_command must not run unjudged what the model types into
// it), and view_image never waits.
func TestApproveRisky(t *testing.T) {
	tools, _ := newFakeTools(t, sandboxtool.Options{})
	for _, tc := range []struct {
		tool       agent.Tool
		args       string
		wantReason string
		wantNeed   bool
	}{
		{tools.ExecCommand(), `{"cmd": "ls -la"}`, "", false},
		{tools.ExecCommand(), `{"cmd": "rm -rf build"}`, "deletes recursively", true},
		{tools.ExecCommand(), `{"cmd": "ls", "workdir": "/etc"}`, "runs outside the workspace (/etc)", true},
		{tools.ExecCommand(), `{"cmd": "echo hi > /etc/motd"}`, "writes outside the workspace (/etc/motd)", true},
		{tools.ExecCommand(), `not json`, "", false},
		{tools.ExecCommand(), `{"cmd": 5}`, "", false},
		{tools.WriteStdin(), `{"session_id": 1234, "chars": "rm -rf /\n"}`, "types into a running command what deletes recursively", true},
		{tools.WriteStdin(), `{"session_id": 1234, "chars": "q\n"}`, "", false},
		{tools.WriteStdin(), `{"session_id": 1234}`, "", false},
		{tools.ViewImage(), `{"path": "/etc/passwd"}`, "", false},
	} {
		name := tc.tool.Spec().Name
		reason, need := agent.ApproveRisky(context.Background(), agent.ApprovalRequest{Tool: name, Arguments: tc.args, Root: "/workspace", Handler: tc.tool})
		if reason != tc.wantReason || need != tc.wantNeed {
			t.Errorf("ApproveRisky(%s %s) = %q, %v; want %q, %v", name, tc.args, reason, need, tc.wantReason, tc.wantNeed)
		}
	}
}

// TestDescribe: exec_command is shown by its command line, write_stdin as
// a command's continuation, view_image by its name and arguments.
func TestDescribe(t *testing.T) {
	tools, _ := newFakeTools(t, sandboxtool.Options{})
	for _, tc := range []struct {
		tool agent.Tool
		args string
		want agent.CallView
	}{
		{tools.ExecCommand(), `{"cmd": "ls -la", "workdir": "src"}`, agent.CallView{Kind: agent.CallCommand, Command: "ls -la"}},
		{tools.ExecCommand(), `not json`, agent.CallView{Kind: agent.CallCommand}},
		{tools.WriteStdin(), `{"session_id": 1234}`, agent.CallView{Kind: agent.CallCommand}},
		{tools.ViewImage(), `{"path": "chart.png"}`, agent.CallView{}},
	} {
		d, ok := tc.tool.(agent.Describer)
		if !ok {
			t.Errorf("%s is not an agent.Describer", tc.tool.Spec().Name)
			continue
		}
		if got := d.Describe(tc.args); got != tc.want {
			t.Errorf("%s.Describe(%s) = %+v, want %+v", tc.tool.Spec().Name, tc.args, got, tc.want)
		}
	}
}

// TestJudgedAsRun: a call is judged and shown by the command the tool
// would run. JSON keys are matched exactly by the tool; a decoder that
// matched "CMD" to cmd as well would let a model show and get approved
// one command ("ls") while the tool ran another ("rm -rf ~").
func TestJudgedAsRun(t *testing.T) {
	tools, _ := newFakeTools(t, sandboxtool.Options{})
	exec := tools.ExecCommand()
	for _, args := range []string{
		`{"cmd": "rm -rf ~", "CMD": "ls"}`,
		`{"cmd": "rm -rf ~", "Cmd": "ls"}`,
	} {
		reason, need := agent.ApproveRisky(context.Background(), agent.ApprovalRequest{Tool: "exec_command", Arguments: args, Root: "/workspace", Handler: exec})
		if !need || reason != "deletes recursively" {
			t.Errorf("ApproveRisky(%s) = %q, %v; want the rm judged", args, reason, need)
		}
		if got := exec.(agent.Describer).Describe(args).Command; got != "rm -rf ~" {
			t.Errorf("Describe(%s).Command = %q, want the command the tool runs", args, got)
		}
	}
}
