// Package wire holds what the daemon (package guest's Server and its
// services) and its client (guest.Client, guest.Session) must agree on
// beyond the .proto files: Cove's header extensions, envd's error body
// and Basic user, and the one table between the sandbox contract's
// sentinel errors and the wire's error codes and statuses.
package wire

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	"github.com/cove-sandbox/cove/sandbox"
)

// Header names.
const (
	// AccessTokenHeader carries the access token when one is configured
	// (envd's).
	AccessTokenHeader = "X-Access-Token"
	// ConfineHeader, a Cove extension, names a directory (the workspace)
	// a request's paths are confined to, so the daemon refuses symlinks
	// that lead out of it, not only out of the sandbox.
	ConfineHeader = "X-Cove-Confine"
	// NoReplaceHeader, a Cove extension, makes a Move refuse an existing
	// destination (RENAME_NOREPLACE).
	NoReplaceHeader = "X-Cove-No-Replace"
	// StreamHeader, a Cove extension, names a Start or Connect stream so
	// the client can detach it with POST /cove/detach?stream=ID and know,
	// when that returns, that later output waits for the next client.
	// Cancelling a stream alone races with output already in flight.
	StreamHeader = "X-Cove-Stream"
	// DetachedHeader, a Cove extension, makes a Start stream end after
	// the start event: no client takes the output, which waits in the
	// daemon for the first Connect (sandbox.Session.StartDetached).
	// Cancelling the stream after the start event would race with output
	// already sent on it.
	DetachedHeader = "X-Cove-Detached"
	// KillAfterHeader, a Cove extension, makes the daemon kill a started
	// process this many milliseconds after it starts
	// (sandbox.ExecRequest.Timeout). Unlike a Start call's own deadline,
	// it does not end the stream.
	KillAfterHeader = "X-Cove-Kill-After"
	// WorkdirHeader, a Cove extension, names the sandbox directory that
	// the request's relative paths, and a process started without a cwd,
	// start in, in place of the daemon's workdir: E2B's default workdir
	// (envd's defaultWorkdir), /home/user for sandboxes made through the
	// E2B API. A confinement (ConfineHeader) still bases relative paths.
	WorkdirHeader = "X-Cove-Workdir"
	// SudoHeader, a Cove extension, names a user of the sandbox that
	// `sudo` works for, as on E2B's base template. Once a request with
	// the daemon's access token has named one, it keeps sudo until the
	// daemon ends. Daemons started without sudo ignore it.
	SudoHeader = "X-Cove-Sudo"
)

// wireErrors is the one table between the sandbox contract's sentinel
// errors and the daemon's two wire forms of an error: the Connect code of
// an RPC's, and the HTTP status of envd's {"message","code"} body. The
// daemon reads it one way (CodeFor, HTTPStatus), the client the other
// (SentinelFor, SentinelForStatus), so errors.Is works across the
// daemon's API. The first row of a sentinel is the form the daemon sends;
// the others are forms a client may meet (a proxy's 502, envd's 403). A
// zero code or status is no form. Statuses are unique per sentinel, as
// envd's body has no code of its own to tell two apart.
var wireErrors = []struct {
	err    error
	code   connect.Code
	status int
}{
	{sandbox.ErrInvalid, connect.CodeInvalidArgument, http.StatusBadRequest},
	{sandbox.ErrNotFound, connect.CodeNotFound, http.StatusNotFound},
	{sandbox.ErrExist, connect.CodeAlreadyExists, http.StatusConflict},
	{sandbox.ErrPermission, connect.CodePermissionDenied, http.StatusUnauthorized},
	{sandbox.ErrPermission, connect.CodeUnauthenticated, http.StatusForbidden},
	{sandbox.ErrLimit, connect.CodeResourceExhausted, http.StatusInsufficientStorage},
	{sandbox.ErrLimit, 0, http.StatusRequestEntityTooLarge},
	{sandbox.ErrLimit, 0, http.StatusTooManyRequests},
	{sandbox.ErrState, connect.CodeFailedPrecondition, http.StatusPreconditionFailed},
	{sandbox.ErrUnavailable, connect.CodeUnavailable, http.StatusServiceUnavailable},
	{sandbox.ErrUnavailable, 0, http.StatusBadGateway},
	{sandbox.ErrUnavailable, 0, http.StatusGatewayTimeout},
}

// ConnectError turns an error into a Connect error with the code the
// sandbox sentinel calls for, keeping the message.
func ConnectError(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	return connect.NewError(CodeFor(err), err)
}

// CodeFor is the Connect code of err's sentinel; CodeInternal for none.
func CodeFor(err error) connect.Code {
	for _, w := range wireErrors {
		if errors.Is(err, w.err) {
			return w.code
		}
	}
	return connect.CodeInternal
}

// HTTPStatus is the envd HTTP status of err's sentinel; 500 for none.
func HTTPStatus(err error) int {
	for _, w := range wireErrors {
		if errors.Is(err, w.err) {
			return w.status
		}
	}
	return http.StatusInternalServerError
}

// HasSentinel reports whether err wraps one of the sandbox sentinels.
func HasSentinel(err error) bool {
	for _, w := range wireErrors {
		if errors.Is(err, w.err) {
			return true
		}
	}
	return false
}

// SentinelFor maps a Connect code from the wire back to the sandbox
// sentinel, so errors.Is works on the client side; nil for none.
func SentinelFor(code connect.Code) error {
	for _, w := range wireErrors {
		if w.code == code && code != 0 {
			return w.err
		}
	}
	return nil
}

// SentinelForStatus maps an envd HTTP status back to the sandbox
// sentinel; nil for none.
func SentinelForStatus(status int) error {
	for _, w := range wireErrors {
		if w.status == status && status != 0 {
			return w.err
		}
	}
	return nil
}

// WithSentinel is the client's form of an error from the wire: msg, the
// daemon's message, wrapping the sentinel s its code or status maps to.
// The daemon's message of an error that wraps s already ends in s's
// text; it is not added twice.
func WithSentinel(msg string, s error) error {
	if msg != s.Error() && !strings.HasSuffix(msg, ": "+s.Error()) {
		msg += ": " + s.Error()
	}
	return &sentinelError{msg: msg, err: s}
}

type sentinelError struct {
	msg string
	err error
}

func (e *sentinelError) Error() string { return e.msg }
func (e *sentinelError) Unwrap() error { return e.err }

// WriteError writes envd's error shape: {"message": ..., "code": N}.
func WriteError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(struct {
		Message string `json:"message"`
		Code    int    `json:"code"`
	}{msg, status})
}

// BasicUser encodes a user name as envd's Basic authorization value.
func BasicUser(user string) string {
	return base64.StdEncoding.EncodeToString([]byte(user + ":"))
}

// RequestUserName is the user envd's clients name in a Basic
// authorization header ("user:"), or "".
func RequestUserName(h interface{ Get(string) string }) (string, error) {
	auth := h.Get("Authorization")
	if !strings.HasPrefix(auth, "Basic ") {
		return "", nil
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(auth, "Basic "))
	if err != nil {
		return "", fmt.Errorf("malformed Basic authorization header: want base64 of \"user:\": %w", sandbox.ErrInvalid)
	}
	name, _, _ := strings.Cut(string(raw), ":")
	return name, nil
}
