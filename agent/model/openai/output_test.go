package openai_test

import (
	"context"
	"testing"

	"github.com/cove-sandbox/cove/agent"
	"github.com/cove-sandbox/cove/agent/model/fake"
	"github.com/cove-sandbox/cove/agent/model/openai"
)

type triage struct {
	Priority string   `json:"priority" description:"P1, P2 or P3"`
	Teams    []string `json:"teams"`
	Urgent   bool     `json:"urgent"`
}

// TestOutputType: an agent with an OutputType sends the schema the way
// each API takes it (Responses: text.format; Chat: response_format), and
// the final answer decodes into the Go type.
func TestOutputType(t *testing.T) {
	for _, api := range []openai.API{openai.Responses, openai.Chat} {
		t.Run(string(api), func(t *testing.T) {
			var format map[string]any
			srv := fake.NewServer(t, fake.Func(func(r *fake.Request) fake.Turn {
				if api == openai.Responses {
					text, _ := r.Body["text"].(map[string]any)
					format, _ = text["format"].(map[string]any)
				} else {
					rf, _ := r.Body["response_format"].(map[string]any)
					format, _ = rf["json_schema"].(map[string]any)
					if rf["type"] != "json_schema" {
						format = nil
					}
				}
				return fake.Text(`{"priority":"P1","teams":["ops"],"urgent":true}`)
			}))
			m, err := openai.New(openai.Config{Model: "gpt-5.1", BaseURL: srv.URL, APIKey: "k", API: api})
			if err != nil {
				t.Fatal(err)
			}
			a := &agent.Agent{Name: "o", Model: m, OutputType: agent.OutputFor[triage]("triage")}
			res, err := (&agent.Runner{}).Run(context.Background(), a, "triage this", agent.RunConfig{})
			if err != nil {
				t.Fatal(err)
			}
			if format == nil || format["name"] != "triage" || format["strict"] != true {
				t.Fatalf("the request's format = %v, want the triage schema, strict", format)
			}
			schema, _ := format["schema"].(map[string]any)
			props, _ := schema["properties"].(map[string]any)
			if schema["additionalProperties"] != false || len(props) != 3 {
				t.Errorf("schema = %v", schema)
			}
			var got triage
			if err := res.Decode(&got); err != nil {
				t.Fatal(err)
			}
			if got.Priority != "P1" || !got.Urgent || len(got.Teams) != 1 {
				t.Errorf("decoded %+v", got)
			}
		})
	}
}
