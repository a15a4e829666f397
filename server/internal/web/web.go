// Package web holds what every front door of the server shares: JSON
// and error bodies, request ids, the mapping of errors to what a caller
// is told (never a host detail), and reading a request's API key.
package web

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/cove-sandbox/cove/api"
)

type reqIDKey struct{}

// WithRequestID is r with its request id.
func WithRequestID(r *http.Request, id string) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), reqIDKey{}, id))
}

// RequestID is the id of a request (set by the server's handler).
func RequestID(r *http.Request) string {
	id, _ := r.Context().Value(reqIDKey{}).(string)
	return id
}

// KeyFrom reads the key of a request: "Authorization: Bearer cove_...",
// or X-API-Key as E2B's clients send it. A WebSocket handshake may carry
// it as ?access_token= instead, for clients that cannot set headers on
// one (the web UI signs in with a cookie instead); nothing else takes a
// key from the URL, where logs would keep it.
func KeyFrom(r *http.Request) string {
	if v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return strings.TrimSpace(v)
	}
	if k := strings.TrimSpace(r.Header.Get("X-API-Key")); k != "" {
		return k
	}
	if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		return r.URL.Query().Get("access_token")
	}
	return ""
}

// WriteJSON writes v with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// WriteError writes the Cove API's {code, message, request_id} body.
func WriteError(w http.ResponseWriter, r *http.Request, status int, code, msg string) {
	WriteJSON(w, status, api.Error{Code: code, Message: msg, RequestID: RequestID(r)})
}

// Errors turns the errors of requests into what their callers are told.
type Errors struct {
	Log *slog.Logger
	// DataDir is the server's own directory, never named to a tenant.
	DataDir string
}

// Fail answers a request that failed with err (see Failure) in the Cove
// API's error body.
func (e *Errors) Fail(w http.ResponseWriter, r *http.Request, err error) {
	status, code, msg := e.Failure(r, err)
	WriteError(w, r, status, code, msg)
}

// Failure maps an error to its status, code and message: the sandbox
// sentinels to 4xx with their message (it says what was wrong), anything
// else to a 500 whose message is only the request id (the cause goes to
// the log).
func (e *Errors) Failure(r *http.Request, err error) (status int, code, msg string) {
	status, code = StatusOf(err)
	msg = err.Error()
	switch {
	case status == http.StatusInternalServerError:
		e.Log.Error("internal error", "request_id", RequestID(r), "method", r.Method, "path", r.URL.Path, "err", err)
		msg = "internal error; quote request id " + RequestID(r)
	case status == http.StatusServiceUnavailable || e.HostDetail(msg):
		// The runtime's and the daemon's words: host paths, log
		// lines (hostdetail.go).
		e.Log.Warn("a failure's detail kept from the tenant", "request_id", RequestID(r), "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
		msg = publicMessage(status, code) + "; quote request id " + RequestID(r)
	}
	return status, code, msg
}

// StatusOf is the status and API error code of err.
func StatusOf(err error) (int, string) {
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return http.StatusRequestEntityTooLarge, api.CodeTooLarge
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, api.CodeUnavailable
	}
	return api.CodeOf(err)
}

// DecodeJSON reads one JSON object from r into v, refusing unknown
// fields and anything after the object.
func DecodeJSON(r io.Reader, v any) error {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("data after the JSON object")
	}
	return err
}

// JSONMessage says what is wrong with a JSON body that did not decode.
func JSONMessage(err error) string {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	msg := err.Error()
	switch {
	case errors.Is(err, io.EOF):
		msg = "the request body is empty; send a JSON object"
	case errors.Is(err, io.ErrUnexpectedEOF):
		msg = "malformed JSON: the body ends before the object does"
	case errors.As(err, &te):
		msg = fmt.Sprintf("field %q must be %s, not %s", te.Field, te.Type, te.Value)
	case errors.As(err, &se):
		msg = fmt.Sprintf("malformed JSON at byte %d: %v", se.Offset, se)
	case strings.HasPrefix(msg, "json: unknown field "):
		msg = "unknown field " + strings.TrimPrefix(msg, "json: unknown field ") + "; see /openapi.json"
	}
	return msg
}

// NewID returns prefix + 12 random hex digits.
func NewID(prefix string) string {
	b := make([]byte, 6)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}
