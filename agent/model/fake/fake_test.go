package fake_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/cove-sandbox/cove/agent/model/fake"
)

// client is the official SDK pointed at srv, with the SDK's own retries
// off unless a test asks for them.
func client(srv *fake.Server, opts ...option.RequestOption) openai.Client {
	return openai.NewClient(append([]option.RequestOption{
		option.WithBaseURL(srv.URL),
		option.WithAPIKey("sk-test"),
		option.WithMaxRetries(0),
	}, opts...)...)
}

var weatherTool = responses.ToolUnionParam{OfFunction: &responses.FunctionToolParam{
	Name:       "exec_command",
	Parameters: map[string]any{"type": "object", "properties": map[string]any{"cmd": map[string]any{"type": "string"}}},
	Strict:     openai.Bool(false),
}}

func functionOutput(callID, output string) responses.ResponseInputItemUnionParam {
	item := responses.ResponseInputItemParamOfFunctionCallOutput(output)
	item.OfFunctionCallOutput.CallID = openai.String(callID)
	return item
}

var patchTool = responses.ToolUnionParam{OfCustom: &responses.CustomToolParam{Name: "apply_patch"}}

func TestResponsesJSON(t *testing.T) {
	srv := fake.NewServer(t,
		fake.Reply(fake.Reasoning("think"), fake.Text("hello there"), fake.Call("exec_command", `{"cmd":"ls"}`), fake.Custom("apply_patch", "*** Begin Patch")).
			WithUsage(fake.Usage{InputTokens: 12, CachedTokens: 4, OutputTokens: 7, ReasoningTokens: 3}),
	)
	c := client(srv)
	resp, err := c.Responses.New(context.Background(), responses.ResponseNewParams{
		Model:        "gpt-5.1",
		Instructions: openai.String("be brief"),
		Input:        responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
		Tools:        []responses.ToolUnionParam{weatherTool, patchTool},
		Store:        openai.Bool(false),
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := resp.OutputText(), "hello there"; got != want {
		t.Errorf("OutputText() = %q, want %q", got, want)
	}
	var kinds []string
	for _, o := range resp.Output {
		kinds = append(kinds, o.Type)
	}
	if diff := cmp.Diff([]string{"reasoning", "message", "function_call", "custom_tool_call"}, kinds); diff != "" {
		t.Errorf("output types (-want +got):\n%s", diff)
	}
	if fc := resp.Output[2].AsFunctionCall(); fc.CallID != "call_1" || fc.Name != "exec_command" || fc.Arguments != `{"cmd":"ls"}` {
		t.Errorf("function call = %+v", fc)
	}
	if cc := resp.Output[3].AsCustomToolCall(); cc.CallID != "call_2" || cc.Input != "*** Begin Patch" {
		t.Errorf("custom call = %+v", cc)
	}
	if rs := resp.Output[0].AsReasoning(); rs.EncryptedContent == "" || len(rs.Summary) != 1 {
		t.Errorf("reasoning = %+v", rs)
	}
	u := resp.Usage
	if u.InputTokens != 12 || u.InputTokensDetails.CachedTokens != 4 || u.OutputTokens != 7 || u.OutputTokensDetails.ReasoningTokens != 3 || u.TotalTokens != 19 {
		t.Errorf("usage = %+v", u)
	}
	if resp.Instructions.OfString != "be brief" {
		t.Errorf("instructions not echoed: %+v", resp.Instructions)
	}
	reqs := srv.Requests()
	if len(reqs) != 1 || reqs[0].API != "responses" || reqs[0].Model() != "gpt-5.1" || reqs[0].Header.Get("Authorization") != "Bearer sk-test" {
		t.Fatalf("requests = %+v", reqs)
	}
	if diff := cmp.Diff([]string{"exec_command", "apply_patch"}, reqs[0].ToolNames()); diff != "" {
		t.Errorf("ToolNames (-want +got):\n%s", diff)
	}
}

func TestResponsesStream(t *testing.T) {
	srv := fake.NewServer(t, fake.Reply(fake.Text("one two three"), fake.Call("exec_command", `{"cmd":"ls -la /tmp"}`), fake.Custom("apply_patch", "*** Begin Patch\n*** End Patch")))
	c := client(srv)
	stream := c.Responses.NewStreaming(context.Background(), responses.ResponseNewParams{
		Model: "gpt-5.1",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
		Tools: []responses.ToolUnionParam{weatherTool, patchTool},
	})
	var types, deltas []string
	var args, input strings.Builder
	var final responses.Response
	for stream.Next() {
		ev := stream.Current()
		if len(types) == 0 || types[len(types)-1] != ev.Type {
			types = append(types, ev.Type) // runs of deltas count once
		}
		switch ev.Type {
		case "response.output_text.delta":
			deltas = append(deltas, ev.AsResponseOutputTextDelta().Delta)
		case "response.function_call_arguments.delta":
			args.WriteString(ev.AsResponseFunctionCallArgumentsDelta().Delta)
		case "response.custom_tool_call_input.delta":
			input.WriteString(ev.AsResponseCustomToolCallInputDelta().Delta)
		case "response.completed":
			final = ev.AsResponseCompleted().Response
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"response.created", "response.in_progress",
		"response.output_item.added", "response.content_part.added", "response.output_text.delta",
		"response.output_text.done", "response.content_part.done", "response.output_item.done",
		"response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.done", "response.output_item.done",
		"response.output_item.added", "response.custom_tool_call_input.delta", "response.custom_tool_call_input.done", "response.output_item.done",
		"response.completed",
	}
	if diff := cmp.Diff(want, types); diff != "" {
		t.Errorf("event types (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"one", " two", " three"}, deltas); diff != "" {
		t.Errorf("text deltas (-want +got):\n%s", diff)
	}
	if args.String() != `{"cmd":"ls -la /tmp"}` || input.String() != "*** Begin Patch\n*** End Patch" {
		t.Errorf("arguments %q, input %q", args.String(), input.String())
	}
	if final.OutputText() != "one two three" || len(final.Output) != 3 || final.Usage.TotalTokens == 0 {
		t.Errorf("completed response = %s", final.RawJSON())
	}
}

// TestToolRoundTrip is how an agent test reads: the model calls a tool,
// the next turn checks the tool's output came back, then answers.
func TestToolRoundTrip(t *testing.T) {
	srv := fake.NewServer(t,
		fake.Call("exec_command", `{"cmd":"ls"}`),
		fake.Func(func(r *fake.Request) fake.Turn {
			out, ok := r.ToolOutput("call_1")
			if !ok {
				return fake.Error(400, "no output for call_1")
			}
			return fake.Text("the listing was: " + out)
		}),
	)
	c := client(srv)
	ctx := context.Background()
	first, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-5.1", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("list")}})
	if err != nil {
		t.Fatal(err)
	}
	fc := first.Output[0].AsFunctionCall()
	input := responses.ResponseInputParam{
		responses.ResponseInputItemParamOfMessage("list", responses.EasyInputMessageRoleUser),
		responses.ResponseInputItemParamOfFunctionCall(fc.Arguments, fc.CallID, fc.Name),
		functionOutput(fc.CallID, "a.txt b.txt"),
	}
	second, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-5.1", Input: responses.ResponseNewParamsInputUnion{OfInputItemList: input}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := second.OutputText(), "the listing was: a.txt b.txt"; got != want {
		t.Errorf("second answer = %q, want %q", got, want)
	}
	if srv.Pending() != 0 {
		t.Errorf("Pending() = %d, want 0", srv.Pending())
	}
}

func TestChatJSON(t *testing.T) {
	srv := fake.NewServer(t,
		fake.Reply(fake.Text("calling"), fake.Call("exec_command", `{"cmd":"ls"}`), fake.Custom("apply_patch", "patch text")).
			WithUsage(fake.Usage{InputTokens: 20, CachedTokens: 8, OutputTokens: 5, ReasoningTokens: 2}),
	)
	c := client(srv)
	resp, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:    "gpt-4.1",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		Tools: []openai.ChatCompletionToolUnionParam{
			openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{Name: "exec_command"}),
			openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{Name: "apply_patch"}),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ch := resp.Choices[0]
	if ch.Message.Content != "calling" || ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) != 2 {
		t.Fatalf("choice = %s", ch.RawJSON())
	}
	if tc := ch.Message.ToolCalls[0]; tc.ID != "call_1" || tc.Function.Name != "exec_command" || tc.Function.Arguments != `{"cmd":"ls"}` {
		t.Errorf("tool call 0 = %s", tc.RawJSON())
	}
	// apply_patch was declared as a function, so the custom call comes as
	// one with its input wrapped.
	if tc := ch.Message.ToolCalls[1]; tc.Type != "function" || tc.Function.Arguments != `{"input":"patch text"}` {
		t.Errorf("tool call 1 = %s", tc.RawJSON())
	}
	u := resp.Usage
	if u.PromptTokens != 20 || u.PromptTokensDetails.CachedTokens != 8 || u.CompletionTokens != 5 || u.CompletionTokensDetails.ReasoningTokens != 2 || u.TotalTokens != 25 {
		t.Errorf("usage = %s", u.RawJSON())
	}
}

func TestChatStream(t *testing.T) {
	srv := fake.NewServer(t, fake.Reply(fake.Text("let me look"), fake.Call("exec_command", `{"cmd":"ls -la"}`), fake.Call("read_file", `{"path":"ü.txt"}`)))
	c := client(srv)
	stream := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model:         "gpt-4.1",
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	acc := openai.ChatCompletionAccumulator{}
	var deltas []string
	chunks := 0
	for stream.Next() {
		ch := stream.Current()
		chunks++
		acc.AddChunk(ch)
		if len(ch.Choices) > 0 && ch.Choices[0].Delta.Content != "" {
			deltas = append(deltas, ch.Choices[0].Delta.Content)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"let", " me", " look"}, deltas); diff != "" {
		t.Errorf("content deltas (-want +got):\n%s", diff)
	}
	msg := acc.Choices[0].Message
	if msg.Content != "let me look" || len(msg.ToolCalls) != 2 {
		t.Fatalf("accumulated message = %+v", msg)
	}
	if tc := msg.ToolCalls[1]; tc.ID != "call_2" || tc.Function.Name != "read_file" || tc.Function.Arguments != `{"path":"ü.txt"}` {
		t.Errorf("tool call 1 = %+v", tc)
	}
	if acc.Choices[0].FinishReason != "tool_calls" || acc.Usage.TotalTokens == 0 {
		t.Errorf("finish %q, usage %+v", acc.Choices[0].FinishReason, acc.Usage)
	}
	if chunks < 6 {
		t.Errorf("only %d chunks: arguments should arrive in pieces", chunks)
	}
}

func TestErrors(t *testing.T) {
	srv := fake.NewServer(t,
		fake.Error(429, "Rate limit reached").RetryAfter(1500*time.Millisecond),
		fake.Error(500, "boom").Times(2),
		fake.Error(429, "You exceeded your current quota").WithCode("insufficient_quota"),
		fake.Raw(502, "text/html", "<html>bad gateway</html>"),
	)
	c := client(srv)
	call := func() *openai.Error {
		t.Helper()
		_, err := c.Responses.New(context.Background(), responses.ResponseNewParams{Model: "gpt-5.1"})
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) {
			t.Fatalf("error = %v, want an *openai.Error", err)
		}
		return apiErr
	}
	e := call()
	if e.StatusCode != 429 || e.Code != "rate_limit_exceeded" || e.Type != "requests" || e.Message != "Rate limit reached" || e.Response.Header.Get("Retry-After") != "2" {
		t.Errorf("429 = %d %s %s %q retry-after %q", e.StatusCode, e.Type, e.Code, e.Message, e.Response.Header.Get("Retry-After"))
	}
	for range 2 {
		if e := call(); e.StatusCode != 500 || e.Type != "server_error" || e.Message != "boom" {
			t.Errorf("500 = %d %s %q", e.StatusCode, e.Type, e.Message)
		}
	}
	if e := call(); e.Code != "insufficient_quota" || e.Type != "insufficient_quota" {
		t.Errorf("quota error = %s %s", e.Type, e.Code)
	}
	_, err := c.Responses.New(context.Background(), responses.ResponseNewParams{Model: "gpt-5.1"})
	if err == nil {
		t.Error("a 502 HTML page was taken for an answer")
	}
}

