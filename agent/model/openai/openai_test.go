package openai_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cove-sandbox/cove/agent"
	"github.com/cove-sandbox/cove/agent/model/fake"
	"github.com/cove-sandbox/cove/agent/model/openai"
)

var apis = []openai.API{openai.Responses, openai.Chat}

// newModel is a model at srv with backoffs short enough for tests.
func newModel(t *testing.T, srv *fake.Server, api openai.API, edit ...func(*openai.Config)) *openai.Model {
	t.Helper()
	cfg := openai.Config{
		Model:          "gpt-5.1",
		APIKey:         "sk-test",
		BaseURL:        srv.URL,
		API:            api,
		RetryBaseDelay: time.Millisecond,
		RetryMaxDelay:  5 * time.Millisecond,
	}
	for _, e := range edit {
		e(&cfg)
	}
	m, err := openai.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

var (
	execTool  = agent.ToolSpec{Name: "exec_command", Description: "Run a command.", Parameters: map[string]any{"type": "object", "properties": map[string]any{"cmd": map[string]any{"type": "string"}}}}
	patchTool = agent.ToolSpec{Name: "apply_patch", Description: "Edit files.", Grammar: "start: /(.|\\n)+/"}
)

func request(items ...agent.Item) agent.ModelRequest {
	return agent.ModelRequest{Instructions: "You are a test.", Input: items, Tools: []agent.ToolSpec{execTool, patchTool}}
}

// collector gathers streamed text; it is what a Runner passes as delta.
type collector struct {
	mu     sync.Mutex
	deltas []string
}

func (c *collector) add(s string) { c.mu.Lock(); c.deltas = append(c.deltas, s); c.mu.Unlock() }

func TestStreamingText(t *testing.T) {
	for _, api := range apis {
		t.Run(string(api), func(t *testing.T) {
			srv := fake.NewServer(t, fake.Text("three small words").WithUsage(fake.Usage{InputTokens: 30, CachedTokens: 10, OutputTokens: 4, ReasoningTokens: 1}))
			m := newModel(t, srv, api)
			var c collector
			resp, err := m.Respond(context.Background(), request(agent.UserMessage("hi")), c.add)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]string{"three", " small", " words"}, c.deltas); diff != "" {
				t.Errorf("deltas (-want +got):\n%s", diff)
			}
			if len(resp.Output) != 1 || agent.Text(resp.Output[0].Content) != "three small words" || resp.Output[0].Role != agent.RoleAssistant {
				t.Errorf("output = %+v", resp.Output)
			}
			want := agent.Usage{Requests: 1, InputTokens: 30, CachedInputTokens: 10, OutputTokens: 4, ReasoningTokens: 1}
			if diff := cmp.Diff(want, resp.Usage); diff != "" {
				t.Errorf("usage (-want +got):\n%s", diff)
			}
			r := srv.Requests()[0]
			if !r.Stream() || r.Header.Get("Authorization") != "Bearer sk-test" || r.Model() != "gpt-5.1" {
				t.Errorf("request: stream %v, auth %q, model %q", r.Stream(), r.Header.Get("Authorization"), r.Model())
			}
			switch api {
			case openai.Responses:
				if r.Body["store"] != false || r.Body["instructions"] != "You are a test." {
					t.Errorf("store %v, instructions %v", r.Body["store"], r.Body["instructions"])
				}
				if inc, _ := json.Marshal(r.Body["include"]); string(inc) != `["reasoning.encrypted_content"]` {
					t.Errorf("include = %s, want the encrypted reasoning for a reasoning model", inc)
				}
			case openai.Chat:
				if inc, _ := json.Marshal(r.Body["stream_options"]); string(inc) != `{"include_usage":true}` {
					t.Errorf("stream_options = %s", inc)
				}
				first, _ := json.Marshal(r.Body["messages"].([]any)[0])
				if string(first) != `{"content":"You are a test.","role":"system"}` {
					t.Errorf("first message = %s, want the instructions as system message", first)
				}
			}
		})
	}
}

