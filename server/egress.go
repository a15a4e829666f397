package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/cove-sandbox/cove/agent"
	"github.com/cove-sandbox/cove/agent/model/openai"
	"github.com/cove-sandbox/cove/egress"
)

// tenantModel is a run's model with its failures worded for the tenant:
// what failed and a reference to the server's log, never the reply's
// body. The body of a failed call can be anything the endpoint sends
// (an internal service's page, a proxy's error), and the endpoint may be
// one the tenant should not read.
type tenantModel struct {
	agent.Model
	log     *slog.Logger
	baseURL string
}

func (m tenantModel) Respond(ctx context.Context, req agent.ModelRequest, delta func(string)) (*agent.ModelResponse, error) {
	resp, err := m.Model.Respond(ctx, req, delta)
	if err != nil {
		err = m.failure(err)
	}
	return resp, err
}

// failure rewords a failed model call.
func (m tenantModel) failure(err error) error {
	var re *openai.RequestError
	if !errors.As(err, &re) {
		// Not a request that went out (a cancelled run, a request the
		// client could not build): nothing of a reply in it.
		return err
	}
	ref := newID("ref_")
	m.log.Warn("a run's model call failed", "ref", ref, "base_url", m.baseURL, "err", err)
	var refused *egress.Error
	var msg string
	switch {
	case errors.As(err, &refused):
		msg = fmt.Sprintf("cannot reach the model at %s: %s", m.baseURL, refused.Error())
	case re.StatusCode != 0:
		msg = fmt.Sprintf("calling model %q at %s: HTTP %d %s", re.Model, m.baseURL, re.StatusCode, http.StatusText(re.StatusCode))
		switch re.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden:
			msg += "; check the run's API key (agent.api_key_secret)"
		case http.StatusNotFound:
			msg += "; check the model name and agent.base_url"
		}
	case errors.Is(err, context.DeadlineExceeded):
		msg = fmt.Sprintf("calling model %q at %s: no answer in time", re.Model, m.baseURL)
	default:
		msg = fmt.Sprintf("calling model %q at %s: the call failed", re.Model, m.baseURL)
	}
	return &tenantError{msg: msg + " (the server's log has the details under reference " + ref + ")", err: err}
}

// tenantError is an error with a message fit for the tenant; errors.Is
// and As still see the cause.
type tenantError struct {
	msg string
	err error
}

func (e *tenantError) Error() string { return e.msg }
func (e *tenantError) Unwrap() error { return e.err }
