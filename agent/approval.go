package agent

import (
	"context"
	"encoding/json"
	"path"
	"regexp"
	"strings"
)

// Approval is a tool call waiting for the caller's decision.
type Approval struct {
	CallID    string `json:"call_id"`
	Tool      string `json:"tool"`
	Arguments string `json:"arguments"`
	// Reason says why the policy asked ("installs packages").
	Reason string `json:"reason,omitempty"`
	// Decision is "" until the caller approves or rejects.
	Decision Decision `json:"decision,omitempty"`
	// Message is told to the model with a rejection.
	Message string `json:"message,omitempty"`
}

// Decision is the caller's answer to an approval.
type Decision string

const (
	Approved Decision = "approved"
	Rejected Decision = "rejected"
)

// ApprovalRequest is what an approval policy judges.
type ApprovalRequest struct {
	Tool      string
	Arguments string
	// Root is the sandbox workspace root ("" for agents without one).
	Root string
}

// ApprovalPolicy decides whether a tool call waits for the caller. It
// returns need=true with a short reason when it does. A nil policy
// approves everything.
type ApprovalPolicy func(ctx context.Context, req ApprovalRequest) (reason string, need bool)

// ApproveAll asks for every tool call.
func ApproveAll(context.Context, ApprovalRequest) (string, bool) {
	return "every tool call waits for your approval", true
}

// ApproveTools asks for calls of the named tools only.
func ApproveTools(names ...string) ApprovalPolicy {
	return func(_ context.Context, r ApprovalRequest) (string, bool) {
		for _, n := range names {
			if r.Tool == n {
				return "the tool " + n + " needs approval", true
			}
		}
		return "", false
	}
}

// ApproveRisky asks for calls that may do harm beyond the workspace or be
// hard to undo: commands that delete recursively, install packages, reach
// the network, push to a remote, escalate privileges or write outside the
// workspace root; and every tool that is not one of the sandbox's own
// (MCP tools and the caller's functions act outside the sandbox).
func ApproveRisky(_ context.Context, r ApprovalRequest) (string, bool) {
	switch r.Tool {
	case "exec_command":
		var args struct {
			Cmd     string `json:"cmd"`
			Workdir string `json:"workdir"`
		}
		if json.Unmarshal([]byte(r.Arguments), &args) != nil {
			return "", false // malformed: the tool rejects it anyway
		}
		return RiskyCommand(args.Cmd, args.Workdir, r.Root)
	case "write_stdin", "apply_patch", "view_image", "load_skill":
		// write_stdin feeds a command already judged; apply_patch is
		// confined to the workspace; the others only read.
		return "", false
	}
	return "the tool " + r.Tool + " acts outside the sandbox", true
}

var riskyCommands = []struct {
	re     *regexp.Regexp
	reason string
}{
	{regexp.MustCompile(`\brm\s+(-[a-zA-Z]*[rR][a-zA-Z]*\s+-?[a-zA-Z]*f|-[a-zA-Z]*f[a-zA-Z]*\s+-[a-zA-Z]*[rR]|-[a-zA-Z]*([rR][a-zA-Z]*f|f[a-zA-Z]*[rR])|--recursive|-[a-zA-Z]*[rR])`), "deletes recursively"},
	{regexp.MustCompile(`\b(apt|apt-get|aptitude|dpkg\s+-i|yum|dnf|apk\s+add|pip3?\s+install|python3?\s+-m\s+pip\s+install|npm\s+(i|install|ci)|yarn\s+add|pnpm\s+add|gem\s+install|cargo\s+install|go\s+install)\b`), "installs packages"},
	{regexp.MustCompile(`\bgit\s+(push|remote\s+add|fetch|pull|clone)\b`), "talks to a git remote"},
	{regexp.MustCompile(`\b(curl|wget|ssh|scp|sftp|rsync|nc|ncat|netcat|telnet|ftp)\b`), "uses the network"},
	{regexp.MustCompile(`\b(sudo|su|doas|chown|chmod\s+[-+=0-7a-z]*s)\b`), "changes privileges or ownership"},
	{regexp.MustCompile(`\b(mkfs|dd|shutdown|reboot|kill\s+-9\s+1\b|mount|umount)\b`), "touches the system"},
}

// absWrite finds redirections and common writers aimed at an absolute path.
var absWrite = regexp.MustCompile(`(?:>>?|\btee\s+(?:-a\s+)?|\b(?:cp|mv|install|ln)\s+(?:-\S+\s+)*\S+\s+)\s*(/[^\s;|&)]*)`)

// RiskyCommand is ApproveRisky's judgement of a shell command line run in
// workdir, in a workspace at root.
func RiskyCommand(cmd, workdir, root string) (string, bool) {
	for _, r := range riskyCommands {
		if r.re.MatchString(cmd) {
			return r.reason, true
		}
	}
	if root != "" {
		if workdir != "" && path.IsAbs(workdir) && !within(root, workdir) {
			return "runs outside the workspace (" + workdir + ")", true
		}
		for _, m := range absWrite.FindAllStringSubmatch(cmd, -1) {
			p := m[1]
			if p == "/dev/null" || strings.HasPrefix(p, "/tmp/") || p == "/tmp" || within(root, p) {
				continue
			}
			return "writes outside the workspace (" + p + ")", true
		}
	}
	return "", false
}

func within(root, p string) bool {
	p, root = path.Clean(p), path.Clean(root)
	return p == root || strings.HasPrefix(p, root+"/") || root == "/"
}
