package openai_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/cove-sandbox/cove/agent"
	"github.com/cove-sandbox/cove/agent/model/fake"
)

// TestRunner runs the real Runner over this model and the fake server:
// the end-to-end shape of an agent test.
func TestRunner(t *testing.T) {
	for _, api := range apis {
		t.Run(string(api), func(t *testing.T) {
			srv := fake.NewServer(t,
				fake.Call("add", `{"a":2,"b":3}`).WithUsage(fake.Usage{InputTokens: 100, OutputTokens: 10}),
				fake.Func(func(r *fake.Request) fake.Turn {
					if out, _ := r.ToolOutput("call_1"); out != "5" {
						return fake.Error(400, "the tool output did not come back: "+out)
					}
					return fake.Text("2 + 3 = 5").WithUsage(fake.Usage{InputTokens: 120, CachedTokens: 100, OutputTokens: 8})
				}),
			)
			m := newModel(t, srv, api)
			add := agent.FunctionTool{
				Name:        "add",
				Description: "Add two numbers.",
				Parameters:  map[string]any{"type": "object", "properties": map[string]any{"a": map[string]any{"type": "number"}, "b": map[string]any{"type": "number"}}},
				Fn: func(_ context.Context, args json.RawMessage) (string, error) {
					var in struct{ A, B int }
					if err := json.Unmarshal(args, &in); err != nil {
						return "", err
					}
					b, _ := json.Marshal(in.A + in.B)
					return string(b), nil
				},
			}
			var deltas string
			res, err := (&agent.Runner{}).Run(context.Background(),
				&agent.Agent{Name: "calc", Instructions: "Use the tool.", Model: m, Tools: []agent.Tool{add}},
				"what is 2 + 3?",
				agent.RunConfig{OnEvent: func(e agent.Event) {
					if e.Type == agent.EventTextDelta {
						deltas += e.Text
					}
				}})
			if err != nil {
				t.Fatal(err)
			}
			if res.Output != "2 + 3 = 5" || deltas != "2 + 3 = 5" {
				t.Errorf("output %q, streamed %q", res.Output, deltas)
			}
			want := agent.Usage{Requests: 2, InputTokens: 220, CachedInputTokens: 100, OutputTokens: 18}
			if res.Usage != want {
				t.Errorf("usage = %+v, want %+v", res.Usage, want)
			}
			if !res.CostKnown || res.Cost <= 0 {
				t.Errorf("cost %v known %v, want a price for %s", res.Cost, res.CostKnown, m.Name())
			}
			if srv.Pending() != 0 {
				t.Errorf("%d turns left unused", srv.Pending())
			}
		})
	}
}