func TestTools(t *testing.T) {
	for _, api := range apis {
		t.Run(string(api), func(t *testing.T) {
			srv := fake.NewServer(t, fake.Text("ok"))
			m := newModel(t, srv, api)
			req := request(agent.UserMessage("hi"))
			req.Tools[0].Strict = true
			if _, err := m.Respond(context.Background(), req, nil); err != nil {
				t.Fatal(err)
			}
			tools, _ := json.Marshal(srv.Requests()[0].Body["tools"])
			var want string
			if api == openai.Responses {
				want = `[{"description":"Run a command.","name":"exec_command","parameters":{"properties":{"cmd":{"type":"string"}},"type":"object"},"strict":true,"type":"function"},` +
					`{"description":"Edit files.","format":{"definition":"start: /(.|\\n)+/","syntax":"lark","type":"grammar"},"name":"apply_patch","type":"custom"}]`
			} else {
				want = `[{"function":{"description":"Run a command.","name":"exec_command","parameters":{"properties":{"cmd":{"type":"string"}},"type":"object"},"strict":true},"type":"function"},` +
					`{"function":{"description":"Edit files.","name":"apply_patch","parameters":{"additionalProperties":false,"properties":{"input":{"description":"The raw input. It must match this Lark grammar:\nstart: /(.|\\n)+/","type":"string"}},"required":["input"],"type":"object"}},"type":"function"}]`
			}
			if string(tools) != want {
				t.Errorf("tools =\n%s\nwant\n%s", tools, want)
			}
		})
	}
}

// TestToolRoundTrip runs two turns the way a Runner does: the model calls
// a function and a custom tool, the outputs go back with the model's own
// items, and the fake checks they arrived before answering.
func TestToolRoundTrip(t *testing.T) {
	for _, api := range apis {
		for _, stream := range []bool{false, true} {
			t.Run(string(api)+map[bool]string{false: "/json", true: "/stream"}[stream], func(t *testing.T) {
				srv := fake.NewServer(t,
					fake.Reply(fake.Reasoning("plan"), fake.Text("Looking."), fake.Call("exec_command", `{"cmd":"ls"}`), fake.Custom("apply_patch", "*** Begin Patch\n*** End Patch\n")),
					fake.Func(func(r *fake.Request) fake.Turn {
						ls, ok1 := r.ToolOutput("call_1")
						patch, ok2 := r.ToolOutput("call_2")
						if !ok1 || !ok2 {
							return fake.Error(400, "tool outputs missing")
						}
						return fake.Text(ls + "|" + patch)
					}),
				)
				m := newModel(t, srv, api)
				var delta func(string)
				if stream {
					delta = func(string) {}
				}
				ctx := context.Background()
				conv := []agent.Item{agent.UserMessage("list and patch")}
				resp, err := m.Respond(ctx, request(conv...), delta)
				if err != nil {
					t.Fatal(err)
				}
				var calls []agent.Item
				for _, it := range resp.Output {
					if it.Type == agent.ItemToolCall {
						calls = append(calls, it)
					}
				}
				wantCalls := []agent.Item{
					{Type: agent.ItemToolCall, CallID: "call_1", Name: "exec_command", Arguments: `{"cmd":"ls"}`},
					{Type: agent.ItemToolCall, CallID: "call_2", Name: "apply_patch", Arguments: "*** Begin Patch\n*** End Patch\n", Custom: true},
				}
				if diff := cmp.Diff(wantCalls, calls, ignoreID); diff != "" {
					t.Errorf("calls (-want +got):\n%s", diff)
				}
				if api == openai.Responses && (resp.Output[0].Type != agent.ItemReasoning || !strings.Contains(string(resp.Output[0].Raw), "encrypted_content")) {
					t.Errorf("first item = %+v, want the reasoning item with its raw JSON", resp.Output[0])
				}

				conv = append(conv, resp.Output...)
				conv = append(conv,
					agent.Item{Type: agent.ItemToolOutput, CallID: "call_1", Name: "exec_command", Output: []agent.Content{{Type: agent.ContentText, Text: "a.txt"}}},
					agent.Item{Type: agent.ItemToolOutput, CallID: "call_2", Name: "apply_patch", Custom: true, Output: []agent.Content{{Type: agent.ContentText, Text: "patched"}}},
				)
				resp, err = m.Respond(ctx, request(conv...), delta)
				if err != nil {
					t.Fatal(err)
				}
				if got := agent.Text(resp.Output[0].Content); got != "a.txt|patched" {
					t.Errorf("answer = %q, want both tool outputs seen", got)
				}

				body := srv.Requests()[1].Body
				items, _ := json.Marshal(body[map[openai.API]string{openai.Responses: "input", openai.Chat: "messages"}[api]])
				if api == openai.Responses {
					for _, want := range []string{`"type":"reasoning"`, `"encrypted_content":"enc_`, `"type":"custom_tool_call_output"`, `"input":"*** Begin Patch\n*** End Patch\n"`} {
						if !strings.Contains(string(items), want) {
							t.Errorf("input lacks %s:\n%s", want, items)
						}
					}
					if strings.Contains(string(items), `"id":"fc_`) || strings.Contains(string(items), `"id":"msg_`) {
						t.Errorf("input sends back item ids the API did not store:\n%s", items)
					}
				} else if !strings.Contains(string(items), `"arguments":"{\"input\":\"*** Begin Patch\\n*** End Patch\\n\"}"`) {
					t.Errorf("the custom call did not go back wrapped in {\"input\"}:\n%s", items)
				}
			})
		}
	}
}

