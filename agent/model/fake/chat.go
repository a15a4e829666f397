package fake

import (
	"fmt"
	"net/http"
	"strings"
	"time"
)

// chatTurn is one answer laid out as Chat Completions carries it.
type chatTurn struct {
	id      string
	created int64
	// text is the turn's texts joined; content is null, not "", when the
	// turn has none (hasText false).
	text    string
	hasText bool
	calls   []resolved
	finish  string // "stop", or "tool_calls" when the turn calls tools
	usage   ordered
}

// complete answers a Chat Completions request, as one chat.completion or
// as chat.completion.chunk events ending in "data: [DONE]". Reasoning
// outputs have no place in this API and are left out; the texts of a turn
// become the one message content.
func (s *Server) complete(w http.ResponseWriter, req *Request, a answer) {
	t := newChatTurn(a)
	if !req.Stream() {
		writeChatCompletion(w, req, t)
		return
	}
	streamChatCompletion(w, req, t)
}

func newChatTurn(a answer) chatTurn {
	t := chatTurn{id: fmt.Sprintf("chatcmpl-%d", a.id), created: time.Now().Unix(), finish: "stop"}
	var text strings.Builder
	for _, o := range a.outputs {
		switch o.kind {
		case outText:
			text.WriteString(o.text)
			t.hasText = true
		case outCall, outCustom:
			t.calls = append(t.calls, o)
		}
	}
	t.text = text.String()
	if len(t.calls) > 0 {
		t.finish = "tool_calls"
	}
	t.usage = ordered{
		{"prompt_tokens", a.usage.InputTokens},
		{"completion_tokens", a.usage.OutputTokens},
		{"total_tokens", a.usage.InputTokens + a.usage.OutputTokens},
		{"prompt_tokens_details", ordered{{"cached_tokens", a.usage.CachedTokens}, {"audio_tokens", 0}}},
		{"completion_tokens_details", ordered{
			{"reasoning_tokens", a.usage.ReasoningTokens}, {"audio_tokens", 0},
			{"accepted_prediction_tokens", 0}, {"rejected_prediction_tokens", 0},
		}},
	}
	return t
}

// writeChatCompletion answers a request that did not ask for a stream:
// one chat.completion object.
func writeChatCompletion(w http.ResponseWriter, req *Request, t chatTurn) {
	var content any // null when the model only called tools
	if t.hasText {
		content = t.text
	}
	msg := ordered{{"role", "assistant"}, {"content", content}, {"refusal", nil}, {"annotations", []any{}}}
	if len(t.calls) > 0 {
		var tcs []any
		for _, c := range t.calls {
			tcs = append(tcs, chatToolCall(req, c))
		}
		msg = append(msg, field{"tool_calls", tcs})
	}
	writeJSON(w, ordered{
		{"id", t.id},
		{"object", "chat.completion"},
		{"created", t.created},
		{"model", req.Model()},
		{"choices", []any{ordered{{"index", 0}, {"message", msg}, {"logprobs", nil}, {"finish_reason", t.finish}}}},
		{"usage", t.usage},
		{"service_tier", "default"},
		{"system_fingerprint", "fp_fake"},
	})
}

// streamChatCompletion answers a streamed request: chat.completion.chunk
// events with the text in words and each function call's arguments in
// pieces, the finish reason, the usage when asked for, then [DONE].
func streamChatCompletion(w http.ResponseWriter, req *Request, t chatTurn) {
	includeUsage, _ := obj(req.Body["stream_options"])["include_usage"].(bool)
	startStream(w)
	chunk := func(choices []any, u any, pad string) {
		c := ordered{
			{"id", t.id},
			{"object", "chat.completion.chunk"},
			{"created", t.created},
			{"model", req.Model()},
			{"service_tier", "default"},
			{"system_fingerprint", "fp_fake"},
			{"choices", choices},
		}
		if includeUsage {
			c = append(c, field{"usage", u})
		}
		sse(w, "", append(c, field{"obfuscation", obfuscation(pad)}))
	}
	delta := func(d ordered, finish any) {
		chunk([]any{ordered{{"index", 0}, {"delta", d}, {"logprobs", nil}, {"finish_reason", finish}}}, nil, "delta")
	}
	first := true
	// The first chunk names the role, as api.openai.com's does.
	head := func(d ordered) ordered {
		if !first {
			return d
		}
		first = false
		return append(ordered{{"role", "assistant"}}, append(d, field{"refusal", nil})...)
	}
	if t.hasText {
		delta(head(ordered{{"content", ""}}), nil)
		for _, p := range words(t.text) {
			delta(ordered{{"content", p}}, nil)
		}
	}
	for i, c := range t.calls {
		start := chatToolCall(req, c)
		tc := append(ordered{{"index", i}}, start...)
		if str(start[1].v) == "function" {
			// The arguments follow in pieces, as the real stream sends them.
			tc[3] = field{"function", ordered{{"name", c.name}, {"arguments", ""}}}
		}
		d := ordered{{"tool_calls", []any{tc}}}
		if first {
			d = head(append(ordered{{"content", nil}}, d...))
		}
		delta(d, nil)
		if str(start[1].v) != "function" {
			continue
		}
		for _, p := range pieces(c.text, 8) {
			delta(ordered{{"tool_calls", []any{ordered{{"index", i}, {"function", ordered{{"arguments", p}}}}}}}, nil)
		}
	}
	if first {
		delta(head(ordered{{"content", ""}}), nil) // an empty answer still says who speaks
	}
	delta(ordered{}, t.finish)
	if includeUsage {
		chunk([]any{}, t.usage, "usage")
	}
	_, _ = fmt.Fprint(w, "data: [DONE]\n\n")
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// chatToolCall is a tool call as a chat message carries it: a function
// call, or a custom call when the request declared the tool as custom.
// Its fields are id, type, then the call.
func chatToolCall(req *Request, c resolved) ordered {
	if c.kind == outCustom && !c.asFunction && declaredAs(req, c.name) == "custom" {
		return ordered{{"id", c.callID}, {"type", "custom"}, {"custom", ordered{{"name", c.name}, {"input", c.text}}}}
	}
	return ordered{{"id", c.callID}, {"type", "function"}, {"function", ordered{{"name", c.name}, {"arguments", c.text}}}}
}
