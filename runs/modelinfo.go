package runs

import (
	"context"
	"errors"
	"strings"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/sandbox"
)

// modelFixes are the ways an operator or a team gives runs a model.
var modelFixes = []string{
	"give the server a key: start cove serve with OPENAI_API_KEY=sk-... in its environment",
	"or point the server at an OpenAI-compatible model server: cove serve --model-base-url http://HOST:PORT/v1 --model NAME",
	"or save the team's own key as the team secret OPENAI_API_KEY on the Settings page (PUT /v1/secrets/OPENAI_API_KEY)",
}

// ModelInfo says which model team's runs use when they name no endpoint
// of their own, and whether they can start: the model is built as a run
// would build it, without calling it. No key or endpoint address is in
// it.
func (s *Service) ModelInfo(ctx context.Context, team string) (api.ModelInfo, error) {
	info := api.ModelInfo{Key: "none"}
	if s.cfg.Models == nil {
		info.Problem = "this server is not set up to run agents: it has no model"
		return info, nil
	}
	switch _, err := s.Secret(ctx, team, "OPENAI_API_KEY"); {
	case err == nil:
		info.Key = "team"
	case !errors.Is(err, sandbox.ErrNotFound):
		return api.ModelInfo{}, err
	case s.cfg.Model.APIKey != "":
		info.Key = "server"
	}
	m, err := s.runModel(ctx, team, api.RunAgent{})
	if errors.Is(err, sandbox.ErrInvalid) {
		info.Problem = s.cfg.Redact(strings.TrimSuffix(err.Error(), ": "+sandbox.ErrInvalid.Error()))
		info.Fix = modelFixes
		return info, nil
	}
	if err != nil {
		return api.ModelInfo{}, err
	}
	info.Configured, info.Model = true, m.Name()
	return info, nil
}