var ignoreID = cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".ID" }, cmp.Ignore())

func TestImagesInToolOutputs(t *testing.T) {
	const png = "data:image/png;base64,iVBORw0KGgo="
	conv := []agent.Item{
		agent.UserMessage("show me"),
		{Type: agent.ItemToolCall, CallID: "call_1", Name: "view_image", Arguments: `{"path":"a.png"}`},
		{Type: agent.ItemToolCall, CallID: "call_2", Name: "exec_command", Arguments: `{"cmd":"ls"}`},
		{Type: agent.ItemToolOutput, CallID: "call_1", Name: "view_image", Output: []agent.Content{{Type: agent.ContentImage, ImageURL: png}}},
		{Type: agent.ItemToolOutput, CallID: "call_2", Name: "exec_command", Output: []agent.Content{{Type: agent.ContentText, Text: "a.png"}}},
	}
	for _, api := range apis {
		t.Run(string(api), func(t *testing.T) {
			srv := fake.NewServer(t, fake.Text("a cat"))
			m := newModel(t, srv, api)
			if _, err := m.Respond(context.Background(), request(conv...), nil); err != nil {
				t.Fatal(err) // the fake refuses images where the real API does
			}
			body := srv.Requests()[0].Body
			if api == openai.Responses {
				out, _ := json.Marshal(body["input"].([]any)[3])
				want := `{"call_id":"call_1","output":[{"detail":"auto","image_url":"` + png + `","type":"input_image"}],"type":"function_call_output"}`
				if string(out) != want {
					t.Errorf("image output =\n%s\nwant\n%s", out, want)
				}
				return
			}
			var roles []string
			for _, msg := range body["messages"].([]any) {
				roles = append(roles, msg.(map[string]any)["role"].(string))
			}
			if diff := cmp.Diff([]string{"system", "user", "assistant", "tool", "tool", "user"}, roles); diff != "" {
				t.Errorf("roles (-want +got):\n%s", diff)
			}
			last, _ := json.Marshal(body["messages"].([]any)[5])
			if !strings.Contains(string(last), `"url":"`+png+`"`) || !strings.Contains(string(last), "call_1") {
				t.Errorf("image message = %s", last)
			}
		})
	}
}

