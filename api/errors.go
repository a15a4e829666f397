package api

import (
	"errors"
	"net/http"

	"github.com/cove-sandbox/cove/sandbox"
)

// codes is the one table between the sandbox contract's sentinel errors
// and the API's error codes and statuses: the server reads it one way
// (CodeOf), the Go client the other (Sentinel), so errors.Is works across
// the API. The first row of a sentinel is the one the server sends.
var codes = []struct {
	err    error
	code   string
	status int
}{
	{sandbox.ErrInvalid, CodeInvalid, http.StatusBadRequest},
	{sandbox.ErrNotFound, CodeNotFound, http.StatusNotFound},
	{sandbox.ErrState, CodeState, http.StatusConflict},
	{sandbox.ErrExist, CodeExists, http.StatusConflict},
	{sandbox.ErrLimit, CodeLimit, http.StatusTooManyRequests},
	{sandbox.ErrLimit, CodeTooLarge, http.StatusRequestEntityTooLarge},
	{sandbox.ErrPermission, CodeForbidden, http.StatusForbidden},
	{sandbox.ErrPermission, CodeUnauthorized, http.StatusUnauthorized},
	{sandbox.ErrUnavailable, CodeUnavailable, http.StatusServiceUnavailable},
	{sandbox.ErrUnavailable, CodeUpstream, http.StatusBadGateway},
	{sandbox.ErrState, CodeIdempotencyInFlight, http.StatusConflict},
	{sandbox.ErrInvalid, CodeIdempotencyMismatch, http.StatusUnprocessableEntity},
}

// CodeOf is the status and code the server answers err with: a sentinel's
// row, else a 500 internal error.
func CodeOf(err error) (status int, code string) {
	for _, c := range codes {
		if errors.Is(err, c.err) {
			return c.status, c.code
		}
	}
	return http.StatusInternalServerError, CodeInternal
}

// Sentinel is the sandbox error of an error response: by its code, or,
// for a code this client does not know or a response that is not the
// server's (a proxy's 502), by its status. nil for an internal error.
func Sentinel(code string, status int) error {
	if code == CodeInternal {
		return nil
	}
	for _, c := range codes {
		if c.code == code {
			return c.err
		}
	}
	for _, c := range codes {
		if c.status == status {
			return c.err
		}
	}
	if status == http.StatusGatewayTimeout {
		return sandbox.ErrUnavailable
	}
	return nil
}
