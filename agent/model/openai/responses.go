package openai

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"

	"github.com/cove-sandbox/cove/agent"
)

// responsesParams translates a request to the Responses API. Nothing is
// stored at OpenAI (store: false): the conversation is sent whole each
// turn, so a run can resume anywhere from its RunState.
func (m *Model) responsesParams(req agent.ModelRequest) (responses.ResponseNewParams, error) {
	input, err := responsesInput(req.Input)
	if err != nil {
		return responses.ResponseNewParams{}, err
	}
	p := responses.ResponseNewParams{
		Model: m.name,
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: input},
		Store: sdk.Bool(false),
	}
	if req.Instructions != "" {
		p.Instructions = sdk.String(req.Instructions)
	}
	custom := map[string]bool{}
	for _, t := range req.Tools {
		if t.Grammar != "" {
			custom[t.Name] = true
			p.Tools = append(p.Tools, responses.ToolUnionParam{OfCustom: &responses.CustomToolParam{
				Name:        t.Name,
				Description: optString(t.Description),
				Format: shared.CustomToolInputFormatUnionParam{OfGrammar: &shared.CustomToolInputFormatGrammarParam{
					Syntax: "lark", Definition: t.Grammar,
				}},
			}})
			continue
		}
		p.Tools = append(p.Tools, responses.ToolUnionParam{OfFunction: &responses.FunctionToolParam{
			Name:        t.Name,
			Description: optString(t.Description),
			Parameters:  schema(t.Parameters),
			// Always sent: the Responses API takes a missing strict as
			// true, which rejects most hand-written schemas.
			Strict: sdk.Bool(t.Strict),
		}})
	}
	if o := req.Output; o != nil {
		p.Text = responses.ResponseTextConfigParam{Format: responses.ResponseFormatTextConfigUnionParam{
			OfJSONSchema: &responses.ResponseFormatTextJSONSchemaConfigParam{Name: o.Name, Schema: o.Schema, Strict: sdk.Bool(o.Strict)},
		}}
	}
	s := req.Settings
	if s.Temperature != nil {
		p.Temperature = sdk.Float(*s.Temperature)
	}
	if s.TopP != nil {
		p.TopP = sdk.Float(*s.TopP)
	}
	if s.MaxOutputTokens > 0 {
		p.MaxOutputTokens = sdk.Int(s.MaxOutputTokens)
	}
	if s.ParallelToolCalls != nil && len(req.Tools) > 0 {
		p.ParallelToolCalls = sdk.Bool(*s.ParallelToolCalls)
	}
	switch s.ToolChoice {
	case "":
	case "auto", "none", "required":
		p.ToolChoice = responses.ResponseNewParamsToolChoiceUnion{OfToolChoiceMode: param.NewOpt(responses.ToolChoiceOptions(s.ToolChoice))}
	default:
		if custom[s.ToolChoice] {
			p.ToolChoice = responses.ResponseNewParamsToolChoiceUnion{OfCustomTool: &responses.ToolChoiceCustomParam{Name: s.ToolChoice}}
		} else {
			p.ToolChoice = responses.ResponseNewParamsToolChoiceUnion{OfFunctionTool: &responses.ToolChoiceFunctionParam{Name: s.ToolChoice}}
		}
	}
	if s.ReasoningEffort != "" {
		p.Reasoning = shared.ReasoningParam{Effort: shared.ReasoningEffort(s.ReasoningEffort)}
	}
	if s.ReasoningEffort != "" || reasoningModel(m.name) {
		// Without store the API keeps no reasoning between calls: ask
		// for it encrypted so it can be sent back (agent.ItemReasoning).
		p.Include = []responses.ResponseIncludable{responses.ResponseIncludableReasoningEncryptedContent}
	}
	return p, nil
}