func TestRetryAfter(t *testing.T) {
	tests := []struct {
		name string
		turn fake.Turn
		wait time.Duration
	}{
		{"Retry-After seconds", fake.Error(429, "Rate limit reached").RetryAfter(time.Second), time.Second},
		{"retry-after-ms", fake.Error(429, "Rate limit reached").WithHeader("retry-after-ms", "300"), 300 * time.Millisecond},
		{"503 with Retry-After", fake.Error(503, "overloaded").RetryAfter(time.Second), time.Second},
	}
	for _, tt := range tests {
		for _, api := range apis {
			t.Run(tt.name+"/"+string(api), func(t *testing.T) {
				t.Parallel()
				srv := fake.NewServer(t, tt.turn, fake.Text("made it"))
				m := newModel(t, srv, api)
				start := time.Now()
				resp, err := m.Respond(context.Background(), request(agent.UserMessage("hi")), nil)
				if err != nil {
					t.Fatal(err)
				}
				if got := time.Since(start); got < tt.wait {
					t.Errorf("retried after %v, before the %v the server asked for", got, tt.wait)
				}
				if n := len(srv.Requests()); n != 2 || agent.Text(resp.Output[0].Content) != "made it" {
					t.Errorf("%d requests, answer %+v; want 2 and the second turn's answer", n, resp.Output)
				}
				if resp.Usage.Requests != 1 {
					t.Errorf("Usage.Requests = %d, want 1 (a retried call is one request)", resp.Usage.Requests)
				}
			})
		}
	}
}

func TestGivesUp(t *testing.T) {
	for _, api := range apis {
		t.Run(string(api), func(t *testing.T) {
			srv := fake.NewServer(t, fake.Error(500, "The server had an error while processing your request.").Forever())
			m := newModel(t, srv, api, func(c *openai.Config) { c.MaxRetries = 2 })
			_, err := m.Respond(context.Background(), request(agent.UserMessage("hi")), func(string) {})
			var re *openai.RequestError
			if !errors.As(err, &re) || re.StatusCode != 500 || re.Attempts != 3 {
				t.Fatalf("error = %v, want a RequestError for HTTP 500 after 3 attempts", err)
			}
			want := `calling model "gpt-5.1": HTTP 500 Internal Server Error: The server had an error while processing your request. (after 3 attempts)`
			if err.Error() != want {
				t.Errorf("error =\n%s\nwant\n%s", err, want)
			}
			if n := len(srv.Requests()); n != 3 {
				t.Errorf("%d requests, want 3", n)
			}
		})
	}
}

// TestFinalAtOnce: failures that waiting cannot fix are not retried.
func TestFinalAtOnce(t *testing.T) {
	tests := []struct {
		name string
		turn fake.Turn
		want []string
	}{
		{"bad request", fake.Error(400, "Invalid value for 'temperature'."), []string{"HTTP 400 Bad Request: Invalid value for 'temperature'."}},
		{"bad key", fake.Error(401, "Incorrect API key provided: sk-test."), []string{"HTTP 401", "Incorrect API key provided", "check the API key"}},
		{"unknown model", fake.Error(404, "The model `gpt-9` does not exist or you do not have access to it."), []string{"HTTP 404", "does not exist", "(model_not_found)", "check the model name"}},
		{"quota", fake.Error(429, "You exceeded your current quota, please check your plan and billing details.").WithCode("insufficient_quota"), []string{"HTTP 429", "exceeded your current quota", "(insufficient_quota)"}},
		{"retry-after too long", fake.Error(429, "Rate limit reached for requests per day.").RetryAfter(time.Hour), []string{"HTTP 429", "asks to retry in 1h0m0s, longer than Cove waits"}},
		{"x-should-retry false", fake.Error(500, "do not retry").WithHeader("x-should-retry", "false"), []string{"HTTP 500", "do not retry"}},
		{"ollama error body", fake.Raw(404, "application/json", `{"error":"model \"llama9\" not found, try pulling it first"}`), []string{"HTTP 404", `model "llama9" not found, try pulling it first`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := fake.NewServer(t, tt.turn, fake.Text("unreachable"))
			m := newModel(t, srv, openai.Chat)
			_, err := m.Respond(context.Background(), request(agent.UserMessage("hi")), nil)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if n := len(srv.Requests()); n != 1 {
				t.Errorf("%d requests, want 1: this failure is final", n)
			}
		})
	}
}

