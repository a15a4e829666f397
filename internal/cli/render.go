package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cove-sandbox/cove/agent"
)

// renderer shows a run's events: step by step for a person, or one JSON
// object per line for programs (--json).
type renderer struct {
	mu      sync.Mutex
	w       io.Writer
	json    bool
	inText  bool // a streamed message is being printed
	lineEnd bool // the last byte printed ended a line
	// started are the calls that ran (a rejected one never starts), with
	// their tools' views of them, and calls the one-line summaries of
	// those that waited for approval, to show what a rejection stopped.
	started map[string]agent.CallView
	calls   map[string]string
}

func newRenderer(w io.Writer, jsonOut bool) *renderer {
	return &renderer{w: w, json: jsonOut, lineEnd: true, started: map[string]agent.CallView{}, calls: map[string]string{}}
}

// remember takes note of the calls a saved run waited for, so that a
// resume in another process can name what was rejected.
func (r *renderer) remember(aps []agent.Approval) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ap := range aps {
		r.calls[ap.CallID] = summarizeCall(ap.Tool, ap.Arguments, ap.CallView)
	}
}

// note prints a line of the CLI's own (not an agent event).
func (r *renderer) note(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.json {
		b, _ := json.Marshal(map[string]any{"type": "note", "time": time.Now(), "text": fmt.Sprintf(format, args...)})
		fmt.Fprintf(r.w, "%s\n", b)
		return
	}
	r.newline()
	fmt.Fprintf(r.w, "· "+format+"\n", args...)
}

func (r *renderer) print(s string) {
	if s == "" {
		return
	}
	io.WriteString(r.w, s)
	r.lineEnd = strings.HasSuffix(s, "\n")
}

func (r *renderer) newline() {
	if !r.lineEnd {
		io.WriteString(r.w, "\n")
		r.lineEnd = true
	}
}

func (r *renderer) event(e agent.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.json {
		b, err := json.Marshal(e)
		if err == nil {
			fmt.Fprintf(r.w, "%s\n", b)
		}
		return
	}
	if e.Type == agent.EventUsage {
		return // the totals show at run_finished
	}
	if e.Type != agent.EventTextDelta && e.Type != agent.EventMessage && r.inText {
		r.inText = false
		r.newline()
	}
	switch e.Type {
	case agent.EventRunStarted:
		r.print(fmt.Sprintf("▶ agent %s\n", e.Agent))
	case agent.EventTextDelta:
		if !r.inText {
			r.newline()
			r.print("» ")
			r.inText = true
		}
		r.print(e.Text)
	case agent.EventMessage:
		if !r.inText { // not streamed
			r.newline()
			r.print("» " + e.Text)
		}
		r.inText = false
		r.newline()
	case agent.EventToolCallStarted:
		r.started[e.CallID] = e.CallView
		r.newline()
		r.print(fmt.Sprintf("%s\n", summarizeCall(e.Tool, e.Arguments, e.CallView)))
	case agent.EventOutput:
		r.print(e.Data)
	case agent.EventFileChanged:
		r.newline()
		r.print(fileLine(e))
		if e.Diff != "" {
			r.print(indent(e.Diff))
		}
	case agent.EventToolCallFinished:
		r.finished(e)
	case agent.EventApprovalRequested:
		// What waits, and the id that --approve-call takes.
		what := summarizeCall(e.Tool, e.Arguments, e.CallView)
		r.calls[e.CallID] = what
		r.newline()
		reason := ""
		if e.Approval != nil && e.Approval.Reason != "" {
			reason = " (" + e.Approval.Reason + ")"
		}
		r.print(fmt.Sprintf("? %s needs your approval%s: %s\n", e.CallID, reason, what))
	case agent.EventRunFinished:
		r.newline()
		// The error itself goes to stderr, as cove's errors do; Ctrl-C
		// gets its own note.
		if e.Error != "" && !strings.HasSuffix(e.Error, context.Canceled.Error()) {
			r.print("✗ run failed\n")
		}
		if e.Usage != nil && e.Usage.Requests > 0 {
			cost := "cost unknown (model not in the price table)"
			if e.Cost != nil {
				cost = fmt.Sprintf("≈ $%.4f", *e.Cost)
			}
			r.print(fmt.Sprintf("· %d model calls · tokens in %d (cached %d) out %d · %s\n",
				e.Usage.Requests, e.Usage.InputTokens, e.Usage.CachedInputTokens, e.Usage.OutputTokens, cost))
		}
	}
}

