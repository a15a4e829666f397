package agent_test

import (
	"context"
	"encoding/json"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/agent"
	"github.com/cove-sandbox/cove/agent/model/fake"
	"github.com/cove-sandbox/cove/agent/model/openai"
)

// timedModel measures the time spent in the model (the HTTP round trip to
// the fake server included), so the harness's own share can be told apart.
type timedModel struct {
	agent.Model
	mu    sync.Mutex
	spent time.Duration
}

func (m *timedModel) Respond(ctx context.Context, req agent.ModelRequest, d func(string)) (*agent.ModelResponse, error) {
	start := time.Now()
	r, err := m.Model.Respond(ctx, req, d)
	m.mu.Lock()
	m.spent += time.Since(start)
	m.mu.Unlock()
	return r, err
}

// BenchmarkHarnessOverhead runs 50-turn runs against the fake model on
// loopback, each turn one tool call, and reports the median per-turn time
// the harness itself takes (wall time minus the model's and the tool's).
// Target: under 1 ms.
func BenchmarkHarnessOverhead(b *testing.B) {
	const turns = 50
	var perTurn []time.Duration
	for b.Loop() {
		b.StopTimer()
		var script []fake.Turn
		for range turns - 1 {
			script = append(script, fake.Call("noop", `{"n":1}`))
		}
		script = append(script, fake.Text("done"))
		srv := fake.NewServer(b, script...)
		om, err := openai.New(openai.Config{Model: "gpt-5.1", BaseURL: srv.URL, APIKey: "k", API: openai.Responses})
		if err != nil {
			b.Fatal(err)
		}
		m := &timedModel{Model: om}
		var toolTime time.Duration
		noop := agent.FunctionTool{Name: "noop", Fn: func(context.Context, json.RawMessage) (string, error) { return "ok", nil }}
		a := &agent.Agent{Name: "bench", Model: m, Tools: []agent.Tool{noop}}
		var turnStart time.Time
		var modelAtStart, toolAtStart time.Duration
		var toolStarted time.Time
		on := func(e agent.Event) {
			switch e.Type {
			case agent.EventTurnStarted, agent.EventRunFinished:
				now := time.Now()
				if !turnStart.IsZero() {
					m.mu.Lock()
					spent := m.spent
					m.mu.Unlock()
					perTurn = append(perTurn, now.Sub(turnStart)-(spent-modelAtStart)-(toolTime-toolAtStart))
				}
				turnStart = now
				m.mu.Lock()
				modelAtStart = m.spent
				m.mu.Unlock()
				toolAtStart = toolTime
			case agent.EventToolCallStarted:
				toolStarted = time.Now()
			case agent.EventToolCallFinished:
				toolTime += time.Since(toolStarted)
			}
		}
		b.StartTimer()
		res, err := (&agent.Runner{}).Run(context.Background(), a, "go", agent.RunConfig{MaxTurns: turns, OnEvent: on})
		b.StopTimer()
		if err != nil || res.Turns != turns {
			b.Fatalf("run: %v (%d turns)", err, res.Turns)
		}
		srv.Close()
		b.StartTimer()
	}
	sort.Slice(perTurn, func(i, j int) bool { return perTurn[i] < perTurn[j] })
	if len(perTurn) > 0 {
		b.ReportMetric(float64(perTurn[len(perTurn)/2].Microseconds())/1000, "overhead-ms/turn-p50")
		b.ReportMetric(float64(perTurn[len(perTurn)*99/100].Microseconds())/1000, "overhead-ms/turn-p99")
	}
}
