package agent

// Approval is a tool call waiting for the caller's decision.
type Approval struct {
	CallID    string `json:"call_id"`
	Tool      string `json:"tool"`
	Arguments string `json:"arguments"`
	// Reason says why the policy asked ("writes outside the workspace").
	Reason string `json:"reason,omitempty"`
}
