package runs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/cove-sandbox/cove/agent"
	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
)

// Create starts a run of team: in req.SandboxID, or in a sandbox made for
// it from req.Sandbox and req.Manifest, or from workspace (a tar of the
// workspace; nil for none). Nothing is made when req is invalid
// (ErrInvalid), names another team's sandbox (ErrNotFound) or its model
// cannot be built. The view returned carries the webhook secret when one
// was generated, the only time it is shown. ctx only bounds the making:
// the run goes on after Create returns, and a caller that leaves halfway
// leaves no half-made run.
func (s *Service) Create(ctx context.Context, team string, req api.CreateRun, workspace io.Reader) (api.Run, error) {
	ctx = context.WithoutCancel(ctx)
	req.Input = strings.TrimSpace(req.Input)
	if err := s.checkCreate(ctx, req, workspace != nil); err != nil {
		return api.Run{}, err
	}
	// The agent is built now so a bad model, key or option is refused
	// before any sandbox is made.
	a, err := s.runAgent(ctx, team, req.Agent)
	if err != nil {
		return api.Run{}, err
	}
	if req.Agent.Model == "" {
		// The run records the model it uses, never "the server's default".
		req.Agent.Model = a.Model.Name()
	}
	sandboxID, made, err := s.sandboxFor(ctx, team, req, workspace)
	if err != nil {
		return api.Run{}, err
	}
	cfg := runConfig{Agent: req.Agent, WebhookURL: req.WebhookURL, WebhookSecret: req.WebhookSecret, MadeSandbox: made}
	generated := ""
	if cfg.WebhookURL != "" && cfg.WebhookSecret == "" {
		generated = newID("whsec_") + newID("")
		cfg.WebhookSecret = generated
	}
	cfgJSON, _ := json.Marshal(cfg)
	now := s.cfg.Now()
	rec := store.Run{ID: newID("run_"), TeamID: team, SandboxID: sandboxID, Status: api.RunRunning, Config: cfgJSON,
		Input: req.Input, Messages: 1, CreatedAt: now, UpdatedAt: now}
	if err := s.cfg.Store.PutRun(ctx, rec); err != nil {
		if made {
			s.deleteSandbox(ctx, team, sandboxID)
		}
		return api.Run{}, err
	}
	lr := s.adopt(rec)
	defer s.release(lr)
	lr.op.Lock()
	lr.emit(runEvent{Event: agent.Event{Type: EventUserMessage, Text: req.Input}})
	err = s.launch(lr, "", goOn(nil, req.Input))
	lr.op.Unlock()
	if err != nil {
		return api.Run{}, err
	}
	v := lr.view()
	v.WebhookSecret = generated
	return v, nil
}

// checkCreate refuses a create whose parts contradict each other or name
// a destination the outbound policy refuses.
func (s *Service) checkCreate(ctx context.Context, req api.CreateRun, tar bool) error {
	switch {
	case req.Input == "":
		return invalid("input is empty: say what the agent should do")
	case req.SandboxID != "" && (req.Sandbox != nil || len(req.Manifest) > 0 || tar):
		return invalid("sandbox_id runs in an existing sandbox: leave out sandbox, manifest and the workspace tar, or sandbox_id")
	case len(req.Manifest) > 0 && tar:
		return invalid("give the workspace as a manifest or as a tar, not both")
	case req.Sandbox != nil && len(req.Sandbox.Manifest) > 0 && len(req.Manifest) > 0:
		return invalid("manifest is given twice (manifest and sandbox.manifest): keep one")
	}
	if req.WebhookURL != "" {
		if err := s.egress.CheckURL(ctx, "webhook_url", req.WebhookURL); err != nil {
			return err
		}
	}
	if base := strings.TrimRight(req.Agent.BaseURL, "/"); base != "" && base != s.ownModelURL() {
		if err := s.egress.CheckURL(ctx, "agent.base_url", base); err != nil {
			return err
		}
	}
	return nil
}

