package agent

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/cove-sandbox/cove/sandbox"
)

// RunStateVersion is the schema version of RunState's JSON. A state of
// another version is refused rather than misread.
const RunStateVersion = 1

// RunState is everything needed to continue a run in another process: the
// conversation, the tool calls of the interrupted turn, the approvals and
// the sandbox (its id, to reattach, and a snapshot of its workspace, to
// recreate it if it is gone). It serialises to JSON.
type RunState struct {
	Version int    `json:"version"`
	Agent   string `json:"agent"`
	Model   string `json:"model,omitempty"`
	// Items is the conversation so far, input included.
	Items []Item `json:"items"`
	// Turn is the number of model calls made.
	Turn  int   `json:"turn"`
	Usage Usage `json:"usage"`
	// Pending are the tool calls of the last model response not yet
	// answered, in the model's order.
	Pending []Item `json:"pending,omitempty"`
	// Approvals are the pending calls that need a decision.
	Approvals []Approval    `json:"approvals,omitempty"`
	Sandbox   *SandboxState `json:"sandbox,omitempty"`
	// Meta is the caller's own data, kept as is (cove run keeps the host
	// workspace directory here to diff against after a resume).
	Meta map[string]string `json:"meta,omitempty"`
}

// SandboxState is a run's sandbox as saved in a RunState.
type SandboxState struct {
	ID   string       `json:"id"`
	Spec sandbox.Spec `json:"spec"`
	// Owned is true when the Runner created the sandbox (and so deletes
	// it at the end).
	Owned bool `json:"owned"`
	// Workspace is a tar of the workspace taken when the run stopped.
	Workspace []byte `json:"workspace,omitempty"`
}

// ParseRunState decodes a RunState saved with json.Marshal.
func ParseRunState(data []byte) (*RunState, error) {
	var s RunState
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("reading run state: %v: %w", err, sandbox.ErrInvalid)
	}
	if s.Version != RunStateVersion {
		return nil, fmt.Errorf("run state has schema version %d; this Cove reads version %d: %w", s.Version, RunStateVersion, sandbox.ErrInvalid)
	}
	return &s, nil
}

// Approve approves the pending call with this id.
func (s *RunState) Approve(callID string) error { return s.decide(callID, Approved, "") }

// Reject rejects the pending call with this id; message is told to the
// model ("" for a default).
func (s *RunState) Reject(callID, message string) error { return s.decide(callID, Rejected, message) }

// DecideAll sets the same decision on every undecided approval.
func (s *RunState) DecideAll(d Decision, message string) {
	for i := range s.Approvals {
		if s.Approvals[i].Decision == "" {
			s.Approvals[i].Decision, s.Approvals[i].Message = d, message
		}
	}
}

// Abandon ends the calls still pending (a run cancelled or failed
// mid-turn) by telling the model they were not run, with reason, so that
// Continue can go on from this state.
func (s *RunState) Abandon(reason string) {
	msg := "This tool call was not run"
	if reason != "" {
		msg += ": " + reason
	}
	for _, call := range s.Pending {
		s.Items = append(s.Items, toolOutput(call, TextResult(msg+".")))
	}
	s.Pending, s.Approvals = nil, nil
}

// Undecided lists the approvals still waiting.
func (s *RunState) Undecided() []Approval {
	var out []Approval
	for _, a := range s.Approvals {
		if a.Decision == "" {
			out = append(out, a)
		}
	}
	return out
}

func (s *RunState) decide(callID string, d Decision, msg string) error {
	var ids []string
	for i := range s.Approvals {
		if s.Approvals[i].CallID == callID {
			s.Approvals[i].Decision, s.Approvals[i].Message = d, msg
			return nil
		}
		ids = append(ids, s.Approvals[i].CallID)
	}
	return fmt.Errorf("no pending approval has call id %q (pending: %s): %w", callID, strings.Join(ids, ", "), sandbox.ErrNotFound)
}

func (s *RunState) approval(callID string) (Approval, bool) {
	for _, a := range s.Approvals {
		if a.CallID == callID {
			return a, true
		}
	}
	return Approval{}, false
}
