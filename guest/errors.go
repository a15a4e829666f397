package guest

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	"github.com/cove-sandbox/cove/sandbox"
)

// wireErrors is the one table between the sandbox contract's sentinel
// errors and the daemon's two wire forms of an error: the Connect code of
// an RPC's, and the HTTP status of envd's {"message","code"} body. The
// daemon reads it one way (codeFor, httpStatus), the client the other
// (sentinelFor, sentinelForStatus), so errors.Is works across the
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

// connectError turns an error into a Connect error with the code the
// sandbox sentinel calls for, keeping the message.
func connectError(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	return connect.NewError(codeFor(err), err)
}

// codeFor is the Connect code of err's sentinel; CodeInternal for none.
func codeFor(err error) connect.Code {
	for _, w := range wireErrors {
		if errors.Is(err, w.err) {
			return w.code
		}
	}
	return connect.CodeInternal
}

// httpStatus is the envd HTTP status of err's sentinel; 500 for none.
func httpStatus(err error) int {
	for _, w := range wireErrors {
		if errors.Is(err, w.err) {
			return w.status
		}
	}
	return http.StatusInternalServerError
}

// hasSentinel reports whether err wraps one of the sandbox sentinels.
func hasSentinel(err error) bool {
	for _, w := range wireErrors {
		if errors.Is(err, w.err) {
			return true
		}
	}
	return false
}

// sentinelFor maps a Connect code from the wire back to the sandbox
// sentinel, so errors.Is works on the client side; nil for none.
func sentinelFor(code connect.Code) error {
	for _, w := range wireErrors {
		if w.code == code && code != 0 {
			return w.err
		}
	}
	return nil
}

// sentinelForStatus maps an envd HTTP status back to the sandbox
// sentinel; nil for none.
func sentinelForStatus(status int) error {
	for _, w := range wireErrors {
		if w.status == status && status != 0 {
			return w.err
		}
	}
	return nil
}

// httpError reads envd's {"message","code"} error body and maps the
// status to a sandbox sentinel.
func httpError(resp *http.Response) error {
	var body struct {
		Message string `json:"message"`
		Code    int    `json:"code"`
	}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if json.Unmarshal(data, &body) != nil || body.Message == "" {
		body.Message = strings.TrimSpace(string(data))
		if body.Message == "" {
			body.Message = resp.Status
		}
	}
	s := sentinelForStatus(resp.StatusCode)
	if s == nil {
		return fmt.Errorf("sandbox daemon: HTTP %d: %s", resp.StatusCode, body.Message)
	}
	return fmt.Errorf("%s: %w", body.Message, s)
}

// basicUser encodes a user name as envd's Basic authorization value.
func basicUser(user string) string {
	return base64.StdEncoding.EncodeToString([]byte(user + ":"))
}
