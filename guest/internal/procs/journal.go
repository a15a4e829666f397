package procs

import (
	"strconv"
	"strings"

	pb "github.com/cove-sandbox/cove/guest/gen/process"
	"github.com/cove-sandbox/cove/guest/internal/fsys"
	"github.com/cove-sandbox/cove/guest/internal/journal"
)

// The process lines of the daemon's journal (Config.Journal): what
// started, as whom and where, and how it ended. Environment variables
// are never logged: they carry the sandbox's secrets.

// commandLine is cfg's command and arguments as one line, built only as
// far as the journal keeps of a field (it cuts each to journal.MaxField):
// a command's arguments (a script for sh -c) may be megabytes, and this
// runs on every start and end.
func commandLine(cfg *pb.ProcessConfig) string {
	var b strings.Builder
	b.WriteString(cfg.GetCmd())
	for _, a := range cfg.GetArgs() {
		if b.Len() > journal.MaxField {
			break
		}
		b.WriteByte(' ')
		b.WriteString(a[:min(len(a), journal.MaxField+1)])
	}
	return b.String()
}

func (m *Manager) logStarted(p *proc, user *fsys.User) {
	if m.cfg.Journal == nil {
		return
	}
	kv := []string{"pid", strconv.Itoa(p.pid), "cmd", commandLine(p.config)}
	if p.tag != "" {
		kv = append(kv, "tag", p.tag)
	}
	if user != nil {
		kv = append(kv, "user", user.Name)
	}
	if cwd := p.config.GetCwd(); cwd != "" {
		kv = append(kv, "cwd", cwd)
	}
	m.cfg.Journal.Add("info", "process started", kv...)
}

func (m *Manager) logStartFailed(cfg *pb.ProcessConfig, err error) {
	if m.cfg.Journal == nil {
		return
	}
	m.cfg.Journal.Add("warn", "process failed to start", "cmd", commandLine(cfg), "error", err.Error())
}

func (m *Manager) logEnded(p *proc, end *pb.ProcessEvent_EndEvent) {
	if m.cfg.Journal == nil {
		return
	}
	level := "info"
	if !end.GetExited() || end.GetExitCode() != 0 {
		level = "warn"
	}
	m.cfg.Journal.Add(level, "process ended", "pid", strconv.Itoa(p.pid), "cmd", commandLine(p.config),
		"exit_code", strconv.Itoa(int(end.GetExitCode())), "status", end.GetStatus())
}