func TestBadKeyAtOpenAI(t *testing.T) {
	// A 401 from OpenAI itself names the variable to fix. The fake plays
	// OpenAI here through a client that dials it for api.openai.com.
	srv := fake.NewServer(t, fake.Error(401, "Incorrect API key provided: sk-bad."))
	m := newModel(t, srv, openai.Responses, func(c *openai.Config) {
		c.BaseURL = "http://api.openai.com/v1"
		c.HTTPClient = redirectTo(srv)
	})
	_, err := m.Respond(context.Background(), request(agent.UserMessage("hi")), nil)
	if err == nil || !strings.HasSuffix(err.Error(), "; check OPENAI_API_KEY") {
		t.Errorf("error = %v, want it to end with a hint about OPENAI_API_KEY", err)
	}
}

func TestNetwork(t *testing.T) {
	t.Run("unreachable", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		url := "http://" + l.Addr().String() + "/v1"
		l.Close() // nothing listens there now
		m, err := openai.New(openai.Config{Model: "llama3", BaseURL: url, RetryBaseDelay: time.Millisecond, MaxRetries: 2})
		if err != nil {
			t.Fatal(err)
		}
		_, err = m.Respond(context.Background(), request(agent.UserMessage("hi")), nil)
		if err == nil || !strings.HasPrefix(err.Error(), "cannot reach the model at "+url+" (after 3 attempts): ") || !strings.HasSuffix(err.Error(), "; check --base-url") {
			t.Errorf("error = %v, want cannot reach the model at %s ...; check --base-url", err, url)
		}
	})
	t.Run("dropped then answered", func(t *testing.T) {
		for _, api := range apis {
			srv := fake.NewServer(t, fake.Drop(), fake.Drop(), fake.Text("back"))
			m := newModel(t, srv, api)
			resp, err := m.Respond(context.Background(), request(agent.UserMessage("hi")), func(string) {})
			if err != nil {
				t.Fatalf("%s: %v", api, err)
			}
			if agent.Text(resp.Output[0].Content) != "back" {
				t.Errorf("%s: output %+v", api, resp.Output)
			}
		}
	})
}

func TestCancel(t *testing.T) {
	tests := []struct {
		name string
		turn fake.Turn
	}{
		{"in flight", fake.Text("too late").WithDelay(time.Minute)},
		{"while waiting to retry", fake.Error(429, "slow down").RetryAfter(90 * time.Second)},
	}
	for _, tt := range tests {
		for _, api := range apis {
			t.Run(tt.name+"/"+string(api), func(t *testing.T) {
				srv := fake.NewServer(t, tt.turn, fake.Text("unused"))
				m := newModel(t, srv, api)
				ctx, cancel := context.WithCancel(context.Background())
				time.AfterFunc(50*time.Millisecond, cancel)
				start := time.Now()
				_, err := m.Respond(ctx, request(agent.UserMessage("hi")), func(string) {})
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("error = %v, want context.Canceled", err)
				}
				if d := time.Since(start); d > 5*time.Second {
					t.Errorf("cancel took %v", d)
				}
			})
		}
	}
}

