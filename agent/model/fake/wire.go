package fake

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// writeError writes OpenAI's error object. Empty param and code are null,
// as in OpenAI's replies.
func writeError(w http.ResponseWriter, status int, typ, param, code, message string) {
	nullable := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	body, _ := json.Marshal(map[string]any{"error": map[string]any{
		"message": message,
		"type":    typ,
		"param":   nullable(param),
		"code":    nullable(code),
	}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// errorType is the "type" OpenAI gives an error of this status.
func errorType(status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return "requests"
	case status >= 500:
		return "server_error"
	default:
		return "invalid_request_error"
	}
}

// defaultCode is the "code" OpenAI gives an error of this status (none
// for most).
func defaultCode(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return "invalid_api_key"
	case http.StatusNotFound:
		return "model_not_found"
	case http.StatusTooManyRequests:
		return "rate_limit_exceeded"
	}
	return ""
}

func readAll(r *http.Request) ([]byte, error) {
	defer r.Body.Close()
	return io.ReadAll(r.Body)
}

// obj and list read the loosely typed parsed JSON without panicking on a
// body of the wrong shape.
func obj(v any) map[string]any { m, _ := v.(map[string]any); return m }
func list(v any) []any         { l, _ := v.([]any); return l }
func str(v any) string         { s, _ := v.(string); return s }

// toolName is the name of a declared tool in either API's form.
func toolName(t map[string]any) string {
	if n := str(t["name"]); n != "" {
		return n // Responses: {"type": "function", "name": ...}
	}
	if f := obj(t["function"]); f != nil {
		return str(f["name"]) // Chat: {"type": "function", "function": {"name": ...}}
	}
	return str(obj(t["custom"])["name"]) // Chat: {"type": "custom", "custom": {"name": ...}}
}

// declaredAs is the type ("function" or "custom") under which the request
// declared the tool name, or "" when it did not declare it.
func declaredAs(r *Request, name string) string {
	for _, t := range list(r.Body["tools"]) {
		m := obj(t)
		if toolName(m) == name {
			return str(m["type"])
		}
	}
	return ""
}

// contentText is the text of message or tool-output content: a string, or
// the text parts of a content array.
func contentText(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	var b strings.Builder
	for _, p := range list(v) {
		b.WriteString(str(obj(p)["text"]))
	}
	return b.String()
}

// apiError is a 400 the real API would send.
type apiError struct {
	param, code, message string
}

// validate checks what the real API checks about the conversation before
// any model runs, with its messages, so a fake run fails where a real one
// would.
func validate(r *Request) *apiError {
	if r.Model() == "" {
		if r.API == "chat" {
			return &apiError{message: "you must provide a model parameter"}
		}
		return &apiError{param: "model", code: "missing_required_parameter", message: "Missing required parameter: 'model'."}
	}
	if r.API == "chat" {
		return validateChat(r)
	}
	return validateResponses(r)
}

func validateResponses(r *Request) *apiError {
	calls := map[string]bool{}   // call ids of tool calls in the input
	answers := map[string]bool{} // call ids that have an output
	store, stored := r.Body["store"].(bool)
	for i, it := range r.items() {
		m := obj(it)
		switch str(m["type"]) {
		case "function_call", "custom_tool_call":
			calls[str(m["call_id"])] = true
		case "function_call_output", "custom_tool_call_output":
			id := str(m["call_id"])
			if !calls[id] {
				return &apiError{param: fmt.Sprintf("input[%d]", i),
					message: fmt.Sprintf("No tool call found for function call output with call_id %s.", id)}
			}
			answers[id] = true
		case "reasoning":
			// Without store the API keeps nothing, so a reasoning item
			// can only come back with its encrypted content.
			if stored && !store && str(m["encrypted_content"]) == "" {
				return &apiError{param: fmt.Sprintf("input[%d]", i), message: fmt.Sprintf(
					"Item with id '%s' not found. Items are not persisted when `store` is set to false. Try again with `store` set to true, or remove this item from your input.",
					str(m["id"]))}
			}
		}
	}
	for _, it := range r.items() {
		m := obj(it)
		if t := str(m["type"]); (t == "function_call" || t == "custom_tool_call") && !answers[str(m["call_id"])] {
			return &apiError{param: "input", message: fmt.Sprintf("No tool output found for function call %s.", str(m["call_id"]))}
		}
	}
	return nil
}

func validateChat(r *Request) *apiError {
	msgs := r.items()
	if len(msgs) == 0 {
		return &apiError{param: "messages", message: "[] is too short - 'messages'"}
	}
	var open []string // call ids of the last assistant message still unanswered
	answered := map[string]bool{}
	for i, it := range msgs {
		m := obj(it)
		role := str(m["role"])
		if role != "tool" && len(open) > 0 {
			var missing []string
			for _, id := range open {
				if !answered[id] {
					missing = append(missing, id)
				}
			}
			if len(missing) > 0 {
				return &apiError{param: "messages", message: "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: " + strings.Join(missing, ", ")}
			}
			open = nil
		}
		switch role {
		case "assistant":
			for _, c := range list(m["tool_calls"]) {
				open = append(open, str(obj(c)["id"]))
			}
		case "tool":
			id := str(m["tool_call_id"])
			found := false
			for _, o := range open {
				found = found || o == id
			}
			if !found {
				return &apiError{param: fmt.Sprintf("messages.[%d].role", i),
					message: "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'."}
			}
			answered[id] = true
		}
		if role != "user" {
			for _, p := range list(m["content"]) {
				if str(obj(p)["type"]) == "image_url" {
					return &apiError{param: fmt.Sprintf("messages.[%d].content", i), message: fmt.Sprintf(
						"Invalid 'messages[%d]'. Image URLs are only allowed for messages with role 'user', but this message with role '%s' contains an image URL.", i, role)}
				}
			}
		}
	}
	// A conversation may end on an assistant message that still waits for
	// its tool messages only if nothing follows; the API refuses that too.
	for _, id := range open {
		if !answered[id] {
			return &apiError{param: "messages", message: "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: " + id}
		}
	}
	return nil
}

// sse writes one server-sent event and flushes it, so the client sees
// each event as it is written.
func sse(w http.ResponseWriter, event string, data any) {
	b, _ := json.Marshal(data)
	if event != "" {
		fmt.Fprintf(w, "event: %s\n", event)
	}
	fmt.Fprintf(w, "data: %s\n\n", b)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

func startStream(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
}

func writeJSON(w http.ResponseWriter, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(b, '\n'))
}

// words splits text into the pieces a model streams: each piece starts at
// a space, as tokens do ("Current", " weather", " in").
func words(s string) []string {
	var out []string
	for len(s) > 0 {
		i := strings.IndexByte(s[1:], ' ')
		if i < 0 {
			out = append(out, s)
			break
		}
		out = append(out, s[:i+1])
		s = s[i+1:]
	}
	return out
}

// pieces splits s into chunks of about n bytes without cutting a UTF-8
// character, as argument deltas arrive.
func pieces(s string, n int) []string {
	var out []string
	for len(s) > n {
		i := n
		for i < len(s) && !isRuneStart(s[i]) {
			i++
		}
		out = append(out, s[:i])
		s = s[i:]
	}
	if s != "" {
		out = append(out, s)
	}
	return out
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// obfuscation pads a delta event as api.openai.com does (its
// "obfuscation" field evens out event sizes); clients ignore it.
func obfuscation(delta string) string {
	const pad = "fakeobfuscation"
	n := (16 - len(delta)%16) % 16
	return pad[:min(n, len(pad))]
}
