package runs

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/agent"
)

// TestRunLogCapsOutput: whatever a tool emits, a call keeps at most
// OutputCap of output in the run's log, and says so.
func TestRunLogCapsOutput(t *testing.T) {
	lr := &liveRun{id: "run_x", changed: make(chan struct{}), outBytes: map[string]int{}}
	chunk := strings.Repeat("x", 64<<10)
	for range 40 { // 2.5 MiB
		lr.emit(runEvent{Event: agent.Event{Type: agent.EventOutput, CallID: "c1", Data: chunk}})
	}
	lr.emit(runEvent{Event: agent.Event{Type: agent.EventOutput, CallID: "c2", Data: "other call"}})
	var c1 strings.Builder
	var c2 int
	for _, e := range lr.pending {
		var ev agent.Event
		json.Unmarshal(e.Data, &ev)
		switch ev.CallID {
		case "c1":
			c1.WriteString(ev.Data)
		case "c2":
			c2++
		}
	}
	if n := c1.Len(); n < OutputCap || n > OutputCap+200 || !strings.HasSuffix(c1.String(), "not kept in the run's log; the model got its own bounded copy]\n") {
		t.Errorf("c1 kept %d bytes ending %q", n, c1.String()[max(0, c1.Len()-80):])
	}
	if c2 != 1 {
		t.Errorf("another call's output was dropped too")
	}
}
