package openai_test

import (
	"testing"

	"github.com/cove-sandbox/cove/agent"
	"github.com/cove-sandbox/cove/agent/model/openai"
)

// TestDefaultModelsHaveAPrice: a run on the default model (cove serve's
// and cove run's when none is named) shows its cost, and so do its
// dated snapshots and the 5.1 family's variants.
func TestDefaultModelsHaveAPrice(t *testing.T) {
	u := agent.Usage{Requests: 1, InputTokens: 1000, OutputTokens: 100}
	for _, name := range []string{openai.DefaultModel, openai.DefaultModel + "-2025-11-13", "gpt-5.1-codex", "gpt-5.1-codex-mini", "gpt-5-mini"} {
		if c, ok := agent.Cost(name, u, nil); !ok || c <= 0 {
			t.Errorf("%s: cost %v known %v, want a price", name, c, ok)
		}
	}
}
