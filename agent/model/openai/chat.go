package openai

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/cove-sandbox/cove/agent"
)

// chatParams translates a request to Chat Completions. Custom (grammar)
// tools become functions with one string argument "input", since most
// OpenAI-compatible servers have no custom tools; custom lists their
// names so their calls come back as custom calls with the raw input.
func (m *Model) chatParams(req agent.ModelRequest, stream bool) (sdk.ChatCompletionNewParams, map[string]bool) {
	custom := map[string]bool{}
	for _, t := range req.Tools {
		if t.Grammar != "" {
			custom[t.Name] = true
		}
	}
	p := sdk.ChatCompletionNewParams{
		Model:    m.name,
		Messages: chatMessages(req.Instructions, req.Input),
	}
	if o := req.Output; o != nil {
		p.ResponseFormat = sdk.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
			JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: o.Name, Schema: o.Schema, Strict: sdk.Bool(o.Strict)},
		}}
	}
	for _, t := range req.Tools {
		fn := shared.FunctionDefinitionParam{Name: t.Name, Description: optString(t.Description), Parameters: schema(t.Parameters)}
		if t.Grammar != "" {
			fn.Parameters = map[string]any{
				"type": "object",
				"properties": map[string]any{"input": map[string]any{
					"type":        "string",
					"description": "The raw input. It must match this Lark grammar:\n" + t.Grammar,
				}},
				"required":             []string{"input"},
				"additionalProperties": false,
			}
		}
		if t.Strict {
			fn.Strict = sdk.Bool(true) // only when asked: some servers refuse the field
		}
		p.Tools = append(p.Tools, sdk.ChatCompletionFunctionTool(fn))
	}
	if stream {
		p.StreamOptions = sdk.ChatCompletionStreamOptionsParam{IncludeUsage: sdk.Bool(true)}
	}
	s := req.Settings
	if s.Temperature != nil {
		p.Temperature = sdk.Float(*s.Temperature)
	}
	if s.TopP != nil {
		p.TopP = sdk.Float(*s.TopP)
	}
	if s.MaxOutputTokens > 0 {
		// OpenAI's reasoning models refuse max_tokens; most other
		// servers know only max_tokens.
		if m.isOpenAI {
			p.MaxCompletionTokens = sdk.Int(s.MaxOutputTokens)
		} else {
			p.MaxTokens = sdk.Int(s.MaxOutputTokens)
		}
	}
	if s.ParallelToolCalls != nil && len(req.Tools) > 0 {
		p.ParallelToolCalls = sdk.Bool(*s.ParallelToolCalls)
	}
	switch s.ToolChoice {
	case "":
	case "auto", "none", "required":
		p.ToolChoice = sdk.ChatCompletionToolChoiceOptionUnionParam{OfAuto: sdk.String(s.ToolChoice)}
	default:
		p.ToolChoice = sdk.ToolChoiceOptionFunctionToolChoice(sdk.ChatCompletionNamedToolChoiceFunctionParam{Name: s.ToolChoice})
	}
	if s.ReasoningEffort != "" {
		p.ReasoningEffort = shared.ReasoningEffort(s.ReasoningEffort)
	}
	return p, custom
}