func TestMalformed(t *testing.T) {
	delta := `event: response.output_text.delta
data: {"type":"response.output_text.delta","sequence_number":0,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hel","logprobs":[]}

`
	tests := []struct {
		name   string
		api    openai.API
		stream bool
		turn   fake.Turn
		want   string
		tries  int
	}{
		{"responses json", openai.Responses, false, fake.Raw(200, "application/json", "{not json"), "not in OpenAI's format", 1},
		{"chat json", openai.Chat, false, fake.Raw(200, "application/json", "{not json"), "not in OpenAI's format", 1},
		{"chat no choices", openai.Chat, false, fake.Raw(200, "application/json", `{"id":"x","object":"chat.completion","choices":[]}`), "has no choices", 1},
		{"responses stream", openai.Responses, true, fake.Raw(200, "text/event-stream", "data: {oops\n\n"), "not in OpenAI's format", 1},
		{"chat stream", openai.Chat, true, fake.Raw(200, "text/event-stream", "data: {oops\n\n"), "not in OpenAI's format", 1},
		{"proxy page", openai.Chat, false, fake.Raw(502, "text/html", "<html><body>502 Bad Gateway</body></html>").Forever(), "HTTP 502 Bad Gateway: <html><body>502 Bad Gateway</body></html> (after 4 attempts)", 4},
		// Text went to the caller before the stream broke: a retry would
		// show it twice, so the failure is final.
		{"stream cut after text", openai.Responses, true, fake.Raw(200, "text/event-stream", delta).Forever(), `calling model "gpt-5.1" at http://127.0.0.1:`, 1},
		{"responses cut short", openai.Responses, false, fake.Raw(200, "application/json", `{"id":"resp_1","object":"response","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"output":[]}`),
			"the model failed: the reply was cut short: max_output_tokens", 1},
		{"chat cut short", openai.Chat, true, fake.Raw(200, "text/event-stream", `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":"length"}]}`+"\n\n"),
			"the model failed: the reply was cut short: length", 1},
		{"stream error event", openai.Chat, true, fake.Raw(200, "text/event-stream", `data: {"error":{"message":"context length exceeded","type":"invalid_request_error","code":"context_length_exceeded"}}`+"\n\n"), "the model failed: context length exceeded (context_length_exceeded)", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := fake.NewServer(t, tt.turn)
			m := newModel(t, srv, tt.api)
			var c collector
			delta := c.add
			if !tt.stream {
				delta = nil
			}
			_, err := m.Respond(context.Background(), request(agent.UserMessage("hi")), delta)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v, want it to say %q", err, tt.want)
			}
			if n := len(srv.Requests()); n != tt.tries {
				t.Errorf("%d requests, want %d", n, tt.tries)
			}
		})
	}
}

func TestSettings(t *testing.T) {
	temp, topP, par := 0.2, 0.9, false
	settings := agent.ModelSettings{Temperature: &temp, TopP: &topP, MaxOutputTokens: 500, ToolChoice: "apply_patch", ParallelToolCalls: &par, ReasoningEffort: "low"}
	tests := []struct {
		api     openai.API
		baseURL string
		want    map[string]string
	}{
		{openai.Responses, "", map[string]string{
			"temperature": "0.2", "top_p": "0.9", "max_output_tokens": "500", "parallel_tool_calls": "false",
			"tool_choice": `{"name":"apply_patch","type":"custom"}`, "reasoning": `{"effort":"low"}`,
		}},
		{openai.Chat, "", map[string]string{
			"temperature": "0.2", "top_p": "0.9", "max_tokens": "500", "parallel_tool_calls": "false",
			"tool_choice": `{"function":{"name":"apply_patch"},"type":"function"}`, "reasoning_effort": `"low"`,
		}},
	}
	for _, tt := range tests {
		t.Run(string(tt.api), func(t *testing.T) {
			srv := fake.NewServer(t, fake.Text("ok"))
			m := newModel(t, srv, tt.api)
			req := request(agent.UserMessage("hi"))
			req.Settings = settings
			if _, err := m.Respond(context.Background(), req, nil); err != nil {
				t.Fatal(err)
			}
			body := srv.Requests()[0].Body
			for k, want := range tt.want {
				got, _ := json.Marshal(body[k])
				if string(got) != want {
					t.Errorf("%s = %s, want %s", k, got, want)
				}
			}
		})
	}
}

