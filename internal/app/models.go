package app

import (
	"context"
	"log/slog"

	"github.com/cove-sandbox/cove/agent"
	"github.com/cove-sandbox/cove/agent/model/openai"
	"github.com/cove-sandbox/cove/runs"
)

// Runs' model failures are worded for tenants from what openai's
// RequestError says through runs.ModelCallError.
var _ runs.ModelCallError = (*openai.RequestError)(nil)

// Models returns the model factory of agent runs: OpenAI's APIs
// (Responses, Chat Completions) and the servers compatible with them.
// Nothing comes from the environment: the runs service chooses each
// run's endpoint and key. log hears of retries.
func Models(log *slog.Logger) runs.ModelFactory {
	return func(ctx context.Context, spec runs.ModelSpec) (agent.Model, error) {
		m, err := openai.New(openai.Config{Model: spec.Model, APIKey: spec.APIKey, BaseURL: spec.BaseURL, API: openai.API(spec.API),
			NoEnv: true, HTTPClient: spec.HTTPClient, Logger: log,
			BaseURLSetting: spec.BaseURLSetting, KeySetting: spec.KeySetting})
		if err != nil {
			return nil, err
		}
		return m, nil
	}
}

// ModelBaseURL is the operator's model endpoint for runs.ModelConfig:
// base, or OpenAI's API when base is "".
func ModelBaseURL(base string) string {
	if base == "" {
		return openai.DefaultBaseURL
	}
	return base
}
