package fake

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// ordered is a JSON object that keeps its keys in the order written, so
// the fake's bodies read like the recorded ones.
type ordered []field

type field struct {
	k string
	v any
}

func (o ordered) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(f.k)
		v, err := json.Marshal(f.v)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// respond answers a Responses API request, as one JSON body or as the
// stream of events api.openai.com sends.
func (s *Server) respond(w http.ResponseWriter, req *Request, a answer) {
	if !req.Stream() {
		writeJSON(w, responseObject(req, a, "completed", true))
		return
	}
	startStream(w)
	seq := 0
	emit := func(typ string, fields ...field) {
		sse(w, typ, append(ordered{{"type", typ}, {"sequence_number", seq}}, fields...))
		seq++
	}
	emit("response.created", field{"response", responseObject(req, a, "in_progress", false)})
	emit("response.in_progress", field{"response", responseObject(req, a, "in_progress", false)})
	for i, o := range a.outputs {
		id := itemID(o)
		emit("response.output_item.added", field{"output_index", i}, field{"item", outputItem(o, false)})
		switch {
		case o.kind == outText:
			emit("response.content_part.added", field{"item_id", id}, field{"output_index", i}, field{"content_index", 0},
				field{"part", outputText("")})
			for _, d := range words(o.text) {
				emit("response.output_text.delta", field{"item_id", id}, field{"output_index", i}, field{"content_index", 0},
					field{"delta", d}, field{"logprobs", []any{}}, field{"obfuscation", obfuscation(d)})
			}
			emit("response.output_text.done", field{"item_id", id}, field{"output_index", i}, field{"content_index", 0},
				field{"text", o.text}, field{"logprobs", []any{}})
			emit("response.content_part.done", field{"item_id", id}, field{"output_index", i}, field{"content_index", 0},
				field{"part", outputText(o.text)})
		case o.kind == outCall || o.asFunction:
			for _, d := range pieces(o.text, 8) {
				emit("response.function_call_arguments.delta", field{"item_id", id}, field{"output_index", i},
					field{"delta", d}, field{"obfuscation", obfuscation(d)})
			}
			emit("response.function_call_arguments.done", field{"item_id", id}, field{"output_index", i},
				field{"arguments", o.text})
		case o.kind == outCustom:
			for _, d := range pieces(o.text, 8) {
				emit("response.custom_tool_call_input.delta", field{"item_id", id}, field{"output_index", i},
					field{"delta", d}, field{"obfuscation", obfuscation(d)})
			}
			emit("response.custom_tool_call_input.done", field{"item_id", id}, field{"output_index", i},
				field{"input", o.text})
		case o.kind == outReasoning && o.text != "":
			part := ordered{{"type", "summary_text"}, {"text", o.text}}
			emit("response.reasoning_summary_part.added", field{"item_id", id}, field{"output_index", i},
				field{"summary_index", 0}, field{"part", ordered{{"type", "summary_text"}, {"text", ""}}})
			for _, d := range words(o.text) {
				emit("response.reasoning_summary_text.delta", field{"item_id", id}, field{"output_index", i},
					field{"summary_index", 0}, field{"delta", d}, field{"obfuscation", obfuscation(d)})
			}
			emit("response.reasoning_summary_text.done", field{"item_id", id}, field{"output_index", i},
				field{"summary_index", 0}, field{"text", o.text})
			emit("response.reasoning_summary_part.done", field{"item_id", id}, field{"output_index", i},
				field{"summary_index", 0}, field{"part", part})
		}
		emit("response.output_item.done", field{"output_index", i}, field{"item", outputItem(o, true)})
	}
	emit("response.completed", field{"response", responseObject(req, a, "completed", true)})
}

