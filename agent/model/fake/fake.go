// Package fake is a scripted OpenAI-compatible HTTP server for tests.
//
// It speaks the real wire formats of POST /v1/responses (Responses API) and
// POST /v1/chat/completions (Chat Completions), as JSON or as server-sent
// events when the request asks for a stream, so the official SDKs, and
// anything built on them, talk to it as they would to api.openai.com. The
// bodies follow recorded api.openai.com replies (see testdata/README.md);
// a test in this package checks their shape against those recordings.
//
// A test scripts what the model answers, one Turn per request:
//
//	srv := fake.NewServer(t,
//		fake.Call("exec_command", `{"cmd":"ls"}`),
//		fake.Text("done"),
//	)
//	// point the client at srv.URL, run, then inspect srv.Requests()
//
// Errors, retries and waits are turns too (fake.Error(429, "slow down").
// RetryAfter(time.Second), fake.Error(500, "boom").Forever()), and a turn
// can look at the request before it decides (fake.Func). The server checks
// what the real API checks about tool calls and their outputs, so a
// conversation that the real API would refuse is refused here with the same
// 400 message.
package fake

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// Turn is what the model answers to one request (or to several, with Times
// and Forever). Build it with Text, Call, Custom, Reasoning, Reply, Error,
// Raw, Drop or Func and refine it with the With... methods. A Turn is a
// value: the methods return a changed copy.
type Turn struct {
	outputs []output
	usage   *Usage

	// An error or raw reply when status != 0.
	status      int
	body        string
	contentType string
	errCode     string

	header http.Header
	delay  time.Duration
	drop   bool
	fn     func(*Request) Turn

	// times is how many requests the turn answers: 0 means once,
	// forever means every request from now on.
	times int
}

const forever = -1

type outputKind int

const (
	outText outputKind = iota
	outCall
	outCustom
	outReasoning
)

type output struct {
	kind outputKind
	// text is the message text, the call's JSON arguments, the custom
	// call's input or the reasoning summary.
	text string
	name string
}

// Usage is the token count a turn reports. Zero fields are reported as
// zero; a turn without WithUsage reports a rough estimate from the sizes
// of the request and of the answer.
type Usage struct {
	InputTokens     int64
	CachedTokens    int64
	OutputTokens    int64
	ReasoningTokens int64
}

// Text is an assistant message.
func Text(text string) Turn { return Turn{outputs: []output{{kind: outText, text: text}}} }

// Call is a function tool call with JSON arguments. Its call id is
// "call_N", N counting the calls this server made from 1.
func Call(name, arguments string) Turn {
	return Turn{outputs: []output{{kind: outCall, name: name, text: arguments}}}
}

// Custom is a custom (freeform) tool call with raw input. When the request
// declared the tool as a function (as providers without custom tools do),
// it is answered as a function call with arguments {"input": input}, so
// one script serves both ways of declaring a tool.
func Custom(name, input string) Turn {
	return Turn{outputs: []output{{kind: outCustom, name: name, text: input}}}
}

// Reasoning is a reasoning item (Responses API only; Chat Completions has
// none) with an encrypted_content the client must send back.
func Reasoning(summary string) Turn {
	return Turn{outputs: []output{{kind: outReasoning, text: summary}}}
}

// Reply joins the outputs of several turns into one answer, in order:
// Reply(Text("looking"), Call("ls", "{}"), Call("cat", `{"f":"a"}`)).
// The usage of the last part that has one is kept.
func Reply(parts ...Turn) Turn {
	var t Turn
	for _, p := range parts {
		t.outputs = append(t.outputs, p.outputs...)
		if p.usage != nil {
			t.usage = p.usage
		}
	}
	return t
}

// Error is an error reply in OpenAI's format:
// {"error": {"message", "type", "param", "code"}}. The type and code follow
// the status as OpenAI sets them (429 rate_limit_exceeded, 500
// server_error, 401 invalid_api_key, ...); WithCode changes the code.
func Error(status int, message string) Turn {
	return Turn{status: status, body: message, errCode: defaultCode(status)}
}

// Raw is a reply with this exact status, content type and body, for
// replies the real API would never send (a proxy's HTML page, broken
// JSON, a truncated stream).
func Raw(status int, contentType, body string) Turn {
	return Turn{status: status, contentType: contentType, body: body}
}

// Drop closes the connection without answering, as a network failure
// would.
func Drop() Turn { return Turn{drop: true} }

// Func decides the answer when the request arrives: fn sees the request
// (to check that a tool output came back, say) and returns the turn to
// play. Times and Forever apply to the Func turn, not to what fn returns.
func Func(fn func(r *Request) Turn) Turn { return Turn{fn: fn} }

// WithUsage sets the usage the answer reports.
func (t Turn) WithUsage(u Usage) Turn { t.usage = &u; return t }

// WithCode sets an error reply's "code" (and, for insufficient_quota, its
// "type", as OpenAI does).
func (t Turn) WithCode(code string) Turn { t.errCode = code; return t }

