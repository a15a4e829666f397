package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/cove-sandbox/cove/manifest"
	"github.com/cove-sandbox/cove/sandbox"
)

// Agent is a model with instructions and tools. With Sandbox set it is a
// sandbox agent: the Runner gives it a sandbox session and the tools of its
// capabilities (a shell, file editing, skills).
type Agent struct {
	Name          string
	Instructions  string
	Model         Model
	ModelSettings ModelSettings
	// Tools are the agent's own tools, beside those of its capabilities
	// and MCP servers.
	Tools []Tool
	// ToolSources start with the run and give more tools (MCP servers:
	// agent/tool/mcp). They are closed when the run ends.
	ToolSources []ToolSource
	// Approval decides which tool calls wait for the caller; nil asks for
	// none.
	Approval ApprovalPolicy
	// OutputType, when set, makes the final answer JSON of its schema
	// (OutputFor[T] builds one from a Go type; Result.Decode reads it).
	OutputType *OutputType
	// Sandbox makes this a sandbox agent.
	Sandbox *SandboxAgent
}

// SandboxAgent is what a sandbox agent adds to an Agent.
type SandboxAgent struct {
	// DefaultManifest builds the workspace when the Runner creates the
	// sandbox (SandboxRunConfig.Manifest overrides it).
	DefaultManifest *manifest.Manifest
	// Capabilities give tools and instructions bound to the session:
	// agent/capabilities.Default() gives the workspace context, a shell
	// and the filesystem tools. Nil is an error (the Runner does not
	// pick tools for an agent); an empty, non-nil slice binds none.
	Capabilities []Capability
	// RunAs is the sandbox user the tools act as; "" is the sandbox's
	// default (an unprivileged user).
	RunAs string
	// Workdir is where commands start and AGENTS.md files are collected
	// down to; "" is the workspace root.
	Workdir string
}

// ToolSource provides tools for the length of a run.
type ToolSource interface {
	// Tools starts the source if needed and returns its tools.
	Tools(ctx context.Context) ([]Tool, error)
	// Close stops what Tools started.
	Close() error
}

// SandboxEnv is what a capability binds to.
type SandboxEnv struct {
	Session sandbox.Session
	// Root is the workspace root inside the sandbox.
	Root    string
	User    string
	Workdir string
	// Capabilities names every capability bound in this run, so one can
	// describe the others (the workspace context lists their tools).
	Capabilities []string
	// Edits are the paths tools reported with a diff (apply_patch), for
	// the shell's change detection; nil records nothing.
	Edits *Edits
}

// Capability gives a sandbox agent tools and instructions for one session:
// a shell, the filesystem, skills. Implementations live in
// agent/capabilities.
type Capability interface {
	Name() string
	Bind(ctx context.Context, env SandboxEnv) (Binding, error)
}

// Binding is a capability bound to a session.
type Binding struct {
	Tools []Tool
	// Instructions are added to the system prompt.
	Instructions string
	// Close releases what Bind started (background processes); may be nil.
	Close func(ctx context.Context) error
}

// RunConfig tunes one run.
type RunConfig struct {
	// MaxTurns bounds the model calls; 0 means DefaultMaxTurns.
	MaxTurns int
	// Sandbox is required for sandbox agents.
	Sandbox *SandboxRunConfig
	// OnEvent receives every event of the run, in order, from one
	// goroutine at a time.
	OnEvent func(Event)
	// Prices overrides the price table used to estimate cost.
	Prices map[string]Price
	// Input is added before the input text of Run (images, earlier turns).
	Input []Item
	// OnCheckpoint is called at each turn boundary, before the model is
	// called, with the run's state (no calls pending): a server saves it
	// to go on from there after a crash. It is called on the run's
	// goroutine and the state changes after it returns: marshal it, do
	// not keep it.
	OnCheckpoint func(*RunState)
}

// DefaultMaxTurns bounds a run's model calls when RunConfig.MaxTurns is 0.
// The Python SDK's default of 10 is too few for an agent that inspects,
// edits and tests.
const DefaultMaxTurns = 50

// SandboxRunConfig says where a sandbox agent's session comes from: a live
// Session the caller keeps, or a Runtime and Spec for one the Runner
// creates (and deletes at the end).
type SandboxRunConfig struct {
	Session sandbox.Session
	Runtime sandbox.Runtime
	Spec    sandbox.Spec
	// Manifest builds the workspace of a created sandbox; nil means the
	// agent's DefaultManifest.
	Manifest *manifest.Manifest
	// Snapshot, when set, is a workspace tar (SnapshotWorkspace's) that a
	// created sandbox is restored from instead of applying the manifest:
	// a run picks up where an earlier one left its files.
	Snapshot []byte
	// ApplyOptions tune how the manifest is applied (host base dir,
	// progress).
	ApplyOptions manifest.ApplyOptions
	// Prepare runs after a created sandbox's manifest is applied: the
	// place to load a workspace by other means (cove run uploads a tar).
	Prepare func(ctx context.Context, s sandbox.Session) error
	// OnFinish runs before a created sandbox is deleted at the end of a
	// run that finished (not one waiting for approval): the place to copy
	// the workspace out.
	OnFinish func(ctx context.Context, s sandbox.Session) error
	// KeepSandbox leaves a created sandbox running at the end.
	KeepSandbox bool
}

// Result is how a run ended: with a final output, or interrupted with
// approvals pending (then State is what Resume continues from).
type Result struct {
	// Output is the model's final answer.
	Output string
	// NewItems are the items this run added to the conversation.
	NewItems []Item
	Usage    Usage
	// Cost is the estimated cost in USD; CostKnown is false when the
	// model is not in the price table.
	Cost      float64
	CostKnown bool
	Turns     int
	// Interruptions are the tool calls waiting for approval.
	Interruptions []Approval
	// State is the run's state: resume it after deciding the
	// interruptions, or continue the conversation from it.
	State *RunState
	// SandboxID is the sandbox the run used.
	SandboxID string
	Duration  time.Duration
}

// Errors of a run.
var (
	// ErrMaxTurns: the run used MaxTurns model calls without a final answer.
	ErrMaxTurns = errors.New("maximum turns exceeded")
	// ErrUndecided: Resume was called with approvals not yet decided.
	ErrUndecided = errors.New("approvals not decided")
)

func (a *Agent) check() error {
	if a == nil {
		return fmt.Errorf("agent: nil agent: %w", sandbox.ErrInvalid)
	}
	if a.Model == nil {
		return fmt.Errorf("agent %q has no model: set Agent.Model (agent/model/openai.New): %w", a.Name, sandbox.ErrInvalid)
	}
	return nil
}

// discard is an io.Writer for unwanted output.
var discard io.Writer = io.Discard
