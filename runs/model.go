package runs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"

	"github.com/cove-sandbox/cove/agent"
	"github.com/cove-sandbox/cove/agent/capabilities"
	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/egress"
	"github.com/cove-sandbox/cove/sandbox"
)

// ModelFactory makes the model of a run from its spec. The wiring
// provides it (internal/app, over agent/model/openai), so this package
// knows no concrete model. Its error says what is wrong with the spec;
// the service words it for the tenant.
type ModelFactory func(ctx context.Context, spec ModelSpec) (agent.Model, error)

// ModelSpec is the model a run asked for, with the endpoint and key the
// service chose for it.
type ModelSpec struct {
	// Model is the model's name: the run's, else (at the operator's
	// endpoint) the server's default; "" leaves it to the factory.
	Model string
	// BaseURL is the endpoint, ending before the API's path.
	BaseURL string
	// API is "responses", "chat" or "" (the factory picks by endpoint).
	API string
	// APIKey is the key to send; "" sends none. The factory reads no
	// key, endpoint or other setting from the environment.
	APIKey string
	// HTTPClient makes the calls: the operator's for its own endpoint,
	// the outbound policy's for one a run names.
	HTTPClient *http.Client
	// BaseURLSetting and KeySetting name, in the model's error messages,
	// where the tenant sets the base URL and the key.
	BaseURLSetting, KeySetting string
}

// ModelCallError is what a factory's model returns, somewhere in its
// error's chain, for a call that went out to the endpoint and failed for
// good (agent/model/openai's RequestError is one). The service words such
// a failure for the tenant from these alone: the reply's body can be
// anything the endpoint sends (an internal service's page, a proxy's
// error) and the endpoint may be one the tenant should not read.
type ModelCallError interface {
	error
	// ModelName is the model called.
	ModelName() string
	// HTTPStatus is the reply's status, 0 when no reply came.
	HTTPStatus() int
}

// runAgent builds the agent of a run.
func (s *Service) runAgent(ctx context.Context, team string, ag api.RunAgent) (*agent.Agent, error) {
	m, err := s.runModel(ctx, team, ag)
	if err != nil {
		return nil, err
	}
	var policy agent.ApprovalPolicy
	switch ag.Approval {
	case "", "risky":
		policy = agent.ApproveRisky
	case "all":
		policy = agent.ApproveAll
	case "never":
	default:
		return nil, invalid("agent.approval %q: want never, risky or all", ag.Approval)
	}
	// The capabilities a run may name are the standard ones, by the
	// names they give themselves.
	var caps []agent.Capability
	all := capabilities.All()
	for _, name := range ag.Capabilities {
		i := slices.IndexFunc(all, func(c agent.Capability) bool { return c.Name() == name })
		if i < 0 {
			names := make([]string, len(all))
			for j, c := range all {
				names[j] = c.Name()
			}
			return nil, invalid("agent.capabilities: %q is not one; want one of %s", name, strings.Join(names, ", "))
		}
		caps = append(caps, all[i])
	}
	if caps == nil {
		// A run that names none gets the standard set, as before
		// capabilities had to be given explicitly.
		caps = capabilities.Default()
	}
	if ag.MaxTurns < 0 || ag.MaxTurns > 1000 {
		return nil, invalid("agent.max_turns %d: want 1 to 1000 (0 for %d)", ag.MaxTurns, agent.DefaultMaxTurns)
	}
	name := ag.Name
	if name == "" {
		name = "cove"
	}
	return &agent.Agent{Name: name, Instructions: ag.Instructions, Model: m, Approval: policy,
		Sandbox: &agent.SandboxAgent{Capabilities: caps}}, nil
}

