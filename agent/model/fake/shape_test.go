package fake_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cove-sandbox/cove/agent/model/fake"
)

// The fake's bodies must have the fields of the recorded ones
// (testdata/README.md says where those come from): same keys at the same
// places, same event names in the same order. Values are not compared.

// echoed are fields the API copies from the request; below them the shape
// is the request's, not the API's.
var echoed = []string{"tools", "metadata", "text.format"}

// paths lists the key paths of a JSON value ("output[].content[].text").
// Array elements share one path; null and scalars are leaves.
func paths(v any, prefix string, out map[string]bool) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			out[p] = true
			if !slices.ContainsFunc(echoed, func(s string) bool { return strings.HasSuffix(p, s) }) {
				paths(e, p, out)
			}
		}
	case []any:
		for _, e := range v {
			paths(e, prefix+"[]", out)
		}
	}
}

func shape(t *testing.T, data []byte) []string {
	t.Helper()
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, data)
	}
	set := map[string]bool{}
	paths(v, "", set)
	var keys []string
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

type event struct {
	name string // the SSE event name, or the body's "type"
	data []byte
}

// events reads a server-sent event stream; [DONE] is left out.
func events(t *testing.T, r io.Reader) []event {
	t.Helper()
	var out []event
	var name string
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data := strings.TrimPrefix(line, "data: ")
			if data != "[DONE]" {
				out = append(out, event{name, []byte(data)})
			}
			name = ""
		}
	}
	return out
}

func post(t *testing.T, srv *fake.Server, path string, body any) *http.Response {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(srv.URL+path, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var execTool = map[string]any{"type": "function", "name": "exec_command", "description": "Run a shell command.",
	"parameters": map[string]any{"type": "object"}, "strict": false}

func TestShapeJSON(t *testing.T) {
	tests := []struct {
		fixture, path string
		turn          fake.Turn
		body          map[string]any
	}{
		{"responses.json", "/responses", fake.Text("hi"),
			map[string]any{"model": "gpt-5.1", "input": "hi", "instructions": "x", "store": false}},
		{"chat.json", "/chat/completions", fake.Text("hi"),
			map[string]any{"model": "gpt-4.1", "messages": []any{map[string]any{"role": "user", "content": "hi"}}}},
		{"chat_tool_calls.json", "/chat/completions", fake.Call("exec_command", `{"cmd":"ls"}`),
			map[string]any{"model": "gpt-4o", "messages": []any{map[string]any{"role": "user", "content": "hi"}}}},
		{"error_rate_limit.json", "/responses", fake.Error(429, "slow down"), map[string]any{"model": "m"}},
		{"error_server_error.json", "/responses", fake.Error(500, "boom"), map[string]any{"model": "m"}},
		{"error_invalid_api_key.json", "/chat/completions", fake.Error(401, "bad key"),
			map[string]any{"model": "m", "messages": []any{map[string]any{"role": "user", "content": "hi"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.fixture, func(t *testing.T) {
			srv := fake.NewServer(t, tt.turn)
			got, err := io.ReadAll(post(t, srv, tt.path, tt.body).Body)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(shape(t, fixture(t, tt.fixture)), shape(t, got)); diff != "" {
				t.Errorf("fields (-recorded +fake):\n%s\nfake body: %s", diff, got)
			}
		})
	}
}

func TestShapeStream(t *testing.T) {
	tests := []struct {
		fixture, path string
		turn          fake.Turn
		body          map[string]any
	}{
		{"responses_text.sse", "/responses", fake.Text("All good."),
			map[string]any{"model": "gpt-5", "input": "hi", "stream": true}},
		{"responses_function_call.sse", "/responses", fake.Reply(fake.Reasoning(""), fake.Call("exec_command", `{"cmd": "ls -la"}`)),
			map[string]any{"model": "gpt-5", "input": "hi", "stream": true, "tools": []any{execTool}}},
		{"responses_custom_tool_call.sse", "/responses", fake.Custom("apply_patch", "*** Begin Patch\n*** End Patch\n"),
			map[string]any{"model": "gpt-5", "input": "hi", "stream": true,
				"tools": []any{map[string]any{"type": "custom", "name": "apply_patch"}}}},
		{"chat_text.sse", "/chat/completions", fake.Text("All good."),
			map[string]any{"model": "gpt-5-nano", "stream": true, "stream_options": map[string]any{"include_usage": true},
				"messages": []any{map[string]any{"role": "user", "content": "hi"}}}},
		{"chat_tool_calls.sse", "/chat/completions", fake.Call("exec_command", `{"cmd":"ls -la"}`),
			map[string]any{"model": "gpt-4o", "stream": true, "messages": []any{map[string]any{"role": "user", "content": "hi"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.fixture, func(t *testing.T) {
			srv := fake.NewServer(t, tt.turn)
			resp := post(t, srv, tt.path, tt.body)
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
				t.Errorf("Content-Type = %q", ct)
			}
			got := events(t, resp.Body)
			want := events(t, bytes.NewReader(fixture(t, tt.fixture)))
			// The order of events, runs of deltas counted once.
			if diff := cmp.Diff(sequence(t, want), sequence(t, got)); diff != "" {
				t.Errorf("event sequence (-recorded +fake):\n%s", diff)
			}
			// Each kind of event has the recorded fields. Chat chunks have
			// no type: their shapes as a set must match.
			wantShapes, gotShapes := shapes(t, want), shapes(t, got)
			if diff := cmp.Diff(wantShapes, gotShapes); diff != "" {
				t.Errorf("event fields (-recorded +fake):\n%s", diff)
			}
		})
	}
}

// sequence is the events' names (or a chat chunk's kind) with runs
// collapsed.
func sequence(t *testing.T, evs []event) []string {
	var out []string
	for _, e := range evs {
		n := e.name
		if n == "" {
			n = chunkKind(t, e.data)
		}
		if len(out) == 0 || out[len(out)-1] != n {
			out = append(out, n)
		}
	}
	return out
}

// chunkKind names a chat chunk by what its delta carries.
func chunkKind(t *testing.T, data []byte) string {
	var c struct {
		Choices []struct {
			Delta        map[string]any `json:"delta"`
			FinishReason *string        `json:"finish_reason"`
		} `json:"choices"`
		Usage any `json:"usage"`
	}
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	switch {
	case len(c.Choices) == 0:
		return "usage"
	case c.Choices[0].FinishReason != nil:
		return "finish"
	case c.Choices[0].Delta["role"] != nil:
		return "role"
	case c.Choices[0].Delta["tool_calls"] != nil:
		return "tool_calls"
	default:
		return "content"
	}
}

func shapes(t *testing.T, evs []event) map[string]string {
	out := map[string]string{}
	for _, e := range evs {
		n := e.name
		if n == "" {
			n = chunkKind(t, e.data)
		}
		s := strings.Join(shape(t, e.data), " ")
		if n == "tool_calls" && strings.Contains(s, ".id") {
			n = "tool_calls start" // the first chunk of a call names it
		}
		out[n] = s
	}
	return out
}