func TestNew(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		cfg     openai.Config
		wantErr string
		api     openai.API
		model   string
		url     string
	}{
		{name: "no key for OpenAI", wantErr: "OPENAI_API_KEY is not set: export it, or pass --base-url for an OpenAI-compatible server"},
		{name: "key from env", env: map[string]string{"OPENAI_API_KEY": "sk-env"}, api: openai.Responses, model: "gpt-5.1", url: "https://api.openai.com/v1"},
		{name: "other server needs no key", cfg: openai.Config{BaseURL: "http://localhost:11434/v1/", Model: "llama3.2"}, api: openai.Chat, model: "llama3.2", url: "http://localhost:11434/v1"},
		{name: "base URL from env", env: map[string]string{"OPENAI_BASE_URL": "http://localhost:8000/v1"}, cfg: openai.Config{Model: "qwen"}, api: openai.Chat, model: "qwen", url: "http://localhost:8000/v1"},
		{name: "responses at another server", cfg: openai.Config{BaseURL: "http://localhost:8000/v1", Model: "qwen", API: openai.Responses}, api: openai.Responses, model: "qwen", url: "http://localhost:8000/v1"},
		{name: "chat at OpenAI", cfg: openai.Config{APIKey: "sk", API: openai.Chat}, api: openai.Chat, model: "gpt-5.1", url: "https://api.openai.com/v1"},
		{name: "other server without model", cfg: openai.Config{BaseURL: "http://localhost:11434/v1"}, wantErr: "no model name for http://localhost:11434/v1"},
		{name: "not a URL", cfg: openai.Config{BaseURL: "localhost:11434", Model: "m"}, wantErr: "is not an http(s) URL"},
		{name: "unknown API", cfg: openai.Config{APIKey: "sk", API: "completions"}, wantErr: `API "completions" is unknown`},
		// A server picking keys per tenant reads nothing from its own
		// environment: not the key, not the base URL.
		{name: "no env", env: map[string]string{"OPENAI_API_KEY": "sk-env", "OPENAI_BASE_URL": "http://localhost:8000/v1"}, cfg: openai.Config{NoEnv: true}, wantErr: "OPENAI_API_KEY is not set"},
		{name: "no env, other server", env: map[string]string{"OPENAI_BASE_URL": "http://localhost:8000/v1"}, cfg: openai.Config{NoEnv: true, BaseURL: "http://localhost:9/v1", Model: "m"}, api: openai.Chat, model: "m", url: "http://localhost:9/v1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []string{"OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID"} {
				t.Setenv(k, tt.env[k])
			}
			m, err := openai.New(tt.cfg)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.API() != tt.api || m.Name() != tt.model || m.BaseURL() != tt.url {
				t.Errorf("API %q, Name %q, BaseURL %q; want %q, %q, %q", m.API(), m.Name(), m.BaseURL(), tt.api, tt.model, tt.url)
			}
		})
	}
}

// TestHeaders: organization and project reach the server.
func TestHeaders(t *testing.T) {
	srv := fake.NewServer(t, fake.Text("ok"))
	m := newModel(t, srv, openai.Responses, func(c *openai.Config) { c.Organization, c.Project = "org-1", "proj-1" })
	if _, err := m.Respond(context.Background(), request(agent.UserMessage("hi")), nil); err != nil {
		t.Fatal(err)
	}
	h := srv.Requests()[0].Header
	if h.Get("OpenAI-Organization") != "org-1" || h.Get("OpenAI-Project") != "proj-1" {
		t.Errorf("headers = %v", h)
	}
}

// redirectTo is a client that sends every request to srv, whatever host
// the URL names.
func redirectTo(srv *fake.Server) *http.Client {
	addr := strings.TrimSuffix(strings.TrimPrefix(srv.URL, "http://"), "/v1")
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	}}
}

// TestNoEnvSendsNoKey: with NoEnv the environment's key never reaches
// another server.
func TestNoEnvSendsNoKey(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-server-secret")
	srv := fake.NewServer(t, fake.Text("ok"))
	m, err := openai.New(openai.Config{BaseURL: srv.URL, Model: "m", NoEnv: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Respond(context.Background(), request(agent.UserMessage("hi")), nil); err != nil {
		t.Fatal(err)
	}
	if got := srv.Requests()[0].Header.Get("Authorization"); strings.Contains(got, "sk-server-secret") {
		t.Errorf("Authorization = %q: the environment's key was sent", got)
	}
}

// TestSettingNames: a caller other than the CLI names its own settings
// in the errors that say what to fix.
func TestSettingNames(t *testing.T) {
	m, err := openai.New(openai.Config{BaseURL: "http://127.0.0.1:9/v1", Model: "m", NoEnv: true, MaxRetries: -1, BaseURLSetting: "agent.base_url"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Respond(context.Background(), request(agent.UserMessage("hi")), nil)
	if err == nil || !strings.HasSuffix(err.Error(), "; check agent.base_url") {
		t.Errorf("error = %v, want it to end with the caller's setting", err)
	}
}