// TestRetriesWithSDK checks that the SDK's own retry loop sees what it
// expects: errors it retries, a dropped connection, then an answer.
func TestRetriesWithSDK(t *testing.T) {
	srv := fake.NewServer(t,
		fake.Error(500, "boom").WithHeader("retry-after-ms", "10"),
		fake.Drop(),
		fake.Text("ok"),
	)
	c := client(srv, option.WithMaxRetries(3), option.WithMaxRetryDelay(50*time.Millisecond))
	resp, err := c.Responses.New(context.Background(), responses.ResponseNewParams{Model: "gpt-5.1"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.OutputText() != "ok" || len(srv.Requests()) != 3 {
		t.Errorf("answer %q after %d requests, want ok after 3", resp.OutputText(), len(srv.Requests()))
	}
}

func TestForever(t *testing.T) {
	srv := fake.NewServer(t, fake.Text("first"), fake.Error(503, "overloaded").Forever())
	c := client(srv)
	if _, err := c.Responses.New(context.Background(), responses.ResponseNewParams{Model: "m"}); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		var e *openai.Error
		_, err := c.Responses.New(context.Background(), responses.ResponseNewParams{Model: "m"})
		if !errors.As(err, &e) || e.StatusCode != 503 {
			t.Fatalf("error = %v, want 503", err)
		}
	}
}

// recorder is a testing.TB that records failures instead of failing.
type recorder struct {
	testing.TB
	mu     sync.Mutex
	errors []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}
func (r *recorder) Logf(string, ...any) {}
func (r *recorder) Helper()             {}

func TestOutOfTurns(t *testing.T) {
	rec := &recorder{TB: t}
	srv := fake.NewServer(rec, fake.Text("only"))
	c := client(srv)
	ctx := context.Background()
	if _, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "m"}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		_, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")}})
		var e *openai.Error
		if !errors.As(err, &e) || e.StatusCode != 500 || !strings.Contains(e.Message, "no scripted turn left for request") {
			t.Fatalf("error = %v, want a 500 saying the script ran out", err)
		}
	}
	if len(rec.errors) != 1 || !strings.Contains(rec.errors[0], "request 2") {
		t.Errorf("test failures = %q, want one about request 2", rec.errors)
	}
}