// sandboxFor returns the sandbox a new run works in: team's
// req.SandboxID, or one made (made is true) with its workspace.
func (s *Service) sandboxFor(ctx context.Context, team string, req api.CreateRun, workspace io.Reader) (id string, made bool, err error) {
	if req.SandboxID != "" {
		if _, err := s.cfg.Store.GetSandbox(ctx, team, req.SandboxID); err != nil {
			return "", false, err
		}
		return req.SandboxID, false, nil
	}
	cs := api.CreateSandbox{}
	if req.Sandbox != nil {
		cs = *req.Sandbox
	}
	if len(req.Manifest) > 0 {
		cs.Manifest = req.Manifest
	}
	rec, sess, err := s.cfg.Sandboxes.Create(ctx, team, cs)
	if err != nil {
		return "", false, err
	}
	if workspace != nil {
		if err := sess.RestoreWorkspace(ctx, workspace); err != nil {
			if s.deleteSandbox(ctx, team, rec.ID) {
				return "", false, fmt.Errorf("loading the workspace tar (the sandbox was deleted): %w", err)
			}
			return "", false, fmt.Errorf("loading the workspace tar (sandbox %s is left, to delete): %w", rec.ID, err)
		}
	}
	return rec.ID, true, nil
}

// deleteSandbox takes back a sandbox made for a run that did not start:
// false when that failed.
func (s *Service) deleteSandbox(ctx context.Context, team, id string) bool {
	if err := s.cfg.Sandboxes.Delete(ctx, team, id); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
		s.log.Error("deleting the sandbox of a run that did not start", "sandbox", id, "err", err)
		return false
	}
	return true
}

// Get returns team's run id: ErrNotFound if the team has none.
func (s *Service) Get(ctx context.Context, team, id string) (api.Run, error) {
	lr, err := s.acquire(ctx, team, id)
	if err != nil {
		return api.Run{}, err
	}
	defer s.release(lr)
	return lr.view(), nil
}

// ListOptions select a page of a team's runs.
type ListOptions struct {
	// Status is one of api.RunRunning ... api.RunCancelled, "" for all.
	Status string
	// After is the cursor of the page (RunList.Next of the one before).
	After string
	// Limit is the page's size at most; 0 is the store's default.
	Limit int
}

// List returns a page of team's runs, newest first.
func (s *Service) List(ctx context.Context, team string, o ListOptions) (api.RunList, error) {
	switch o.Status {
	case "", api.RunRunning, api.RunWaiting, api.RunIdle, api.RunFailed, api.RunCancelled:
	default:
		return api.RunList{}, invalid("status %q: want running, waiting, idle, failed or cancelled", o.Status)
	}
	if o.Limit < 0 {
		return api.RunList{}, invalid("limit %d: want a positive number", o.Limit)
	}
	recs, next, err := s.cfg.Store.ListRuns(ctx, store.RunFilter{TeamID: team, Status: o.Status, After: o.After, Limit: o.Limit})
	if err != nil {
		return api.RunList{}, err
	}
	out := api.RunList{Runs: []api.Run{}, Next: next}
	for _, rec := range recs {
		if lr := s.live(rec.ID); lr != nil {
			out.Runs = append(out.Runs, lr.view())
			continue
		}
		var sum runSummary
		_ = json.Unmarshal(rec.Usage, &sum)
		out.Runs = append(out.Runs, runView(rec, sum))
	}
	return out, nil
}

// operate takes team's run id for a control operation: it holds the
// run's operation lock until done is called.
func (s *Service) operate(ctx context.Context, team, id string) (lr *liveRun, status string, state json.RawMessage, done func(), err error) {
	lr, err = s.acquire(ctx, team, id)
	if err != nil {
		return nil, "", nil, nil, err
	}
	lr.op.Lock()
	lr.mu.Lock()
	status, state = lr.rec.Status, lr.rec.State
	lr.mu.Unlock()
	return lr, status, state, func() { lr.op.Unlock(); s.release(lr) }, nil
}