// reasoningModel reports whether name is a model that reasons (and so
// returns reasoning items). Others refuse the encrypted-reasoning include.
func reasoningModel(name string) bool {
	for _, p := range []string{"gpt-5", "o1", "o3", "o4", "codex"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// responsesInput translates the conversation to input items. Item ids are
// left out: with store false the API does not know them, and only
// reasoning items (sent back verbatim, with their encrypted content) need
// theirs.
func responsesInput(items []agent.Item) (responses.ResponseInputParam, error) {
	var in responses.ResponseInputParam
	for i, it := range items {
		switch it.Type {
		case agent.ItemMessage:
			in = append(in, responsesMessage(it))
		case agent.ItemToolCall:
			if it.Custom {
				in = append(in, responses.ResponseInputItemUnionParam{OfCustomToolCall: &responses.ResponseCustomToolCallParam{
					CallID: it.CallID, Name: it.Name, Input: it.Arguments,
				}})
				continue
			}
			in = append(in, responses.ResponseInputItemParamOfFunctionCall(jsonOrEmpty(it.Arguments), it.CallID, it.Name))
		case agent.ItemToolOutput:
			in = append(in, responsesToolOutput(it))
		case agent.ItemReasoning:
			if len(it.Raw) == 0 {
				continue // nothing the API could use
			}
			if !json.Valid(it.Raw) {
				return nil, fmt.Errorf("input item %d: reasoning item %q has a Raw that is not JSON", i, it.ID)
			}
			in = append(in, param.Override[responses.ResponseInputItemUnionParam](json.RawMessage(it.Raw)))
		default:
			return nil, fmt.Errorf("input item %d: unknown item type %q", i, it.Type)
		}
	}
	return in, nil
}

func responsesMessage(it agent.Item) responses.ResponseInputItemUnionParam {
	role := responses.EasyInputMessageRoleUser
	switch it.Role {
	case agent.RoleAssistant:
		// The model's own words go back as text; it never sent images.
		return responses.ResponseInputItemParamOfMessage(agent.Text(it.Content), responses.EasyInputMessageRoleAssistant)
	case agent.RoleSystem:
		role = responses.EasyInputMessageRoleSystem
	}
	var parts responses.ResponseInputMessageContentListParam
	for _, c := range it.Content {
		switch c.Type {
		case agent.ContentImage:
			parts = append(parts, responses.ResponseInputContentUnionParam{OfInputImage: &responses.ResponseInputImageParam{
				ImageURL: sdk.String(c.ImageURL), Detail: responses.ResponseInputImageDetailAuto,
			}})
		default:
			parts = append(parts, responses.ResponseInputContentUnionParam{OfInputText: &responses.ResponseInputTextParam{Text: c.Text}})
		}
	}
	return responses.ResponseInputItemParamOfMessage(parts, role)
}

// responsesToolOutput is a function_call_output or custom_tool_call_output:
// a plain string when the output is text, a list with input_image parts
// when it has images (view_image), which the model then sees.
func responsesToolOutput(it agent.Item) responses.ResponseInputItemUnionParam {
	text, images := agent.Text(it.Output), hasImage(it.Output)
	if it.Custom {
		out := responses.ResponseCustomToolCallOutputParam{CallID: it.CallID}
		if !images {
			out.Output.OfString = sdk.String(text)
		}
		for _, c := range it.Output {
			var p responses.ResponseCustomToolCallOutputOutputOutputContentListItemUnionParam
			if !images {
				break
			}
			if c.Type == agent.ContentImage {
				p.OfInputImage = &responses.ResponseInputImageParam{ImageURL: sdk.String(c.ImageURL), Detail: responses.ResponseInputImageDetailAuto}
			} else {
				p.OfInputText = &responses.ResponseInputTextParam{Text: c.Text}
			}
			out.Output.OfOutputContentList = append(out.Output.OfOutputContentList, p)
		}
		return responses.ResponseInputItemUnionParam{OfCustomToolCallOutput: &out}
	}
	out := responses.ResponseInputItemFunctionCallOutputParam{CallID: sdk.String(it.CallID)}
	if !images {
		out.Output.OfString = sdk.String(text)
	}
	for _, c := range it.Output {
		if !images {
			break
		}
		var p responses.ResponseFunctionCallOutputItemUnionParam
		if c.Type == agent.ContentImage {
			p.OfInputImage = &responses.ResponseInputImageContentParam{ImageURL: sdk.String(c.ImageURL), Detail: responses.ResponseInputImageContentDetailAuto}
		} else {
			p.OfInputText = &responses.ResponseInputTextContentParam{Text: c.Text}
		}
		out.Output.OfResponseFunctionCallOutputItemArray = append(out.Output.OfResponseFunctionCallOutputItemArray, p)
	}
	return responses.ResponseInputItemUnionParam{OfFunctionCallOutput: &out}
}

func (m *Model) respondOnce(ctx context.Context, p responses.ResponseNewParams, a *attempt) (*agent.ModelResponse, error) {
	r, err := m.responses.New(ctx, p, option.WithResponseInto(&a.http))
	if err != nil {
		return nil, err
	}
	return m.fromResponse(r)
}

// respondStream streams a response, passing text deltas on. The final
// response.completed event carries the whole response; output items seen
// on the way stand in for it when a server leaves its output empty.
func (m *Model) respondStream(ctx context.Context, p responses.ResponseNewParams, a *attempt) (*agent.ModelResponse, error) {
	stream := m.responses.NewStreaming(ctx, p, option.WithResponseInto(&a.http))
	defer stream.Close()
	var final *responses.Response
	items := map[int64]responses.ResponseOutputItemUnion{}
	for stream.Next() {
		ev := stream.Current()
		switch ev.Type {
		case "response.output_text.delta":
			a.emit(ev.AsResponseOutputTextDelta().Delta)
		case "response.output_item.done":
			e := ev.AsResponseOutputItemDone()
			items[e.OutputIndex] = e.Item
		case "response.completed":
			r := ev.AsResponseCompleted().Response
			final = &r
		case "response.incomplete":
			r := ev.AsResponseIncomplete().Response
			final = &r
		case "response.failed":
			r := ev.AsResponseFailed().Response
			return nil, &RequestError{kind: failModel, Code: string(r.Error.Code), Message: r.Error.Message,
				retry: transientCode(string(r.Error.Code), "")}
		case "error":
			e := ev.AsError()
			return nil, &RequestError{kind: failModel, Code: e.Code, Message: e.Message, retry: transientCode(e.Code, "")}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	if final == nil {
		return nil, errStreamCut
	}
	if len(final.Output) == 0 && len(items) > 0 {
		idx := make([]int64, 0, len(items))
		for i := range items {
			idx = append(idx, i)
		}
		sort.Slice(idx, func(i, j int) bool { return idx[i] < idx[j] })
		for _, i := range idx {
			final.Output = append(final.Output, items[i])
		}
	}
	return m.fromResponse(final)
}

// fromResponse translates a Response's output items and usage.
func (m *Model) fromResponse(r *responses.Response) (*agent.ModelResponse, error) {
	if r.Status == "failed" {
		return nil, &RequestError{kind: failModel, Code: string(r.Error.Code), Message: r.Error.Message,
			retry: transientCode(string(r.Error.Code), "")}
	}
	if r.Status == "incomplete" {
		// Cut short (max_output_tokens, content_filter): a half-written
		// tool call must not reach a tool.
		return nil, &RequestError{kind: failModel, Code: r.IncompleteDetails.Reason,
			Message: "the reply was cut short: " + r.IncompleteDetails.Reason}
	}
	out := &agent.ModelResponse{ID: r.ID, Usage: agent.Usage{
		InputTokens:       r.Usage.InputTokens,
		CachedInputTokens: r.Usage.InputTokensDetails.CachedTokens,
		OutputTokens:      r.Usage.OutputTokens,
		ReasoningTokens:   r.Usage.OutputTokensDetails.ReasoningTokens,
	}}
	for _, o := range r.Output {
		switch o.Type {
		case "message":
			var b strings.Builder
			for _, c := range o.AsMessage().Content {
				switch c.Type {
				case "output_text":
					b.WriteString(c.Text)
				case "refusal":
					b.WriteString(c.Refusal)
				}
			}
			out.Output = append(out.Output, agent.Item{Type: agent.ItemMessage, ID: o.ID, Role: agent.RoleAssistant,
				Content: []agent.Content{{Type: agent.ContentText, Text: b.String()}}})
		case "function_call":
			fc := o.AsFunctionCall()
			out.Output = append(out.Output, agent.Item{Type: agent.ItemToolCall, ID: fc.ID, CallID: fc.CallID, Name: fc.Name, Arguments: fc.Arguments})
		case "custom_tool_call":
			cc := o.AsCustomToolCall()
			out.Output = append(out.Output, agent.Item{Type: agent.ItemToolCall, ID: cc.ID, CallID: cc.CallID, Name: cc.Name, Arguments: cc.Input, Custom: true})
		case "reasoning":
			out.Output = append(out.Output, agent.Item{Type: agent.ItemReasoning, ID: o.ID, Raw: json.RawMessage(o.RawJSON())})
		}
		// Hosted tools (web search, ...) are not declared by Cove and
		// cannot appear.
	}
	return out, nil
}

func optString(s string) param.Opt[string] {
	if s == "" {
		return param.Opt[string]{}
	}
	return sdk.String(s)
}

// schema is a function's parameter schema; a tool without parameters
// takes an empty object, as the API wants an object schema.
func schema(p map[string]any) map[string]any {
	if p == nil {
		return map[string]any{"type": "object", "properties": map[string]any{}}
	}
	return p
}

// jsonOrEmpty keeps a call's arguments valid JSON when a model sent none.
func jsonOrEmpty(s string) string {
	if strings.TrimSpace(s) == "" {
		return "{}"
	}
	return s
}

func hasImage(cs []agent.Content) bool {
	for _, c := range cs {
		if c.Type == agent.ContentImage {
			return true
		}
	}
	return false
}
