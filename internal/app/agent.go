package app

import (
	"github.com/cove-sandbox/cove/agent"
	"github.com/cove-sandbox/cove/agent/model/openai"
)

// RunModel is the model of `cove run`: OpenAI's Responses API, or Chat
// Completions for an OpenAI-compatible server at baseURL (api "responses"
// or "chat" says which; "" picks by the server). Its key is
// OPENAI_API_KEY, which stays in this process.
func RunModel(name, baseURL, api string) (agent.Model, error) {
	m, err := openai.New(openai.Config{Model: name, BaseURL: baseURL, API: openai.API(api)})
	if err != nil {
		return nil, err
	}
	return m, nil
}