// TestRefusesWhatTheAPIRefuses: the conversations the real API rejects
// before running a model are rejected here with its message, and use up
// no turn.
func TestRefusesWhatTheAPIRefuses(t *testing.T) {
	srv := fake.NewServer(nil, fake.Text("ok"))
	c := client(srv)
	ctx := context.Background()
	tests := []struct {
		name string
		call func() error
		want string
	}{
		{"responses output without call", func() error {
			_, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "m", Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
				functionOutput("call_9", "x"),
			}}})
			return err
		}, "No tool call found for function call output with call_id call_9."},
		{"responses call without output", func() error {
			_, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "m", Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
				responses.ResponseInputItemParamOfFunctionCall("{}", "call_3", "ls"),
			}}})
			return err
		}, "No tool output found for function call call_3."},
		{"chat tool message without call", func() error {
			_, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{
				openai.UserMessage("x"), openai.ToolMessage("out", "call_4"),
			}})
			return err
		}, "messages with role 'tool' must be a response to a preceeding message with 'tool_calls'"},
		{"chat tool message answering its call", func() error {
			_, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{
				openai.UserMessage("x"),
				{OfAssistant: &openai.ChatCompletionAssistantMessageParam{ToolCalls: []openai.ChatCompletionMessageToolCallUnionParam{{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{ID: "call_5", Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: "view_image", Arguments: "{}"}},
				}}}},
				{OfTool: &openai.ChatCompletionToolMessageParam{ToolCallID: "call_5", Content: openai.ChatCompletionToolMessageParamContentUnion{
					OfArrayOfContentParts: []openai.ChatCompletionContentPartTextParam{{Text: "see"}},
				}}},
			}})
			return err
		}, ""},
		{"missing model", func() error {
			_, err := c.Responses.New(ctx, responses.ResponseNewParams{})
			return err
		}, "Missing required parameter: 'model'."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("refused a valid conversation: %v", err)
				}
				srv.Add(fake.Text("ok"))
				return
			}
			var e *openai.Error
			if !errors.As(err, &e) || e.StatusCode != http.StatusBadRequest || !strings.Contains(e.Message, tt.want) {
				t.Fatalf("error = %v (%v), want 400 %q", err, e, tt.want)
			}
		})
	}
	if srv.Pending() != 1 {
		t.Errorf("refused requests used up turns: Pending() = %d, want 1", srv.Pending())
	}
}

