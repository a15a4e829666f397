package sandboxtool

// How the tools judge their calls for agent.ApproveRisky. exec_command
// is judged by its command line; write_stdin by what it types, since the
// command it feeds may be a shell or an interpreter (exec_command "bash",
// then write_stdin "rm -rf ~"); view_image only reads.

import (
	"path"
	"regexp"
	"strings"
	"sync"
)

// Risk implements agent.RiskAssessor: an exec_command call is judged by
// its command line and workdir (RiskyCommand), read by the parser the
// call itself uses, so what is judged is what would run (a lenient
// decoder would take "CMD" for "cmd"). Arguments the tool rejects are
// not risky.
func (execTool) Risk(arguments, root string) (string, bool) {
	a, err := parseExecArgs(arguments)
	if err != nil {
		return "", false
	}
	return RiskyCommand(a.cmd, a.workdir, root)
}

// Risk implements agent.RiskAssessor: view_image is never risky.
func (tool) Risk(arguments, root string) (string, bool) { return "", false }

// stdinTool is write_stdin; it has its own type to judge what it types.
type stdinTool struct{ tool }

// Risk implements agent.RiskAssessor: the characters write_stdin sends
// are judged as a command line would be (RiskyCommand, with no workdir:
// where the receiving process runs is not known here), read by the
// parser the call itself uses. Arguments the tool rejects are not risky.
func (stdinTool) Risk(arguments, root string) (string, bool) {
	a, err := parseStdinArgs(arguments)
	if err != nil || a.chars == "" {
		return "", false
	}
	if reason, risky := RiskyCommand(a.chars, "", root); risky {
		return "types into a running command what " + reason, true
	}
	return "", false
}

// riskyCommands are the patterns of command lines that wait for approval
// under agent.ApproveRisky, with the reason the user is shown, compiled on
// first use (not at every start of cove).
var riskyCommands = sync.OnceValue(func() []riskyCommand {
	return []riskyCommand{
		{regexp.MustCompile(`\brm\s+(-[a-zA-Z]*[rR][a-zA-Z]*\s+-?[a-zA-Z]*f|-[a-zA-Z]*f[a-zA-Z]*\s+-[a-zA-Z]*[rR]|-[a-zA-Z]*([rR][a-zA-Z]*f|f[a-zA-Z]*[rR])|--recursive|-[a-zA-Z]*[rR])`), "deletes recursively"},
		{regexp.MustCompile(`\b(apt|apt-get|aptitude|dpkg\s+-i|yum|dnf|apk\s+add|pip3?\s+install|python3?\s+-m\s+pip\s+install|npm\s+(i|install|ci)|yarn\s+add|pnpm\s+add|gem\s+install|cargo\s+install|go\s+install)\b`), "installs packages"},
		{regexp.MustCompile(`\bgit\s+(push|remote\s+add|fetch|pull|clone)\b`), "talks to a git remote"},
		{regexp.MustCompile(`\b(curl|wget|ssh|scp|sftp|rsync|nc|ncat|netcat|telnet|ftp)\b`), "uses the network"},
		{regexp.MustCompile(`\b(sudo|su|doas|chown|chmod\s+[-+=0-7a-z]*s)\b`), "changes privileges or ownership"},
		{regexp.MustCompile(`\b(mkfs|dd|shutdown|reboot|kill\s+-9\s+1\b|mount|umount)\b`), "touches the system"},
	}
})

type riskyCommand struct {
	re     *regexp.Regexp
	reason string
}

// absWrite finds redirections and common writers aimed at an absolute path.
var absWrite = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(?:>>?|\btee\s+(?:-a\s+)?|\b(?:cp|mv|install|ln)\s+(?:-\S+\s+)*\S+\s+)\s*(/[^\s;|&)]*)`)
})

// RiskyCommand is exec_command's judgement of a shell command line run in
// workdir, in a workspace at root ("" when unknown), for
// agent.ApproveRisky: the commands that delete recursively, install
// packages, reach the network or a git remote, change privileges or touch
// the system, and, with a root, those run or writing outside the workspace
// (/tmp and /dev/null excepted). It returns the reason when the command is
// risky.
func RiskyCommand(cmd, workdir, root string) (string, bool) {
	for _, r := range riskyCommands() {
		if r.re.MatchString(cmd) {
			return r.reason, true
		}
	}
	if root != "" {
		if workdir != "" && path.IsAbs(workdir) && !within(root, workdir) {
			return "runs outside the workspace (" + workdir + ")", true
		}
		for _, m := range absWrite().FindAllStringSubmatch(cmd, -1) {
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