// WithHeader adds a response header ("retry-after-ms", "x-should-retry").
func (t Turn) WithHeader(key, value string) Turn {
	h := t.header.Clone()
	if h == nil {
		h = http.Header{}
	}
	h.Add(key, value)
	t.header = h
	return t
}

// RetryAfter sets the Retry-After header, in whole seconds (rounded up)
// as HTTP has it.
func (t Turn) RetryAfter(d time.Duration) Turn {
	return t.WithHeader("Retry-After", fmt.Sprint(int64(math.Ceil(d.Seconds()))))
}

// WithDelay waits d before answering; the wait ends early when the client
// goes away, so a test can cancel a request that is in flight.
func (t Turn) WithDelay(d time.Duration) Turn { t.delay = d; return t }

// Times makes the turn answer n requests in a row.
func (t Turn) Times(n int) Turn { t.times = n; return t }

// Forever makes the turn answer every request from now on.
func (t Turn) Forever() Turn { t.times = forever; return t }

// Request is one request the server received.
type Request struct {
	// N is the request's position, from 1.
	N int
	// API is "responses" or "chat".
	API    string
	Method string
	Path   string
	Header http.Header
	// Body is the parsed JSON body (nil when it was not JSON).
	Body map[string]any
	Raw  []byte
}

// Stream reports whether the request asked for a streamed reply.
func (r *Request) Stream() bool { b, _ := r.Body["stream"].(bool); return b }

// Model is the model the request named.
func (r *Request) Model() string { s, _ := r.Body["model"].(string); return s }

// Decode unmarshals the body into v.
func (r *Request) Decode(v any) error { return json.Unmarshal(r.Raw, v) }

// ToolNames lists the tools the request declared, in order.
func (r *Request) ToolNames() []string {
	var names []string
	for _, t := range list(r.Body["tools"]) {
		names = append(names, toolName(obj(t)))
	}
	return names
}

// ToolOutput returns the text of the tool output that answers callID (a
// function_call_output or custom_tool_call_output item, or a "tool"
// message), and whether there is one.
func (r *Request) ToolOutput(callID string) (string, bool) {
	for _, it := range r.items() {
		m := obj(it)
		switch {
		case r.API == "responses" && (m["type"] == "function_call_output" || m["type"] == "custom_tool_call_output") && m["call_id"] == callID:
			return contentText(m["output"]), true
		case r.API == "chat" && m["role"] == "tool" && m["tool_call_id"] == callID:
			return contentText(m["content"]), true
		}
	}
	return "", false
}

// items returns the conversation: "input" of a Responses request (a plain
// string input becomes one user message) or "messages" of a chat request.
func (r *Request) items() []any {
	if r.API == "chat" {
		return list(r.Body["messages"])
	}
	if s, ok := r.Body["input"].(string); ok {
		return []any{map[string]any{"type": "message", "role": "user", "content": s}}
	}
	return list(r.Body["input"])
}

// Server is the fake API. It is safe for concurrent use.
type Server struct {
	// URL is the base URL to give a client, ending in /v1
	// (http://127.0.0.1:port/v1), as https://api.openai.com/v1 does.
	URL string

	t   testing.TB
	srv *httptest.Server

	// mu guards the fields below.
	mu       sync.Mutex
	turns    []Turn
	next     int // index of the turn answering the next request
	used     int // requests the turn at next has answered
	requests []*Request
	ids      int  // last item id handed out (msg_N, fc_N, resp_N, ...)
	calls    int  // last call id handed out (call_N)
	reported bool // the test was told the script ran out
}

// NewServer starts a server that answers with turns, in order. With a
// non-nil t the server closes when the test ends, and a request after the
// last turn also fails the test (besides getting a 500).
func NewServer(t testing.TB, turns ...Turn) *Server {
	s := &Server{t: t, turns: turns}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serveHTTP))
	s.URL = s.srv.URL + "/v1"
	if t != nil {
		t.Cleanup(s.Close)
	}
	return s
}

// Close shuts the server down, cutting the connections still open.
func (s *Server) Close() {
	s.srv.CloseClientConnections()
	s.srv.Close()
}

// Add appends turns to the script.
func (s *Server) Add(turns ...Turn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.turns = append(s.turns, turns...)
}

// Requests returns the requests received so far, in order.
func (s *Server) Requests() []*Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Request(nil), s.requests...)
}

// Pending is the number of scripted turns no request has reached yet, so a
// test can check that the code under test used the whole script.
func (s *Server) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.turns) - s.next
	if n > 0 && s.used > 0 {
		n-- // the current turn has started
	}
	return max(n, 0)
}

