// Package openai is an agent.Model over the official OpenAI Go SDK
// (github.com/openai/openai-go/v3). It speaks the Responses API to
// api.openai.com and Chat Completions to OpenAI-compatible servers (Ollama,
// vLLM, LM Studio, llama.cpp, ...), streams text as it arrives, and retries
// transient failures (429, 5xx, network) with exponential backoff and
// jitter, honouring the server's Retry-After.
//
// The SDK's own retry loop is turned off: it stops retrying when the server
// asks for a wait longer than its delay cap (so a test cannot shorten the
// backoff without losing Retry-After), it does not retry a stream that
// breaks before its first event, and its final error carries no count of
// attempts. Retries here do all three.
package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/responses"

	"github.com/cove-sandbox/cove/agent"
)

// API is the wire protocol a Model speaks.
type API string

const (
	// Responses is OpenAI's Responses API (POST /responses): custom
	// tools with grammars, reasoning items passed back, images in tool
	// outputs.
	Responses API = "responses"
	// Chat is Chat Completions (POST /chat/completions), which almost
	// every OpenAI-compatible server speaks.
	Chat API = "chat"
)

const (
	// DefaultBaseURL is OpenAI's API.
	DefaultBaseURL = "https://api.openai.com/v1"
	// DefaultModel is used with OpenAI's API when Config.Model is empty.
	DefaultModel = "gpt-5.1"

	defaultMaxRetries     = 3
	defaultRetryBaseDelay = 500 * time.Millisecond
	defaultRetryMaxDelay  = 30 * time.Second
	// maxServerWait is the longest Retry-After honoured. A server that
	// asks for longer (a daily quota) will not be ready within a run,
	// so the call fails at once and says how long it asked for.
	maxServerWait = 2 * time.Minute
)

// errNoAPIKey is what a user sees when nothing tells Cove the key; it
// names both ways out.
var errNoAPIKey = errors.New("OPENAI_API_KEY is not set: export it, or pass --base-url for an OpenAI-compatible server")

// Config says which model to call and how. Zero values take the defaults
// documented on each field.
type Config struct {
	// Model is the model's name ("gpt-5.1"). Empty means DefaultModel
	// with OpenAI's API; another server needs it set.
	Model string
	// APIKey defaults to $OPENAI_API_KEY. It is required for OpenAI's
	// API; a server at another BaseURL may need none.
	APIKey string
	// BaseURL defaults to $OPENAI_BASE_URL, then DefaultBaseURL. It
	// ends before the endpoint: "http://localhost:11434/v1".
	BaseURL string
	// API defaults to Responses for OpenAI's API and to Chat for any
	// other BaseURL, because Chat Completions is what OpenAI-compatible
	// servers implement; set it to use Responses with a server that has
	// it (vLLM, OpenRouter) or Chat with OpenAI.
	API API
	// MaxRetries is how many times a transient failure is retried: 0
	// means 3, a negative value means never.
	MaxRetries int
	// RetryBaseDelay is the first backoff (default 500ms); each retry
	// doubles it, up to RetryMaxDelay (default 30s), less a random
	// jitter of up to half. A server's Retry-After replaces the backoff.
	RetryBaseDelay time.Duration
	RetryMaxDelay  time.Duration
	// HTTPClient defaults to http.DefaultClient.
	HTTPClient *http.Client
	// Organization and Project default to $OPENAI_ORG_ID and
	// $OPENAI_PROJECT_ID and are sent when set.
	Organization string
	Project      string
	// Logger, when set, gets a line for each retry (why, and how long
	// the wait is), so a slow run can be explained.
	Logger *slog.Logger
	// BaseURLSetting and KeySetting name, in error messages, where the
	// user sets the base URL and the key ("--base-url" and
	// "OPENAI_API_KEY" by default; a server names its own fields).
	BaseURLSetting, KeySetting string
	// NoEnv reads nothing from the environment: no key, base URL,
	// organisation or project comes from $OPENAI_*. A server choosing a
	// key per tenant sets it, so that a tenant's own base URL is never
	// sent the server's key.
	NoEnv bool
}

// Model is an agent.Model over one OpenAI(-compatible) model. It is safe
// for concurrent use.
type Model struct {
	name     string
	api      API
	baseURL  string
	isOpenAI bool
	// urlSetting and keySetting are Config.BaseURLSetting and KeySetting.
	urlSetting, keySetting string
	retries                int
	base                   time.Duration
	maxDelay               time.Duration
	log                    *slog.Logger

	responses responses.ResponseService
	chat      sdk.ChatCompletionService
}

var _ agent.Model = (*Model)(nil)