// finished prints the line that ends a tool call: rejected, its exit
// code, a command still running, an edit's failure, or its result.
func (r *renderer) finished(e agent.Event) {
	r.newline()
	d := e.Duration.Round(time.Millisecond)
	view, ran := r.started[e.CallID]
	switch {
	case !ran:
		// Rejected: it never ran.
		what := r.calls[e.CallID]
		if what == "" {
			what = e.Tool + " " + e.CallID
		}
		r.print(fmt.Sprintf("✗ rejected: %s\n", what))
	case e.ExitCode != nil:
		mark := "✓"
		if *e.ExitCode != 0 {
			mark = "✗"
		}
		r.print(fmt.Sprintf("  %s exit %d · %s\n", mark, *e.ExitCode, d))
	case view.Kind == agent.CallCommand:
		if e.SessionID != 0 {
			r.print(fmt.Sprintf("  … still running as session %d · %s\n", e.SessionID, d))
		} else {
			r.print(fmt.Sprintf("  %s · %s\n", firstLine(e.Result), d))
		}
	case view.Kind == agent.CallEdit:
		// The changes were shown as they were made; only a failure
		// needs a line.
		if strings.HasPrefix(e.Result, "error") || strings.Contains(e.Result, "rejected") {
			r.print(fmt.Sprintf("  ✗ %s\n", firstLine(e.Result)))
		}
	default:
		r.print(fmt.Sprintf("  ← %s · %s\n", clip(firstLine(e.Result), 120), d))
	}
}

// summarizeCall is the one line that shows a tool call, from its tool's
// view of it: a command by its command line, an edit by the tool's name,
// anything else by the tool's name and arguments.
func summarizeCall(tool, args string, v agent.CallView) string {
	switch {
	case v.Kind == agent.CallCommand && v.Command != "":
		return "$ " + v.Command
	case v.Kind == agent.CallEdit:
		return "✎ " + tool
	}
	return "→ " + tool + " " + clip(strings.Join(strings.Fields(args), " "), 160)
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func indent(s string) string {
	lines := strings.SplitAfter(s, "\n")
	var b strings.Builder
	for _, l := range lines {
		if l != "" {
			b.WriteString("    " + l)
		}
	}
	if !strings.HasSuffix(b.String(), "\n") {
		b.WriteString("\n")
	}
	return b.String()
}

// fileLine is how a file change is shown: apply_patch's with its diff
// below, a command's with the file's size, and the sum of those past the
// per-command limit as its text.
func fileLine(e agent.Event) string {
	if strings.ContainsFunc(e.Path, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		// A name the sandbox chose must not drive the terminal.
		e.Path = strconv.Quote(e.Path)
	}
	switch {
	case e.Path == "":
		return fmt.Sprintf("✎ %s\n", e.Text)
	case e.Diff == "" && e.Action != "deleted":
		return fmt.Sprintf("✎ %s %s (%s)\n", e.Action, e.Path, sizeText(e.Size))
	default:
		return fmt.Sprintf("✎ %s %s\n", e.Action, e.Path)
	}
}

// sizeText is a file size for people, in the web UI's units: 512 B,
// 12.3 KiB, 4 MiB.
func sizeText(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	f, i := float64(n), 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%d B", n)
	}
	return strings.Replace(fmt.Sprintf("%.1f %s", f, units[i]), ".0 ", " ", 1)
}