// nextID hands out the next number for item ids, so ids are predictable
// across one server.
func (s *Server) nextID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids++
	return s.ids
}

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimPrefix(r.URL.Path, "/v1")
	var api string
	switch path {
	case "/responses":
		api = "responses"
	case "/chat/completions":
		api = "chat"
	default:
		writeError(w, http.StatusNotFound, "invalid_request_error", "", "",
			fmt.Sprintf("Invalid URL (%s %s)", r.Method, r.URL.Path))
		return
	}
	if r.Method != http.MethodPost {
		writeError(w, http.StatusMethodNotAllowed, "invalid_request_error", "", "",
			fmt.Sprintf("Invalid method for URL (%s %s)", r.Method, r.URL.Path))
		return
	}
	raw, err := readAll(r)
	if err != nil {
		return // the client went away
	}
	req := &Request{API: api, Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Raw: raw}
	if err := json.Unmarshal(raw, &req.Body); err != nil {
		s.record(req)
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", "",
			"We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON.)")
		return
	}
	s.record(req)

	// The real API refuses these before any model runs, so they use up
	// no turn.
	if e := validate(req); e != nil {
		if s.t != nil {
			s.t.Logf("fake: request %d refused as the real API would: %s", req.N, e.message)
		}
		writeError(w, http.StatusBadRequest, "invalid_request_error", e.param, e.code, e.message)
		return
	}

	turn, ok := s.take(req)
	if !ok {
		msg := fmt.Sprintf("fake: no scripted turn left for request %d (%s %s): the test scripted %d turns",
			req.N, r.Method, r.URL.Path, s.scripted())
		s.mu.Lock()
		report := s.t != nil && !s.reported
		s.reported = true
		s.mu.Unlock()
		if report {
			s.t.Errorf("%s", msg)
		}
		writeError(w, http.StatusInternalServerError, "server_error", "", "", msg)
		return
	}
	if turn.fn != nil {
		turn = turn.fn(req)
	}
	s.play(w, r, req, turn)
}

func (s *Server) record(req *Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	req.N = len(s.requests) + 1
	s.requests = append(s.requests, req)
}

func (s *Server) scripted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.turns)
}

// take returns the turn that answers req and moves the script on.
func (s *Server) take(*Request) (Turn, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.next >= len(s.turns) {
		return Turn{}, false
	}
	t := s.turns[s.next]
	s.used++
	if t.times != forever && s.used >= max(t.times, 1) {
		s.next++
		s.used = 0
	}
	return t, true
}

// play writes turn as the answer to req.
func (s *Server) play(w http.ResponseWriter, r *http.Request, req *Request, turn Turn) {
	if turn.delay > 0 {
		timer := time.NewTimer(turn.delay)
		select {
		case <-timer.C:
		case <-r.Context().Done():
			timer.Stop()
			return
		}
	}
	for k, vs := range turn.header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	switch {
	case turn.drop:
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler) // cuts the connection where hijacking cannot
	case turn.status != 0 && turn.contentType != "":
		w.Header().Set("Content-Type", turn.contentType)
		w.WriteHeader(turn.status)
		_, _ = w.Write([]byte(turn.body))
	case turn.status != 0:
		typ := errorType(turn.status)
		if turn.errCode == "insufficient_quota" {
			typ = "insufficient_quota"
		}
		writeError(w, turn.status, typ, "", turn.errCode, turn.body)
	case req.API == "responses":
		s.respond(w, req, s.answer(req, turn))
	default:
		s.complete(w, req, s.answer(req, turn))
	}
}

// answer is a turn resolved against a request: ids handed out, custom
// calls matched to how the request declared the tool, usage filled in.
type answer struct {
	id      int
	outputs []resolved
	usage   Usage
}

type resolved struct {
	output
	id     int    // the item's number (msg_N, fc_N, ...)
	callID string // call_N for tool calls
	// asFunction is set for a custom call to a tool the request declared
	// as a function: it is answered as a function call.
	asFunction bool
}

func (s *Server) answer(req *Request, turn Turn) answer {
	a := answer{id: s.nextID()}
	var outChars int
	for _, o := range turn.outputs {
		ro := resolved{output: o, id: s.nextID()}
		switch o.kind {
		case outCall, outCustom:
			ro.callID = fmt.Sprintf("call_%d", s.nextCall())
		}
		// Chat Completions has custom calls only for tools declared custom;
		// the Responses API has them unless the tool is a function.
		declared := declaredAs(req, o.name)
		if o.kind == outCustom && (declared == "function" || req.API == "chat" && declared != "custom") {
			ro.asFunction = true
			b, _ := json.Marshal(map[string]string{"input": o.text})
			ro.text = string(b)
		}
		outChars += len(ro.text)
		a.outputs = append(a.outputs, ro)
	}
	if turn.usage != nil {
		a.usage = *turn.usage
	} else {
		// A rough estimate (four bytes a token) so usage is never zero.
		a.usage = Usage{InputTokens: int64(len(req.Raw)/4 + 1), OutputTokens: int64(outChars/4 + 1)}
	}
	return a
}

// nextCall numbers tool calls separately from other ids so the first call
// of a test is always call_1.
func (s *Server) nextCall() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	return s.calls
}
