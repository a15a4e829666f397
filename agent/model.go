package agent

import (
	"context"
	"encoding/json"
)

// Model produces the next response of a conversation. Implementations
// (agent/model/openai, the scripted fake in tests) translate ModelRequest to
// their wire format and back; the Runner never sees a provider's types.
type Model interface {
	// Name is the model's name as priced and reported ("gpt-5.1").
	Name() string
	// Respond sends one request and returns the whole response. Text the
	// model streams is passed to delta as it arrives (delta may be nil).
	// Transient failures (429, 5xx, network) are retried inside Respond;
	// the error it returns is final. ctx cancels the request.
	Respond(ctx context.Context, req ModelRequest, delta func(text string)) (*ModelResponse, error)
}

// ModelRequest is one call to a model: the system instructions, the
// conversation so far and the tools it may call.
type ModelRequest struct {
	Instructions string
	Input        []Item
	Tools        []ToolSpec
	Settings     ModelSettings
	// Output, when set, asks for a final answer that is JSON of this
	// schema.
	Output *OutputType
}

// ModelSettings tune a model call. Zero values mean "the provider's default".
type ModelSettings struct {
	Temperature       *float64 `json:"temperature,omitempty"`
	TopP              *float64 `json:"top_p,omitempty"`
	MaxOutputTokens   int64    `json:"max_output_tokens,omitempty"`
	ToolChoice        string   `json:"tool_choice,omitempty"` // "auto", "required", "none" or a tool name
	ParallelToolCalls *bool    `json:"parallel_tool_calls,omitempty"`
	ReasoningEffort   string   `json:"reasoning_effort,omitempty"` // "minimal", "low", "medium", "high"
}

// ModelResponse is what one model call returned.
type ModelResponse struct {
	// ID is the provider's response id, when it has one.
	ID     string `json:"id,omitempty"`
	Output []Item `json:"output"`
	Usage  Usage  `json:"usage"`
}

// Usage counts tokens. It adds up over the calls of a run.
type Usage struct {
	Requests          int64 `json:"requests"`
	InputTokens       int64 `json:"input_tokens"`
	CachedInputTokens int64 `json:"cached_input_tokens,omitempty"`
	OutputTokens      int64 `json:"output_tokens"`
	ReasoningTokens   int64 `json:"reasoning_tokens,omitempty"`
}

// Add returns the sum of two usages.
func (u Usage) Add(o Usage) Usage {
	return Usage{
		Requests:          u.Requests + o.Requests,
		InputTokens:       u.InputTokens + o.InputTokens,
		CachedInputTokens: u.CachedInputTokens + o.CachedInputTokens,
		OutputTokens:      u.OutputTokens + o.OutputTokens,
		ReasoningTokens:   u.ReasoningTokens + o.ReasoningTokens,
	}
}

// ItemType discriminates conversation items.
type ItemType string

const (
	// ItemMessage is text (and images) from the user, the assistant or the
	// system.
	ItemMessage ItemType = "message"
	// ItemToolCall is the model asking for a tool: a function call with
	// JSON arguments, or a custom (freeform) call with raw input.
	ItemToolCall ItemType = "tool_call"
	// ItemToolOutput is the answer to a tool call, matched by CallID.
	ItemToolOutput ItemType = "tool_output"
	// ItemReasoning is a reasoning item some models return; it is sent
	// back as is (Raw) so the model keeps its chain of thought.
	ItemReasoning ItemType = "reasoning"
)

// Role is who wrote a message.
type Role string

const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleSystem    Role = "system"
)

// Item is one entry of the conversation. It is serialised into RunState, so
// its JSON form is stable.
type Item struct {
	Type ItemType `json:"type"`
	// ID is the provider's item id, kept for round trips ("msg_...",
	// "fc_...", "rs_...").
	ID string `json:"id,omitempty"`

	// Message fields.
	Role    Role      `json:"role,omitempty"`
	Content []Content `json:"content,omitempty"`

	// Tool call fields. Custom is true for a freeform (custom) tool call,
	// whose Arguments is the raw input rather than JSON.
	CallID    string `json:"call_id,omitempty"`
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments,omitempty"`
	Custom    bool   `json:"custom,omitempty"`

	// Tool output fields: Output answers the call CallID (Name and Custom
	// repeat the call's so providers that need them have them).
	Output []Content `json:"output,omitempty"`

	// Raw is a provider item passed back verbatim (reasoning items).
	Raw json.RawMessage `json:"raw,omitempty"`
}

// ContentType discriminates message and tool-output content.
type ContentType string

const (
	ContentText  ContentType = "text"
	ContentImage ContentType = "image"
)

// Content is a piece of a message or a tool output.
type Content struct {
	Type ContentType `json:"type"`
	Text string      `json:"text,omitempty"`
	// ImageURL is an image as a data: URL (or https URL) for ContentImage.
	ImageURL string `json:"image_url,omitempty"`
}

// Text returns the concatenated text of contents.
func Text(cs []Content) string {
	var n int
	for _, c := range cs {
		n += len(c.Text)
	}
	b := make([]byte, 0, n)
	for _, c := range cs {
		if c.Type == ContentText {
			b = append(b, c.Text...)
		}
	}
	return string(b)
}

// UserMessage is a user message item with text.
func UserMessage(text string) Item {
	return Item{Type: ItemMessage, Role: RoleUser, Content: []Content{{Type: ContentText, Text: text}}}
}

// ToolSpec is what the model is told about a tool.
type ToolSpec struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// Parameters is the JSON schema of a function tool's arguments.
	Parameters map[string]any `json:"parameters,omitempty"`
	// Grammar, when set, makes this a freeform custom tool whose input is
	// text matching this Lark grammar (the Responses API's custom tools).
	// Providers without custom tools get a function with one string
	// argument "input" instead.
	Grammar string `json:"grammar,omitempty"`
	// Strict asks for strict JSON-schema adherence for function tools.
	Strict bool `json:"strict,omitempty"`
}