// chatMessages translates the conversation to messages: instructions as
// the system message, consecutive tool calls as one assistant message
// with tool_calls (joined to the assistant text before them), tool
// outputs as tool messages. Chat has images only in user messages, so the
// images of tool outputs follow the tool messages in one user message,
// as other SDKs do. Reasoning items have no place here and are dropped.
func chatMessages(instructions string, items []agent.Item) []sdk.ChatCompletionMessageParamUnion {
	var msgs []sdk.ChatCompletionMessageParamUnion
	if instructions != "" {
		msgs = append(msgs, sdk.SystemMessage(instructions))
	}
	var assistant *sdk.ChatCompletionAssistantMessageParam // the one tool calls join
	var images []sdk.ChatCompletionContentPartUnionParam   // tool output images not yet sent
	flush := func() {
		if len(images) > 0 {
			msgs = append(msgs, sdk.UserMessage(images))
			images = nil
		}
	}
	for _, it := range items {
		if it.Type != agent.ItemToolOutput && it.Type != agent.ItemReasoning {
			flush()
		}
		switch it.Type {
		case agent.ItemMessage:
			assistant = nil
			switch it.Role {
			case agent.RoleAssistant:
				assistant = &sdk.ChatCompletionAssistantMessageParam{}
				assistant.Content.OfString = sdk.String(agent.Text(it.Content))
				msgs = append(msgs, sdk.ChatCompletionMessageParamUnion{OfAssistant: assistant})
			case agent.RoleSystem:
				msgs = append(msgs, sdk.SystemMessage(agent.Text(it.Content)))
			default:
				msgs = append(msgs, userMessage(it.Content))
			}
		case agent.ItemToolCall:
			if assistant == nil {
				assistant = &sdk.ChatCompletionAssistantMessageParam{}
				msgs = append(msgs, sdk.ChatCompletionMessageParamUnion{OfAssistant: assistant})
			}
			args := jsonOrEmpty(it.Arguments)
			if it.Custom {
				b, _ := json.Marshal(map[string]string{"input": it.Arguments})
				args = string(b)
			}
			assistant.ToolCalls = append(assistant.ToolCalls, sdk.ChatCompletionMessageToolCallUnionParam{
				OfFunction: &sdk.ChatCompletionMessageFunctionToolCallParam{
					ID:       it.CallID,
					Function: sdk.ChatCompletionMessageFunctionToolCallFunctionParam{Name: it.Name, Arguments: args},
				},
			})
		case agent.ItemToolOutput:
			assistant = nil
			text := agent.Text(it.Output)
			if hasImage(it.Output) {
				if text == "" {
					text = "(the output is an image; it follows in the next message)"
				}
				images = append(images, sdk.TextContentPart(fmt.Sprintf("Image output of tool call %s (%s):", it.CallID, it.Name)))
				for _, c := range it.Output {
					if c.Type == agent.ContentImage {
						images = append(images, sdk.ImageContentPart(sdk.ChatCompletionContentPartImageImageURLParam{URL: c.ImageURL}))
					}
				}
			}
			msgs = append(msgs, sdk.ToolMessage(text, it.CallID))
		}
	}
	flush()
	return msgs
}

// userMessage is a user message: a plain string when it is only text (what
// every server understands), parts when it has images.
func userMessage(cs []agent.Content) sdk.ChatCompletionMessageParamUnion {
	if !hasImage(cs) {
		return sdk.UserMessage(agent.Text(cs))
	}
	var parts []sdk.ChatCompletionContentPartUnionParam
	for _, c := range cs {
		if c.Type == agent.ContentImage {
			parts = append(parts, sdk.ImageContentPart(sdk.ChatCompletionContentPartImageImageURLParam{URL: c.ImageURL}))
		} else {
			parts = append(parts, sdk.TextContentPart(c.Text))
		}
	}
	return sdk.UserMessage(parts)
}

func (m *Model) completeOnce(ctx context.Context, p sdk.ChatCompletionNewParams, custom map[string]bool, a *attempt) (*agent.ModelResponse, error) {
	c, err := m.chat.New(ctx, p, option.WithResponseInto(&a.http))
	if err != nil {
		return nil, err
	}
	if len(c.Choices) == 0 {
		return nil, &RequestError{kind: failMalformed, Err: fmt.Errorf("the completion %q has no choices", c.ID)}
	}
	if err := cutShort(c.Choices[0].FinishReason); err != nil {
		return nil, err
	}
	msg := c.Choices[0].Message
	out := &agent.ModelResponse{ID: c.ID, Usage: chatUsage(c.Usage)}
	if text := msg.Content + msg.Refusal; text != "" {
		out.Output = append(out.Output, assistantText(text))
	}
	for _, tc := range msg.ToolCalls {
		if tc.Type == "custom" {
			out.Output = append(out.Output, agent.Item{Type: agent.ItemToolCall, CallID: tc.ID, Name: tc.Custom.Name, Arguments: tc.Custom.Input, Custom: true})
			continue
		}
		out.Output = append(out.Output, toolCall(tc.ID, tc.Function.Name, tc.Function.Arguments, custom))
	}
	return out, nil
}