// Decide records decisions on the calls a waiting run asked approval
// for; once none is left undecided the run goes on. ErrState when the
// run does not wait; ErrInvalid for a decision on no such call.
func (s *Service) Decide(ctx context.Context, team, id string, req api.RunDecisions) (api.Run, error) {
	lr, status, stateJSON, done, err := s.operate(ctx, team, id)
	if err != nil {
		return api.Run{}, err
	}
	defer done()
	if status != api.RunWaiting {
		return api.Run{}, fmt.Errorf("run %s is %s: no call waits for approval: %w", lr.id, status, sandbox.ErrState)
	}
	st, err := agent.ParseRunState(stateJSON)
	if err != nil {
		return api.Run{}, err
	}
	if err := decide(st, req); err != nil {
		return api.Run{}, err
	}
	data, _ := json.Marshal(st)
	lr.mu.Lock()
	lr.rec.State = data
	lr.sum.Approvals = nil
	for _, ap := range st.Undecided() {
		lr.sum.Approvals = append(lr.sum.Approvals, approvalView(ap))
	}
	undecided := len(lr.sum.Approvals)
	lr.mu.Unlock()
	if undecided > 0 {
		if err := s.save(ctx, lr); err != nil {
			return api.Run{}, err
		}
		return lr.view(), nil
	}
	return s.launchAndShow(lr, goOn(st, ""))
}

// decide applies req's decisions to st.
func decide(st *agent.RunState, req api.RunDecisions) error {
	for _, d := range req.Decisions {
		var err error
		switch d.Decision {
		case "approve":
			err = st.Approve(d.CallID)
		case "reject":
			err = st.Reject(d.CallID, d.Message)
		default:
			err = invalid("decision %q for call %s: want approve or reject", d.Decision, d.CallID)
		}
		if errors.Is(err, sandbox.ErrNotFound) {
			err = invalid("%v", err)
		}
		if err != nil {
			return err
		}
	}
	switch req.All {
	case "":
	case "approve":
		st.DecideAll(agent.Approved, "")
	case "reject":
		st.DecideAll(agent.Rejected, "")
	default:
		return invalid("all %q: want approve or reject", req.All)
	}
	return nil
}

// Message goes on with a run that stopped (idle, failed or cancelled)
// with a follow-up input, in the same sandbox and conversation. ErrState
// while the run works or waits for approvals.
func (s *Service) Message(ctx context.Context, team, id, input string) (api.Run, error) {
	lr, status, stateJSON, done, err := s.operate(ctx, team, id)
	if err != nil {
		return api.Run{}, err
	}
	defer done()
	input = strings.TrimSpace(input)
	if input == "" {
		return api.Run{}, invalid("input is empty: say what the agent should do next")
	}
	switch status {
	case api.RunRunning:
		return api.Run{}, fmt.Errorf("run %s is still working: wait for it to finish (or cancel it), then send the message: %w", lr.id, sandbox.ErrState)
	case api.RunWaiting:
		return api.Run{}, fmt.Errorf("run %s waits for approvals: decide them first (POST /v1/runs/%s/approvals): %w", lr.id, lr.id, sandbox.ErrState)
	}
	var st *agent.RunState
	if len(stateJSON) > 0 {
		if st, err = agent.ParseRunState(stateJSON); err != nil {
			return api.Run{}, err
		}
		st.Abandon("the run stopped before it ran")
	}
	lr.mu.Lock()
	lr.rec.Messages++
	lr.rec.Output = ""
	lr.mu.Unlock()
	lr.emit(runEvent{Event: agent.Event{Type: EventUserMessage, Text: input}})
	return s.launchAndShow(lr, goOn(st, input))
}