// responseObject is the Response object; while in progress it has no
// output and no usage yet. Request fields the API echoes are echoed.
func responseObject(req *Request, a answer, status string, done bool) ordered {
	b := req.Body
	or := func(k string, def any) any {
		if v, ok := b[k]; ok {
			return v
		}
		return def
	}
	output := []any{}
	var usage any
	if done {
		for _, o := range a.outputs {
			output = append(output, outputItem(o, true))
		}
		usage = ordered{
			{"input_tokens", a.usage.InputTokens},
			{"input_tokens_details", ordered{{"cached_tokens", a.usage.CachedTokens}}},
			{"output_tokens", a.usage.OutputTokens},
			{"output_tokens_details", ordered{{"reasoning_tokens", a.usage.ReasoningTokens}}},
			{"total_tokens", a.usage.InputTokens + a.usage.OutputTokens},
		}
	}
	reasoning := ordered{{"effort", nil}, {"summary", nil}}
	if r := obj(b["reasoning"]); r != nil {
		reasoning = ordered{{"effort", r["effort"]}, {"summary", r["summary"]}}
	}
	text := or("text", ordered{{"format", ordered{{"type", "text"}}}, {"verbosity", "medium"}})
	return ordered{
		{"id", fmt.Sprintf("resp_%d", a.id)},
		{"object", "response"},
		{"created_at", time.Now().Unix()},
		{"status", status},
		{"background", false},
		{"error", nil},
		{"incomplete_details", nil},
		{"instructions", or("instructions", nil)},
		{"max_output_tokens", or("max_output_tokens", nil)},
		{"max_tool_calls", or("max_tool_calls", nil)},
		{"model", req.Model()},
		{"output", output},
		{"parallel_tool_calls", or("parallel_tool_calls", true)},
		{"previous_response_id", nil},
		{"prompt_cache_key", or("prompt_cache_key", nil)},
		{"reasoning", reasoning},
		{"safety_identifier", nil},
		{"service_tier", "default"},
		{"store", or("store", true)},
		{"temperature", or("temperature", 1.0)},
		{"text", text},
		{"tool_choice", or("tool_choice", "auto")},
		{"tools", or("tools", []any{})},
		{"top_logprobs", 0},
		{"top_p", or("top_p", 1.0)},
		{"truncation", "disabled"},
		{"usage", usage},
		{"user", nil},
		{"metadata", or("metadata", map[string]any{})},
	}
}

func itemID(o resolved) string {
	switch {
	case o.kind == outText:
		return fmt.Sprintf("msg_%d", o.id)
	case o.kind == outCall || o.asFunction:
		return fmt.Sprintf("fc_%d", o.id)
	case o.kind == outCustom:
		return fmt.Sprintf("ctc_%d", o.id)
	default:
		return fmt.Sprintf("rs_%d", o.id)
	}
}

func outputText(text string) ordered {
	return ordered{{"type", "output_text"}, {"annotations", []any{}}, {"logprobs", []any{}}, {"text", text}}
}

// outputItem is an output item as output_item.added (done false: empty,
// in progress) or output_item.done and the final response carry it.
func outputItem(o resolved, done bool) ordered {
	status, text := "completed", o.text
	if !done {
		status, text = "in_progress", ""
	}
	id := itemID(o)
	switch {
	case o.kind == outText:
		content := []any{}
		if done {
			content = append(content, outputText(text))
		}
		return ordered{{"id", id}, {"type", "message"}, {"status", status}, {"content", content}, {"role", "assistant"}}
	case o.kind == outCall || o.asFunction:
		return ordered{{"id", id}, {"type", "function_call"}, {"status", status}, {"arguments", text}, {"call_id", o.callID}, {"name", o.name}}
	case o.kind == outCustom:
		return ordered{{"id", id}, {"type", "custom_tool_call"}, {"status", status}, {"call_id", o.callID}, {"input", text}, {"name", o.name}}
	default:
		summary := []any{}
		if done && o.text != "" {
			summary = append(summary, ordered{{"type", "summary_text"}, {"text", o.text}})
		}
		return ordered{{"id", id}, {"type", "reasoning"}, {"encrypted_content", fmt.Sprintf("enc_%d", o.id)}, {"summary", summary}}
	}
}