// completeStream streams a completion: content deltas are passed on, tool
// call pieces joined by index, and the usage read from the last chunk
// (stream_options.include_usage).
func (m *Model) completeStream(ctx context.Context, p sdk.ChatCompletionNewParams, custom map[string]bool, a *attempt) (*agent.ModelResponse, error) {
	stream := m.chat.NewStreaming(ctx, p, option.WithResponseInto(&a.http))
	defer stream.Close()
	type call struct{ id, name, args strings.Builder }
	var (
		id       string
		text     strings.Builder
		calls    = map[int64]*call{}
		usage    agent.Usage
		finished bool
	)
	for stream.Next() {
		ch := stream.Current()
		id = ch.ID
		if ch.JSON.Usage.Valid() {
			usage = chatUsage(ch.Usage)
		}
		for _, c := range ch.Choices {
			if c.Index != 0 {
				continue
			}
			if c.FinishReason != "" {
				finished = true
				if err := cutShort(c.FinishReason); err != nil {
					return nil, err
				}
			}
			d := c.Delta
			text.WriteString(d.Content + d.Refusal)
			a.emit(d.Content + d.Refusal)
			for _, tc := range d.ToolCalls {
				cl := calls[tc.Index]
				if cl == nil {
					cl = &call{}
					calls[tc.Index] = cl
				}
				if cl.id.Len() == 0 {
					cl.id.WriteString(tc.ID)
				}
				if cl.name.Len() == 0 {
					cl.name.WriteString(tc.Function.Name)
				}
				cl.args.WriteString(tc.Function.Arguments)
			}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	if !finished {
		return nil, errStreamCut
	}
	out := &agent.ModelResponse{ID: id, Usage: usage}
	if text.Len() > 0 {
		out.Output = append(out.Output, assistantText(text.String()))
	}
	idx := make([]int64, 0, len(calls))
	for i := range calls {
		idx = append(idx, i)
	}
	sort.Slice(idx, func(i, j int) bool { return idx[i] < idx[j] })
	for _, i := range idx {
		c := calls[i]
		out.Output = append(out.Output, toolCall(c.id.String(), c.name.String(), c.args.String(), custom))
	}
	return out, nil
}

// cutShort is the error for a completion that stopped before the model
// did (the token limit, the content filter): a half-written tool call
// must not reach a tool.
func cutShort(finish string) error {
	switch finish {
	case "length", "content_filter":
		return &RequestError{kind: failModel, Code: finish, Message: "the reply was cut short: " + finish}
	}
	return nil
}

// toolCall is a function call from a chat reply; a call to a tool that is
// custom for the caller gets its raw input back out of {"input": ...}, so
// callers see what the Responses API would give them.
func toolCall(id, name, args string, custom map[string]bool) agent.Item {
	it := agent.Item{Type: agent.ItemToolCall, CallID: id, Name: name, Arguments: args}
	if custom[name] {
		it.Custom = true
		var in struct {
			Input *string `json:"input"`
		}
		if json.Unmarshal([]byte(args), &in) == nil && in.Input != nil {
			it.Arguments = *in.Input
		}
	}
	return it
}

func assistantText(text string) agent.Item {
	return agent.Item{Type: agent.ItemMessage, Role: agent.RoleAssistant, Content: []agent.Content{{Type: agent.ContentText, Text: text}}}
}

func chatUsage(u sdk.CompletionUsage) agent.Usage {
	return agent.Usage{
		InputTokens:       u.PromptTokens,
		CachedInputTokens: u.PromptTokensDetails.CachedTokens,
		OutputTokens:      u.CompletionTokens,
		ReasoningTokens:   u.CompletionTokensDetails.ReasoningTokens,
	}
}