func TestDelayEndsWithClient(t *testing.T) {
	srv := fake.NewServer(t, fake.Text("late").WithDelay(time.Minute))
	c := client(srv)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "m"})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error = %v, want deadline exceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("cancelled request took %v", d)
	}
}

func TestConcurrent(t *testing.T) {
	srv := fake.NewServer(t, fake.Call("exec_command", `{}`).Forever())
	c := client(srv)
	var wg sync.WaitGroup
	ids := make(chan string, 40)
	for range 40 {
		wg.Go(func() {
			resp, err := c.Responses.New(context.Background(), responses.ResponseNewParams{Model: "m"})
			if err != nil {
				t.Error(err)
				return
			}
			ids <- resp.Output[0].AsFunctionCall().CallID
		})
	}
	wg.Wait()
	close(ids)
	seen := map[string]bool{}
	for id := range ids {
		if seen[id] {
			t.Errorf("call id %s handed out twice", id)
		}
		seen[id] = true
	}
	if len(srv.Requests()) != 40 {
		t.Errorf("recorded %d requests, want 40", len(srv.Requests()))
	}
}

// The SDK's types cannot put an image in a tool message; a hand-made
// client can, and the real API refuses it.
func TestRefusesImageInToolMessage(t *testing.T) {
	srv := fake.NewServer(t, fake.Text("unused"))
	resp := post(t, srv, "/chat/completions", map[string]any{"model": "m", "messages": []any{
		map[string]any{"role": "user", "content": "look"},
		map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"id": "call_1", "type": "function",
			"function": map[string]any{"name": "view_image", "arguments": "{}"}}}},
		map[string]any{"role": "tool", "tool_call_id": "call_1", "content": []any{
			map[string]any{"type": "image_url", "image_url": map[string]any{"url": "data:image/png;base64,AAAA"}}}},
	}})
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 400 || !strings.Contains(string(body), "Image URLs are only allowed for messages with role 'user'") {
		t.Errorf("got %d %s, want a 400 about images outside user messages", resp.StatusCode, body)
	}
}
