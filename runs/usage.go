package runs

import (
	"context"

	"github.com/cove-sandbox/cove/agent"
)

// noteUsage keeps in the run's record the usage the harness reported
// after a model call (agent.EventUsage) and saves the record: GET
// /v1/runs/{id} shows the counts while the run works, and a server
// restarted before the next checkpoint still counts the calls made.
func (s *Service) noteUsage(ctx context.Context, lr *liveRun, e agent.Event) {
	if e.Usage == nil {
		return
	}
	lr.mu.Lock()
	lr.sum.Usage = runUsage(*e.Usage)
	lr.sum.Cost = nil
	if e.Cost != nil {
		c := *e.Cost
		lr.sum.Cost = &c
	}
	lr.mu.Unlock()
	if err := s.save(context.WithoutCancel(ctx), lr); err != nil {
		s.log.Error("saving a run's usage", "run", lr.id, "err", err)
	}
}

// keepUsage makes the state a run goes on from after a restart count
// the model calls made since its checkpoint (the record has them from
// their usage events): they were made and paid for, even if the run
// makes them again.
func keepUsage(st *agent.RunState, sum runSummary) {
	u, r := &st.Usage, sum.Usage
	u.Requests = max(u.Requests, r.Requests)
	u.InputTokens = max(u.InputTokens, r.InputTokens)
	u.CachedInputTokens = max(u.CachedInputTokens, r.CachedTokens)
	u.OutputTokens = max(u.OutputTokens, r.OutputTokens)
	u.ReasoningTokens = max(u.ReasoningTokens, r.ReasoningTokens)
}

// ownSettings names, in the errors of a run at the operator's endpoint,
// the server's own settings: cove serve's flag and environment and the
// team secret, never the CLI's flags.
func ownSettings(spec *ModelSpec, namedSecret bool) {
	spec.BaseURLSetting = "cove serve's --model-base-url"
	if !namedSecret {
		spec.KeySetting = "OPENAI_API_KEY in cove serve's environment or the team secret OPENAI_API_KEY (Settings page, or PUT /v1/secrets/OPENAI_API_KEY)"
	}
}
