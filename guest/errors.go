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

func codeFor(err error) connect.Code {
	switch {
	case errors.Is(err, sandbox.ErrInvalid):
		return connect.CodeInvalidArgument
	case errors.Is(err, sandbox.ErrNotFound):
		return connect.CodeNotFound
	case errors.Is(err, sandbox.ErrExist):
		return connect.CodeAlreadyExists
	case errors.Is(err, sandbox.ErrPermission):
		return connect.CodePermissionDenied
	case errors.Is(err, sandbox.ErrLimit):
		return connect.CodeResourceExhausted
	case errors.Is(err, sandbox.ErrState):
		return connect.CodeFailedPrecondition
	case errors.Is(err, sandbox.ErrUnavailable):
		return connect.CodeUnavailable
	}
	return connect.CodeInternal
}

// httpStatus is the envd HTTP status for an error.
func httpStatus(err error) int {
	switch {
	case errors.Is(err, sandbox.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, sandbox.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, sandbox.ErrExist):
		return http.StatusConflict
	case errors.Is(err, sandbox.ErrPermission):
		return http.StatusUnauthorized
	case errors.Is(err, sandbox.ErrLimit):
		return http.StatusInsufficientStorage
	}
	return http.StatusInternalServerError
}

// sentinelFor maps a Connect code from the wire back to the sandbox
// sentinel, so errors.Is works on the client side.
func sentinelFor(code connect.Code) error {
	switch code {
	case connect.CodeInvalidArgument:
		return sandbox.ErrInvalid
	case connect.CodeNotFound:
		return sandbox.ErrNotFound
	case connect.CodeAlreadyExists:
		return sandbox.ErrExist
	case connect.CodePermissionDenied, connect.CodeUnauthenticated:
		return sandbox.ErrPermission
	case connect.CodeResourceExhausted:
		return sandbox.ErrLimit
	case connect.CodeFailedPrecondition:
		return sandbox.ErrState
	case connect.CodeUnavailable:
		return sandbox.ErrUnavailable
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
	var s error
	switch resp.StatusCode {
	case http.StatusBadRequest:
		s = sandbox.ErrInvalid
	case http.StatusNotFound:
		s = sandbox.ErrNotFound
	case http.StatusConflict:
		s = sandbox.ErrExist
	case http.StatusUnauthorized, http.StatusForbidden:
		s = sandbox.ErrPermission
	case http.StatusInsufficientStorage, http.StatusRequestEntityTooLarge, http.StatusTooManyRequests:
		s = sandbox.ErrLimit
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		s = sandbox.ErrUnavailable
	default:
		return fmt.Errorf("sandbox daemon: HTTP %d: %s", resp.StatusCode, body.Message)
	}
	return fmt.Errorf("%s: %w", body.Message, s)
}

// basicUser encodes a user name as envd's Basic authorization value.
func basicUser(user string) string {
	return base64.StdEncoding.EncodeToString([]byte(user + ":"))
}
