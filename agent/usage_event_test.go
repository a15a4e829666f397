package agent_test

import (
	"context"
	"slices"
	"testing"

	"github.com/cove-sandbox/cove/agent"
)

// TestUsageEventAfterEachCall: a caller showing a run live learns the
// usage so far, its cost and the model after every model call, before the
// tools of that call run and before the run ends.
func TestUsageEventAfterEachCall(t *testing.T) {
	a := &agent.Agent{Name: "u", Model: &scripted{turns: []func(agent.ModelRequest) []agent.Item{
		call("c1", "echo", `{"text":"x"}`), call("c2", "echo", `{"text":"y"}`), say("done")}},
		Tools: []agent.Tool{echoTool()}}
	var usage []agent.Event
	var order []agent.EventType
	res, err := (&agent.Runner{}).Run(context.Background(), a, "go", agent.RunConfig{OnEvent: func(e agent.Event) {
		order = append(order, e.Type)
		if e.Type == agent.EventUsage {
			usage = append(usage, e)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(usage) != 3 {
		t.Fatalf("%d usage events, want one per model call (3): %v", len(usage), order)
	}
	for i, e := range usage {
		n := int64(i + 1)
		if e.Usage == nil || e.Usage.Requests != n || e.Usage.InputTokens != 100*n || e.Usage.OutputTokens != 10*n {
			t.Errorf("usage event %d: %+v, want the run's total after %d calls", i, e.Usage, n)
		}
		want, _ := agent.Cost("gpt-4o-mini", *e.Usage, nil)
		if e.Model != "gpt-4o-mini" || e.Cost == nil || *e.Cost != want {
			t.Errorf("usage event %d: model %q cost %v, want gpt-4o-mini and %v", i, e.Model, e.Cost, want)
		}
	}
	if *usage[2].Usage != res.Usage {
		t.Errorf("last usage event %+v, result %+v: want the same", *usage[2].Usage, res.Usage)
	}
	// The first call's usage is known before its tool runs.
	for i, typ := range order {
		if typ == agent.EventToolCallStarted {
			if !slices.Contains(order[:i], agent.EventUsage) {
				t.Errorf("events %v: the first tool started before any usage event", order)
			}
			break
		}
	}
}