// Cancel stops a working run (and waits until it has stopped, or ctx
// ends) or one waiting for approvals. ErrState when there is nothing to
// cancel.
func (s *Service) Cancel(ctx context.Context, team, id string) (api.Run, error) {
	lr, err := s.acquire(ctx, team, id)
	if err != nil {
		return api.Run{}, err
	}
	defer s.release(lr)
	lr.op.Lock()
	lr.mu.Lock()
	status, cancel, done := lr.rec.Status, lr.cancel, lr.done
	running := lr.running
	lr.mu.Unlock()
	switch {
	case running:
		lr.op.Unlock()
		cancel(errRunCancelled)
		select {
		case <-done:
		case <-ctx.Done():
			return api.Run{}, ctx.Err()
		}
	case status == api.RunWaiting:
		lr.mu.Lock()
		lr.sum.Approvals = nil
		lr.mu.Unlock()
		err := s.end(ctx, lr, api.RunCancelled, cancelledByUser)
		lr.op.Unlock()
		if err != nil {
			return api.Run{}, err
		}
	case s.cfg.Lease != nil && status == api.RunRunning:
		err := s.cancelRemote(ctx, lr) // a peer works on it
		lr.op.Unlock()
		if err != nil {
			return api.Run{}, err
		}
	default:
		lr.op.Unlock()
		return api.Run{}, fmt.Errorf("run %s is %s: nothing to cancel: %w", lr.id, status, sandbox.ErrState)
	}
	return lr.view(), nil
}

// Delete forgets a run that is not working: its record and its log. Its
// sandbox stays (it is the team's, with its own lifecycle). ErrState
// while it works.
func (s *Service) Delete(ctx context.Context, team, id string) error {
	lr, status, _, done, err := s.operate(ctx, team, id)
	if err != nil {
		return err
	}
	defer done()
	lr.mu.Lock()
	running := lr.running
	lr.mu.Unlock()
	if running || status == api.RunRunning {
		return fmt.Errorf("run %s is working: cancel it first (POST /v1/runs/%s/cancel): %w", lr.id, lr.id, sandbox.ErrState)
	}
	if err := s.flush(ctx, lr); err != nil {
		return err
	}
	if err := s.cfg.Store.DeleteRun(ctx, team, lr.id); err != nil {
		return err
	}
	s.hub.mu.Lock()
	delete(s.hub.runs, lr.id)
	s.hub.mu.Unlock()
	lr.mu.Lock()
	lr.deleted = true
	lr.notifyLocked()
	lr.mu.Unlock()
	return nil
}

// view is the API form of a live run.
func (lr *liveRun) view() api.Run {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	return runView(lr.rec, lr.sum)
}

func runView(rec store.Run, sum runSummary) api.Run {
	var cfg runConfig
	_ = json.Unmarshal(rec.Config, &cfg)
	v := api.Run{ID: rec.ID, Status: rec.Status, Agent: cfg.Agent, SandboxID: rec.SandboxID, Input: rec.Input,
		Messages: rec.Messages, Output: rec.Output, Error: rec.Error, Usage: sum.Usage, CostUSD: sum.Cost,
		LastEventID: rec.LastEventID, WebhookURL: cfg.WebhookURL, CreatedAt: rec.CreatedAt, UpdatedAt: rec.UpdatedAt}
	if rec.Status == api.RunWaiting {
		v.Approvals = sum.Approvals
	}
	if !rec.FinishedAt.IsZero() {
		t := rec.FinishedAt
		v.FinishedAt = &t
	}
	return v
}

func runUsage(u agent.Usage) api.RunUsage {
	return api.RunUsage{Requests: u.Requests, InputTokens: u.InputTokens, CachedTokens: u.CachedInputTokens, OutputTokens: u.OutputTokens, ReasoningTokens: u.ReasoningTokens}
}

func approvalView(ap agent.Approval) api.RunApproval {
	// The tool said how to show the call when it was made (agent.Describer).
	return api.RunApproval{CallID: ap.CallID, Tool: ap.Tool, Arguments: ap.Arguments, Command: ap.Command, Reason: ap.Reason}
}