// New checks cfg, fills in its defaults and returns the model. It fails
// when OpenAI's API is the target and no API key is set, when the base
// URL is not an http(s) URL, or when a non-OpenAI server has no model
// name.
func New(cfg Config) (*Model, error) {
	env := os.Getenv
	if cfg.NoEnv {
		env = func(string) string { return "" }
	}
	base := firstNonEmpty(cfg.BaseURL, env("OPENAI_BASE_URL"), DefaultBaseURL)
	base = strings.TrimRight(base, "/")
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("base URL %q is not an http(s) URL: want one like http://localhost:11434/v1", base)
	}
	m := &Model{
		urlSetting: firstNonEmpty(cfg.BaseURLSetting, "--base-url"),
		keySetting: firstNonEmpty(cfg.KeySetting, "OPENAI_API_KEY"),
		baseURL:    base,
		isOpenAI:   u.Hostname() == "api.openai.com",
		retries:    cfg.MaxRetries,
		base:       cfg.RetryBaseDelay,
		maxDelay:   cfg.RetryMaxDelay,
		log:        cfg.Logger,
	}
	key := firstNonEmpty(cfg.APIKey, env("OPENAI_API_KEY"))
	if key == "" && m.isOpenAI {
		if cfg.KeySetting == "" && cfg.BaseURLSetting == "" {
			return nil, errNoAPIKey
		}
		// A server names its own settings: never the CLI's.
		return nil, fmt.Errorf("no API key for OpenAI's API: set %s, or point %s at an OpenAI-compatible server", m.keySetting, m.urlSetting)
	}
	m.api = cfg.API
	switch {
	case m.api == "" && m.isOpenAI:
		m.api = Responses
	case m.api == "":
		m.api = Chat
	case m.api != Responses && m.api != Chat:
		return nil, fmt.Errorf("API %q is unknown: want %q or %q", cfg.API, Responses, Chat)
	}
	m.name = cfg.Model
	if m.name == "" {
		if !m.isOpenAI {
			return nil, fmt.Errorf("no model name for %s: pass the name of a model that server serves", base)
		}
		m.name = DefaultModel
	}
	switch {
	case m.retries == 0:
		m.retries = defaultMaxRetries
	case m.retries < 0:
		m.retries = 0
	}
	if m.base <= 0 {
		m.base = defaultRetryBaseDelay
	}
	if m.maxDelay <= 0 {
		m.maxDelay = max(defaultRetryMaxDelay, m.base)
	}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}

	// The services are built from explicit options only, so what the SDK
	// would read from the environment on its own is what Config says.
	opts := []option.RequestOption{option.WithBaseURL(base), option.WithMaxRetries(0)}
	if key != "" {
		opts = append(opts, option.WithAPIKey(key))
	}
	if cfg.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(cfg.HTTPClient))
	}
	if org := firstNonEmpty(cfg.Organization, env("OPENAI_ORG_ID")); org != "" {
		opts = append(opts, option.WithOrganization(org))
	}
	if p := firstNonEmpty(cfg.Project, env("OPENAI_PROJECT_ID")); p != "" {
		opts = append(opts, option.WithProject(p))
	}
	m.responses = responses.NewResponseService(opts...)
	m.chat = sdk.NewChatCompletionService(opts...)
	return m, nil
}

// Name implements agent.Model.
func (m *Model) Name() string { return m.name }

// API is the protocol the model speaks.
func (m *Model) API() API { return m.api }

// BaseURL is the server the model is called at.
func (m *Model) BaseURL() string { return m.baseURL }

// Respond implements agent.Model. With a delta func the reply is
// streamed and its text passed to delta as it arrives; without one it is
// fetched whole. A failure is retried only while nothing has been passed
// to delta, so the caller never sees text twice.
func (m *Model) Respond(ctx context.Context, req agent.ModelRequest, delta func(text string)) (*agent.ModelResponse, error) {
	var try func(ctx context.Context, a *attempt) (*agent.ModelResponse, error)
	if m.api == Responses {
		params, err := m.responsesParams(req)
		if err != nil {
			return nil, fmt.Errorf("calling model %q: %w", m.name, err)
		}
		try = func(ctx context.Context, a *attempt) (*agent.ModelResponse, error) {
			if delta == nil {
				return m.respondOnce(ctx, params, a)
			}
			return m.respondStream(ctx, params, a)
		}
	} else {
		params, custom := m.chatParams(req, delta != nil)
		try = func(ctx context.Context, a *attempt) (*agent.ModelResponse, error) {
			if delta == nil {
				return m.completeOnce(ctx, params, custom, a)
			}
			return m.completeStream(ctx, params, custom, a)
		}
	}
	for n := 1; ; n++ {
		a := &attempt{delta: delta}
		resp, err := try(ctx, a)
		if err == nil {
			resp.Usage.Requests = 1
			return resp, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("calling model %q: %w", m.name, ctx.Err())
		}
		f := m.classify(err, a.http)
		f.Attempts = n
		if !f.retry || a.emitted || n > m.retries {
			return nil, f
		}
		wait := f.retryAfter
		if wait > maxServerWait {
			f.tooLong = true
			return nil, f
		}
		if wait == 0 {
			wait = m.backoff(n)
		}
		m.log.Warn("model call failed; retrying", "model", m.name, "attempt", n, "wait", wait, "err", f.cause())
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("calling model %q: %w", m.name, ctx.Err())
		}
	}
}

