package remote

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/cove-sandbox/cove/api"
)

// Error is an error response of the server: what it said, and the request
// id that finds the request in its log. It wraps the sandbox sentinel its
// code stands for, so errors.Is(err, sandbox.ErrNotFound) works across
// the API.
type Error struct {
	// Status is the HTTP status.
	Status int
	// Code is one of the api.Code* constants.
	Code string
	// Message is the server's: it says what was wrong and what to do.
	Message   string
	RequestID string
}

func (e *Error) Error() string {
	msg := e.Message
	if s := e.Unwrap(); s != nil && !strings.HasSuffix(msg, s.Error()) {
		msg += ": " + s.Error()
	}
	return msg
}

// Unwrap returns the sentinel of the error's code, or nil for an internal
// error.
func (e *Error) Unwrap() error { return api.Sentinel(e.Code, e.Status) }

// responseError reads an error response: the server's {code, message,
// request_id}, or whatever a proxy in between sent.
func responseError(resp *http.Response) *Error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &Error{Status: resp.StatusCode, RequestID: resp.Header.Get("X-Request-Id")}
	var body api.Error
	if json.Unmarshal(data, &body) == nil && body.Code != "" {
		e.Code, e.Message = body.Code, body.Message
		if body.RequestID != "" {
			e.RequestID = body.RequestID
		}
		return e
	}
	e.Message = fmt.Sprintf("HTTP %s", resp.Status)
	if text := strings.TrimSpace(string(data)); text != "" && len(text) < 200 && !strings.ContainsAny(text, "<>") {
		e.Message += ": " + text
	}
	return e
}

// checkProxyResponse tells the server's own refusals (an unknown key, a
// stopped or unknown sandbox, an unreachable daemon) from the daemon's
// errors among the responses of /v1/sandboxes/{id}/guest: only the
// server's carry a request_id. The daemon's are left to the daemon's
// client, with the body restored.
func checkProxyResponse(resp *http.Response) error {
	if resp.StatusCode < 400 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		return nil
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(data), resp.Body), resp.Body}
	if err != nil {
		return nil
	}
	var body api.Error
	if json.Unmarshal(data, &body) != nil || body.Code == "" || body.RequestID == "" {
		return nil
	}
	e := &Error{Status: resp.StatusCode, Code: body.Code, Message: body.Message, RequestID: body.RequestID}
	if e.Code == api.CodeUnauthorized {
		return fmt.Errorf("the Cove server refused the API key: %w", e)
	}
	return e
}
