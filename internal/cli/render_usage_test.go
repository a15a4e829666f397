package cli

import (
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/agent"
)

// TestRenderIgnoresUsageEvents: cove run's text output is unchanged by
// the usage events that follow each model call (a streamed answer is
// printed once, the totals once at the end); --json carries them.
func TestRenderIgnoresUsageEvents(t *testing.T) {
	u := &agent.Usage{Requests: 1, InputTokens: 10, OutputTokens: 2}
	events := []agent.Event{
		{Type: agent.EventTurnStarted},
		{Type: agent.EventTextDelta, Text: "all "},
		{Type: agent.EventUsage, Usage: u, Model: "gpt-5.1"}, // even mid-text
		{Type: agent.EventTextDelta, Text: "done"},
		{Type: agent.EventMessage, Text: "all done"},
		{Type: agent.EventUsage, Usage: u, Model: "gpt-5.1"},
		{Type: agent.EventRunFinished, Output: "all done", Usage: u},
	}
	var text, js strings.Builder
	r, rj := newRenderer(&text, false), newRenderer(&js, true)
	for _, e := range events {
		r.event(e)
		rj.event(e)
	}
	if n := strings.Count(text.String(), "all done"); n != 1 || strings.Count(text.String(), "model calls") != 1 {
		t.Errorf("text output:\n%s\nwant the answer and the totals once", text.String())
	}
	if n := strings.Count(js.String(), `"type":"usage"`); n != 2 || !strings.Contains(js.String(), `"model":"gpt-5.1"`) {
		t.Errorf("--json output:\n%s\nwant both usage events with the model", js.String())
	}
}