// attempt is the state of one try at a call.
type attempt struct {
	delta func(string)
	// emitted is set once text has gone to delta: from then on a failure
	// is final.
	emitted bool
	// http is the HTTP reply, when there was one, for its status and
	// headers when the SDK could not make an error of its body.
	http *http.Response
}

func (a *attempt) emit(text string) {
	if text != "" && a.delta != nil {
		a.emitted = true
		a.delta(text)
	}
}

// backoff is the wait before retry n (from 1): base·2^(n-1), capped, less
// up to half at random so clients that failed together do not retry
// together.
func (m *Model) backoff(n int) time.Duration {
	d := m.maxDelay
	if n < 31 {
		d = min(m.base<<(n-1), m.maxDelay)
	}
	return d - time.Duration(rand.Int64N(int64(d/2)+1))
}

// RequestError is a model call that failed for good, after any retries.
type RequestError struct {
	Model   string
	BaseURL string
	// StatusCode is the HTTP status, 0 when no HTTP reply came.
	StatusCode int
	// Type, Code and Message are the API's error fields, when it sent
	// them.
	Type, Code, Message string
	// Attempts is how many requests were made.
	Attempts int
	// RetryAfter is how long the server asked to wait, if it did.
	RetryAfter time.Duration
	// Err is the cause when there was no usable HTTP reply (a network
	// error, a reply that is not OpenAI's format).
	Err error

	kind       failureKind
	retry      bool
	retryAfter time.Duration
	tooLong    bool
	isOpenAI   bool
	// urlSetting and keySetting name where the user fixes them.
	urlSetting, keySetting string
}

type failureKind int

const (
	failHTTP      failureKind = iota // an HTTP error status
	failNetwork                      // no reply
	failBroken                       // a reply that broke off
	failMalformed                    // a reply that is not OpenAI's format
	failModel                        // the API reported a failure inside a 200 reply
)

// ModelName and HTTPStatus let a caller that knows no type of this
// package word the failure from its model and status alone (the runs
// service's ModelCallError).
func (e *RequestError) ModelName() string { return e.Model }
func (e *RequestError) HTTPStatus() int   { return e.StatusCode }

func (e *RequestError) Error() string {
	var b strings.Builder
	tries := ""
	if e.Attempts > 1 {
		tries = fmt.Sprintf(" (after %d attempts)", e.Attempts)
	}
	switch e.kind {
	case failNetwork:
		fmt.Fprintf(&b, "cannot reach the model at %s%s: %v; check %s", e.BaseURL, tries, e.Err, e.urlSetting)
		return b.String()
	case failBroken:
		fmt.Fprintf(&b, "calling model %q at %s: the reply broke off%s: %v", e.Model, e.BaseURL, tries, e.Err)
		return b.String()
	case failMalformed:
		fmt.Fprintf(&b, "calling model %q at %s: the reply is not in OpenAI's format: %v", e.Model, e.BaseURL, e.Err)
		return b.String()
	case failModel:
		fmt.Fprintf(&b, "calling model %q: the model failed", e.Model)
	default:
		fmt.Fprintf(&b, "calling model %q: HTTP %d %s", e.Model, e.StatusCode, http.StatusText(e.StatusCode))
	}
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	if e.Code != "" && !strings.Contains(e.Message, e.Code) {
		b.WriteString(" (" + e.Code + ")")
	}
	b.WriteString(tries)
	switch {
	case e.tooLong:
		fmt.Fprintf(&b, "; the server asks to retry in %v, longer than Cove waits", e.RetryAfter.Round(time.Second))
	case e.StatusCode == http.StatusUnauthorized && e.isOpenAI:
		b.WriteString("; check " + e.keySetting)
	case e.StatusCode == http.StatusUnauthorized:
		b.WriteString("; check the API key")
	case e.StatusCode == http.StatusNotFound:
		b.WriteString("; check the model name and " + e.urlSetting)
	}
	return b.String()
}

func (e *RequestError) Unwrap() error { return e.Err }