// runModel picks a run's model endpoint and key. The server's own key
// goes only to the server's own endpoint: a run that names another base
// URL gets the team's secret, or no key.
func (s *Service) runModel(ctx context.Context, team string, ag api.RunAgent) (agent.Model, error) {
	if s.cfg.Models == nil {
		return nil, invalid("this server is not set up to run agents (it has no model)")
	}
	secretName, named := ag.APIKeySecret, ag.APIKeySecret != ""
	if !named {
		secretName = "OPENAI_API_KEY"
	}
	key, err := s.Secret(ctx, team, secretName)
	switch {
	case errors.Is(err, sandbox.ErrNotFound) && named:
		return nil, invalid("agent.api_key_secret: the team has no secret %q; set it with PUT /v1/secrets/%s", secretName, secretName)
	case errors.Is(err, sandbox.ErrNotFound):
		key = ""
	case err != nil:
		return nil, err
	}
	own := s.ownModelURL()
	base := strings.TrimRight(ag.BaseURL, "/")
	if base == "" {
		base = own
	}
	spec := ModelSpec{Model: ag.Model, BaseURL: base, API: ag.API, APIKey: key,
		BaseURLSetting: "the run's agent.base_url",
		KeySetting:     "the team secret " + secretName + " (PUT /v1/secrets/" + secretName + ")"}
	// The operator's endpoint is trusted; one a run names is reached
	// only under the outbound policy.
	spec.HTTPClient = s.egress.Client()
	if base == own {
		ownSettings(&spec, named)
		spec.HTTPClient = s.cfg.Model.HTTPClient
		if spec.APIKey == "" {
			spec.APIKey = s.cfg.Model.APIKey
		}
		if spec.Model == "" {
			spec.Model = s.cfg.Model.DefaultModel
		}
		if spec.API == "" {
			spec.API = s.cfg.Model.API
		}
	}
	// The operator's endpoint may be an internal address a tenant should
	// not learn: what a tenant reads calls it by its role.
	shown := base
	if base == own {
		shown = ownModelName
	}
	m, err := s.cfg.Models(ctx, spec)
	if err != nil {
		msg := err.Error()
		if base == own {
			msg = strings.ReplaceAll(msg, own, ownModelName)
			return nil, invalid("the server's model: %s", msg)
		}
		return nil, invalid("the run's model: %s (a team sets its key with PUT /v1/secrets/OPENAI_API_KEY; the server's own comes from OPENAI_API_KEY where cove serve runs)", msg)
	}
	return tenantModel{Model: m, log: s.log, baseURL: base, shown: shown}, nil
}

// ownModelName is how a tenant reads of the operator's model endpoint.
const ownModelName = "the server's model endpoint"

// ownModelURL is the operator's model endpoint, as runs compare it.
func (s *Service) ownModelURL() string {
	return strings.TrimRight(s.cfg.Model.BaseURL, "/")
}

// tenantModel is a run's model with its failures worded for the tenant:
// what failed and a reference to the server's log, never the reply's
// body. The body of a failed call can be anything the endpoint sends
// (an internal service's page, a proxy's error), and the endpoint may be
// one the tenant should not read.
type tenantModel struct {
	agent.Model
	log     *slog.Logger
	baseURL string
	// shown is the endpoint as the tenant reads it: the base URL the run
	// named, or ownModelName.
	shown string
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
	var re ModelCallError
	if !errors.As(err, &re) {
		// Not a request that went out (a cancelled run, a request the
		// client could not build): nothing of a reply in it.
		return err
	}
	ref := newID("ref_")
	m.log.Warn("a run's model call failed", "ref", ref, "base_url", m.baseURL, "err", err)
	var refused *egress.Error
	var msg string
	switch status := re.HTTPStatus(); {
	case errors.As(err, &refused):
		msg = fmt.Sprintf("cannot reach the model at %s: %s", m.shown, refused.Error())
	case status != 0:
		msg = fmt.Sprintf("calling model %q at %s: HTTP %d %s", re.ModelName(), m.shown, status, http.StatusText(status))
		msg += m.hint(status)
	case errors.Is(err, context.DeadlineExceeded):
		msg = fmt.Sprintf("calling model %q at %s: no answer in time", re.ModelName(), m.shown)
	default:
		msg = fmt.Sprintf("calling model %q at %s: the call failed", re.ModelName(), m.shown)
	}
	return &tenantError{msg: msg + " (the server's log has the details under reference " + ref + ")", err: err}
}

// hint says where to fix a call refused with status: the server's
// settings for its own endpoint, the run's for one it named.
func (m tenantModel) hint(status int) string {
	own := m.shown == ownModelName
	switch {
	case (status == http.StatusUnauthorized || status == http.StatusForbidden) && own:
		return "; check the key: OPENAI_API_KEY in cove serve's environment, or the team secret OPENAI_API_KEY (or the run's agent.api_key_secret)"
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return "; check the run's API key (agent.api_key_secret)"
	case status == http.StatusNotFound && own:
		return "; check the model name (the run's agent.model, or cove serve's --model) and cove serve's --model-base-url"
	case status == http.StatusNotFound:
		return "; check the model name and agent.base_url"
	}
	return ""
}

// tenantError is an error with a message fit for the tenant; errors.Is
// and As still see the cause.
type tenantError struct {
	msg string
	err error
}

func (e *tenantError) Error() string { return e.msg }
func (e *tenantError) Unwrap() error { return e.err }
