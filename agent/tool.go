package agent

import (
	"context"
	"encoding/json"
	"time"
)

// Tool is something the model can call. The sandbox tools (a shell, file
// editing), MCP tools and the caller's own functions all implement it. A
// tool may also say how risky a call is (RiskAssessor) and how to show it
// (Describer).
type Tool interface {
	// Spec is the name, description and schema the model sees.
	Spec() ToolSpec
	// Call runs the tool. An error is reported to the model as the tool's
	// output (the run goes on); only ctx ending stops the run.
	Call(ctx context.Context, call ToolCall) (ToolResult, error)
}

// ToolCall is one invocation of a tool by the model.
type ToolCall struct {
	ID   string // the model's call id
	Name string
	// Arguments is JSON for function tools, raw text for custom tools.
	Arguments string
	// Emit reports progress (command output, file changes) to the run's
	// event stream. Never nil when the Runner calls a tool.
	Emit func(Event)
}

// ToolResult is what a tool returns to the model.
type ToolResult struct {
	Output []Content
	// ExitCode is set by tools that run a command that ended.
	ExitCode *int
	// SessionID is set by tools whose command is still running after
	// the call (it yielded); a later call of the tool continues it.
	SessionID int
}

// Describer is a Tool that says how to show its calls. The Runner puts
// the view in the tool_call_started and approval_requested events and in
// each Approval, so a viewer (cove run's output, the web UI) shows a call
// without knowing any tool by name. A tool that is not a Describer is
// shown by its name and arguments.
type Describer interface {
	// Describe returns the view of a call with these arguments; for
	// arguments the tool would reject, what it can (the zero CallView
	// will do).
	Describe(arguments string) CallView
}

// CallView is how to show one tool call: what sort of call it is and,
// for one that runs a command, its command line.
type CallView struct {
	// Kind decides how the call and its result are shown.
	Kind CallKind `json:"call_kind,omitempty"`
	// Command is the command line a CallCommand call runs, shown as
	// "$ command"; "" for one that feeds or polls a command already
	// running.
	Command string `json:"command,omitempty"`
}

// CallKind is what sort of call a CallView shows.
type CallKind string

const (
	// CallOther is shown by the tool's name and arguments, and its result
	// by its first line.
	CallOther CallKind = ""
	// CallCommand runs a command, or feeds or polls one still running: it
	// is shown by its command line, its output arrives as output events,
	// and it ends with an exit code (ExitCode) or with the command still
	// running (SessionID).
	CallCommand CallKind = "command"
	// CallEdit changes files in the workspace: it is shown by the tool's
	// name alone (its arguments are the change, which arrives file by file
	// as file_changed events), and its result only when it failed.
	CallEdit CallKind = "edit"
)

// TextResult is a ToolResult with one text output.
func TextResult(s string) ToolResult {
	return ToolResult{Output: []Content{{Type: ContentText, Text: s}}}
}

// FunctionTool adapts a Go function to a Tool: the model's JSON arguments
// are passed to fn, and fn's string is the output.
type FunctionTool struct {
	Name        string
	Description string
	Parameters  map[string]any
	Fn          func(ctx context.Context, args json.RawMessage) (string, error)
}

// Spec implements Tool.
func (f FunctionTool) Spec() ToolSpec {
	params := f.Parameters
	if params == nil {
		params = map[string]any{"type": "object", "properties": map[string]any{}}
	}
	return ToolSpec{Name: f.Name, Description: f.Description, Parameters: params}
}

// Call implements Tool.
func (f FunctionTool) Call(ctx context.Context, call ToolCall) (ToolResult, error) {
	args := json.RawMessage(call.Arguments)
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	out, err := f.Fn(ctx, args)
	if err != nil {
		return ToolResult{}, err
	}
	return TextResult(out), nil
}

// EventType discriminates run events.
type EventType string

// The events of a run, in the order a run produces them.
const (
	EventRunStarted        EventType = "run_started"
	EventTurnStarted       EventType = "turn_started"
	EventTextDelta         EventType = "text_delta"
	EventMessage           EventType = "message"
	EventToolCallStarted   EventType = "tool_call_started"
	EventOutput            EventType = "output"
	EventFileChanged       EventType = "file_changed"
	EventToolCallFinished  EventType = "tool_call_finished"
	EventApprovalRequested EventType = "approval_requested"
	EventRunFinished       EventType = "run_finished"
	EventError             EventType = "error"
	EventUsage             EventType = "usage" // after each model call: Usage so far, Cost, Model
)

// Event is one step of a run, streamed to the caller and written as one
// JSON line by `cove run --json`. Only the fields of its Type are set.
type Event struct {
	Type EventType `json:"type"`
	Time time.Time `json:"time"`
	Turn int       `json:"turn,omitempty"`

	// Agent names the agent (run_started).
	Agent string `json:"agent,omitempty"`
	// Text is a text delta or the assistant's message.
	Text string `json:"text,omitempty"`

	// Tool call fields.
	CallID    string `json:"call_id,omitempty"`
	Tool      string `json:"tool,omitempty"`
	Arguments string `json:"arguments,omitempty"`
	// CallView is how to show the call, as its tool describes it
	// (tool_call_started, approval_requested); the tools that run
	// commands also put the command line on their output events.
	CallView
	// Stream ("stdout", "stderr") and Data carry command output.
	Stream string `json:"stream,omitempty"`
	Data   string `json:"data,omitempty"`
	// Result is the tool's output as the model sees it (tool_call_finished).
	Result   string        `json:"result,omitempty"`
	ExitCode *int          `json:"exit_code,omitempty"`
	Duration time.Duration `json:"duration_ns,omitempty"`
	// SessionID is set when a command is still running after its yield.
	SessionID int `json:"session_id,omitempty"`

	// File change fields.
	Path   string `json:"path,omitempty"`
	Action string `json:"action,omitempty"` // "created", "updated", "deleted", "moved"
	Diff   string `json:"diff,omitempty"`
	// Size is the file's size in bytes after the change, for a change a
	// command made (those carry no diff).
	Size int64 `json:"size,omitempty"`

	// Approval (approval_requested).
	Approval *Approval `json:"approval,omitempty"`

	// Model is the model called (usage).
	Model string `json:"model,omitempty"`

	// Run outcome (run_finished); Usage and Cost also on usage.
	Output string   `json:"output,omitempty"`
	Usage  *Usage   `json:"usage,omitempty"`
	Cost   *float64 `json:"cost_usd,omitempty"`
	Error  string   `json:"error,omitempty"`
}