// cause is a short reason for the retry log.
func (e *RequestError) cause() string {
	if e.StatusCode != 0 {
		return fmt.Sprintf("HTTP %d: %s", e.StatusCode, e.Message)
	}
	if e.Err != nil {
		return e.Err.Error()
	}
	return e.Message
}

// classify turns what one attempt returned into a RequestError and
// decides whether another attempt may help.
func (m *Model) classify(err error, reply *http.Response) *RequestError {
	f := &RequestError{Model: m.name, BaseURL: m.baseURL, isOpenAI: m.isOpenAI, urlSetting: m.urlSetting, keySetting: m.keySetting}
	var own *RequestError
	var apiErr *sdk.Error
	var streamErr *ssestream.StreamError
	switch {
	case errors.As(err, &own):
		own.Model, own.BaseURL, own.isOpenAI = m.name, m.baseURL, m.isOpenAI
		return own
	case errors.As(err, &apiErr):
		f.kind, f.StatusCode = failHTTP, apiErr.StatusCode
		f.Type, f.Code, f.Message = apiErr.Type, apiErr.Code, apiErr.Message
		if apiErr.Response != nil {
			reply = apiErr.Response
		}
		if f.Message == "" {
			f.Message = bodyText(reply)
		}
	case reply != nil && reply.StatusCode >= 400:
		// The SDK could not read an OpenAI error from the body (a
		// proxy's HTML page, {"detail": ...} or Ollama's
		// {"error": "text"}): say what the body says.
		f.kind, f.StatusCode, f.Message = failHTTP, reply.StatusCode, bodyText(reply)
	case errors.As(err, &streamErr):
		// An error event inside a 200 stream: {"error": {...}}.
		f.kind = failModel
		var e struct {
			Error struct{ Type, Code, Message string }
		}
		if json.Unmarshal(streamErr.Event.Data, &e) == nil && e.Error.Message != "" {
			f.Type, f.Code, f.Message = e.Error.Type, e.Error.Code, e.Error.Message
		} else {
			f.Message = strings.TrimSpace(string(streamErr.Event.Data))
		}
		f.retry = transientCode(f.Code, f.Type)
		return f
	case isNetwork(err):
		f.kind, f.Err, f.retry = failNetwork, err, true
		if reply != nil {
			f.kind = failBroken // it answered, then the answer broke off
		}
		return f
	default:
		f.kind, f.Err = failMalformed, err
		return f
	}

	// An HTTP error status.
	if reply != nil {
		f.retryAfter = retryAfter(reply.Header, time.Now())
		f.RetryAfter = f.retryAfter
	}
	s := f.StatusCode
	f.retry = s == http.StatusRequestTimeout || s == http.StatusConflict || s == http.StatusTooManyRequests || s >= 500
	if f.Code == "insufficient_quota" {
		f.retry = false // a 429 that waiting does not fix
	}
	if reply != nil {
		switch reply.Header.Get("X-Should-Retry") {
		case "true":
			f.retry = true
		case "false":
			f.retry = false
		}
	}
	return f
}

// transientCode reports whether an error the API reports inside a stream
// may go away on its own.
func transientCode(code, typ string) bool {
	switch code {
	case "server_error", "rate_limit_exceeded", "server_is_overloaded", "slow_down":
		return true
	}
	return typ == "server_error"
}

// isNetwork reports whether err means the request got no reply, or the
// reply broke off: worth another try.
func isNetwork(err error) bool {
	var netErr net.Error
	var urlErr *url.Error
	return errors.As(err, &netErr) || errors.As(err, &urlErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, errStreamCut)
}

// errStreamCut is a stream that ended before its final event.
var errStreamCut = errors.New("the stream ended before the reply was complete")

// retryAfter is the wait a reply asks for: retry-after-ms (OpenAI's, in
// milliseconds) or Retry-After (seconds, or an HTTP date); 0 if none.
func retryAfter(h http.Header, now time.Time) time.Duration {
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s > 0 {
			return time.Duration(s * float64(time.Second))
		}
		return 0
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// bodyText is the start of an error reply's body, for the message.
func bodyText(r *http.Response) string {
	if r == nil || r.Body == nil {
		return ""
	}
	b, _ := io.ReadAll(io.LimitReader(r.Body, 2048))
	var e struct {
		Error  any    `json:"error"`
		Detail any    `json:"detail"`
		Msg    string `json:"message"`
	}
	if json.Unmarshal(b, &e) == nil {
		for _, v := range []any{e.Error, e.Detail, e.Msg} {
			switch v := v.(type) {
			case string:
				if v != "" {
					return v
				}
			case map[string]any:
				if s, ok := v["message"].(string); ok && s != "" {
					return s
				}
			}
		}
	}
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}
