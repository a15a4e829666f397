package api

import (
	"encoding/json"
	"time"
)

// Run statuses. A run is "running" while the agent works, "waiting" when
// tool calls wait for approval (POST /v1/runs/{id}/approvals), "idle"
// when the agent answered and the run takes a follow-up message, and
// "failed" or "cancelled" when it stopped early (a follow-up message
// goes on from the last complete turn).
const (
	RunRunning   = "running"
	RunWaiting   = "waiting"
	RunIdle      = "idle"
	RunFailed    = "failed"
	RunCancelled = "cancelled"
)

// RunAgent configures the agent of a run.
type RunAgent struct {
	Name         string `json:"name,omitempty"`
	Instructions string `json:"instructions,omitempty"`
	// Model is the model name (default the server's, gpt-5.1).
	Model string `json:"model,omitempty"`
	// BaseURL is an OpenAI-compatible server. The server's own model key
	// ($OPENAI_API_KEY) is only ever sent to the server's own model
	// endpoint; a run with another base URL uses the team's secret named
	// by APIKeySecret, or no key. Another base URL is reached only at a
	// public address, unless the server's operator allows others.
	BaseURL string `json:"base_url,omitempty"`
	// API is "responses" or "chat" ("" picks: responses for OpenAI).
	API string `json:"api,omitempty"`
	// APIKeySecret names the team secret holding the model key
	// (default OPENAI_API_KEY); the server's environment is the fallback.
	APIKeySecret string `json:"api_key_secret,omitempty"`
	// Capabilities are the sandbox capabilities (workspace, shell,
	// filesystem, skills); default workspace, shell, filesystem.
	Capabilities []string `json:"capabilities,omitempty"`
	// Approval is which tool calls wait for a decision: never, risky
	// (the default) or all.
	Approval string `json:"approval,omitempty"`
	MaxTurns int    `json:"max_turns,omitempty"`
}

// CreateRun is the body of POST /v1/runs (or its "run" part when the
// request is multipart/form-data with a "workspace" tar part).
type CreateRun struct {
	Agent RunAgent `json:"agent"`
	Input string   `json:"input"`
	// SandboxID runs the agent in an existing running sandbox of the
	// team (kept at the end). Otherwise a new sandbox is made from
	// Sandbox, with Manifest or the uploaded tar as its workspace; it is
	// a sandbox like any other (listed, TTL, idle timeout) and is kept
	// for follow-up messages.
	SandboxID string          `json:"sandbox_id,omitempty"`
	Sandbox   *CreateSandbox  `json:"sandbox,omitempty"`
	Manifest  json.RawMessage `json:"manifest,omitempty"`
	// WebhookURL receives a POST with the run (RunWebhook) each time it
	// stops (idle, waiting, failed, cancelled), signed with
	// WebhookSecret (generated and returned once when empty). Like a
	// run's own base URL, it must be at a public address unless the
	// server's operator allows others.
	WebhookURL    string `json:"webhook_url,omitempty"`
	WebhookSecret string `json:"webhook_secret,omitempty"`
}

// Run describes a run.
type Run struct {
	ID        string   `json:"id"`
	Status    string   `json:"status"`
	Agent     RunAgent `json:"agent"`
	SandboxID string   `json:"sandbox_id,omitempty"`
	// Input is the first task; Messages counts the inputs so far.
	Input    string `json:"input"`
	Messages int    `json:"messages"`
	// Output is the agent's last answer.
	Output string `json:"output,omitempty"`
	// Error says why the run failed.
	Error string `json:"error,omitempty"`
	// Approvals are the calls waiting for a decision (status waiting).
	Approvals []RunApproval `json:"approvals,omitempty"`
	Usage     RunUsage      `json:"usage"`
	CostUSD   *float64      `json:"cost_usd,omitempty"`
	// LastEventID is the id of the run's latest event.
	LastEventID int64      `json:"last_event_id"`
	WebhookURL  string     `json:"webhook_url,omitempty"`
	CreatedAt   time.Time  `json:"created_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
	FinishedAt  *time.Time `json:"finished_at,omitempty"`
	// WebhookSecret is only in the response to the create.
	WebhookSecret string `json:"webhook_secret,omitempty"`
}

// RunUsage is the tokens a run used.
type RunUsage struct {
	Requests        int64 `json:"requests"`
	InputTokens     int64 `json:"input_tokens"`
	CachedTokens    int64 `json:"cached_tokens"`
	OutputTokens    int64 `json:"output_tokens"`
	ReasoningTokens int64 `json:"reasoning_tokens,omitempty"`
}

// RunApproval is a tool call waiting for a decision.
type RunApproval struct {
	CallID    string `json:"call_id"`
	Tool      string `json:"tool"`
	Arguments string `json:"arguments,omitempty"`
	// Command is the command line of an exec_command call.
	Command string `json:"command,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// RunList is the body of GET /v1/runs (newest first).
type RunList struct {
	Runs []Run `json:"runs"`
	// Next is the cursor for the next page ("" at the end).
	Next string `json:"next,omitempty"`
}

// RunDecisions is the body of POST /v1/runs/{id}/approvals. Every
// waiting call must end up decided (by its own entry or by All); the run
// then goes on.
type RunDecisions struct {
	Decisions []RunDecision `json:"decisions,omitempty"`
	// All is "approve" or "reject", for every call not listed.
	All string `json:"all,omitempty"`
}

// RunDecision decides one call.
type RunDecision struct {
	CallID string `json:"call_id"`
	// Decision is "approve" or "reject".
	Decision string `json:"decision"`
	// Message is told to the model on a rejection.
	Message string `json:"message,omitempty"`
}

// RunMessage is the body of POST /v1/runs/{id}/messages.
type RunMessage struct {
	Input string `json:"input"`
}

// RunWebhook is the body POSTed to a run's webhook. The request carries
// Cove-Signature: t=UNIX,v1=HEX where HEX is the HMAC-SHA256, keyed by
// the webhook secret, of "UNIX.BODY".
type RunWebhook struct {
	Event string `json:"event"` // run.idle, run.waiting, run.failed, run.cancelled
	Run   Run    `json:"run"`
}

// SetSecret is the body of PUT /v1/secrets/{name}: a team secret (a
// model API key) kept encrypted by the server and never returned.
type SetSecret struct {
	Value string `json:"value"`
}

// Secret lists a secret without its value.
type Secret struct {
	Name      string    `json:"name"`
	UpdatedAt time.Time `json:"updated_at"`
}

// SecretList is the body of GET /v1/secrets.
type SecretList struct {
	Secrets []Secret `json:"secrets"`
}
