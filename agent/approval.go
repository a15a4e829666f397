package agent

import (
	"context"
)

// Approval is a tool call waiting for the caller's decision.
type Approval struct {
	CallID    string `json:"call_id"`
	Tool      string `json:"tool"`
	Arguments string `json:"arguments"`
	// CallView is how to show the call, as its tool describes it (empty
	// for a tool that does not: show its name and arguments).
	CallView
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
	// Tool is the name the model called, Arguments what it passed (JSON
	// for function tools, raw text for custom tools).
	Tool      string
	Arguments string
	// Root is the sandbox workspace root ("" for agents without one).
	Root string
	// Handler is the run's tool of that name; nil when the run has none
	// (the call then fails without running). A policy may ask it about
	// the call through the optional interfaces RiskAssessor and Describer.
	Handler Tool
}

// ApprovalPolicy decides whether a tool call waits for the caller. It
// returns need=true with a short reason when it does. A nil policy
// approves everything.
type ApprovalPolicy func(ctx context.Context, req ApprovalRequest) (reason string, need bool)

// RiskAssessor is a Tool that judges its own calls for ApproveRisky: the
// tool knows what its arguments mean, the Runner does not. The sandbox
// tools implement it (a shell command is judged by what it runs; a patch
// is confined to the workspace); a tool that does not is judged risky.
type RiskAssessor interface {
	// Risk says whether a call with these arguments, in a workspace at
	// root ("" when the agent has none), may do harm beyond the workspace
	// or be hard to undo: delete recursively, install packages, reach the
	// network, escalate privileges, write outside the workspace. It then
	// returns risky=true and a short reason ("installs packages").
	// Arguments the tool would reject are not risky: the call fails
	// without acting.
	Risk(arguments, root string) (reason string, risky bool)
}

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
// hard to undo, as their tool judges them (RiskAssessor); and for every
// call of a tool that does not judge its calls, or of no tool at all,
// since the Runner cannot tell what it does (the caller's functions act
// outside the sandbox).
func ApproveRisky(_ context.Context, r ApprovalRequest) (string, bool) {
	if ra, ok := r.Handler.(RiskAssessor); ok {
		return ra.Risk(r.Arguments, r.Root)
	}
	return "the tool " + r.Tool + " acts outside the sandbox", true
}
