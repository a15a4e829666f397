package api

// ModelInfo is GET /v1/model: the model a team's runs use when they name
// no endpoint of their own, and whether they can use it. It shows no key
// and no endpoint address.
type ModelInfo struct {
	// Configured is whether a run that names no model endpoint can start.
	Configured bool `json:"configured"`
	// Model is the model such a run uses.
	Model string `json:"model,omitempty"`
	// Key is whose key such a run sends: "team" (the team secret
	// OPENAI_API_KEY), "server" (OPENAI_API_KEY in cove serve's
	// environment) or "none".
	Key string `json:"key"`
	// Problem says why runs cannot start; Fix lists the ways to fix it
	// on this server.
	Problem string   `json:"problem,omitempty"`
	Fix     []string `json:"fix,omitempty"`
}
