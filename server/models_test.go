package server

import (
	"context"

	"github.com/cove-sandbox/cove/agent"
	"github.com/cove-sandbox/cove/agent/model/openai"
	"github.com/cove-sandbox/cove/runs"
)

// testModels is the model factory of the tests' servers: internal/app's,
// which the server cannot import (app wires the server).
func testModels(ctx context.Context, spec runs.ModelSpec) (agent.Model, error) {
	m, err := openai.New(openai.Config{Model: spec.Model, APIKey: spec.APIKey, BaseURL: spec.BaseURL, API: openai.API(spec.API),
		NoEnv: true, HTTPClient: spec.HTTPClient, BaseURLSetting: spec.BaseURLSetting, KeySetting: spec.KeySetting})
	if err != nil {
		return nil, err
	}
	return m, nil
}
