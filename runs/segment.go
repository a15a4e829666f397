package runs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cove-sandbox/cove/agent"
	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
)

// segment is one Runner call of a run.
type segment func(ctx context.Context, rn *agent.Runner, a *agent.Agent, cfg agent.RunConfig) (*agent.Result, error)

// goOn is the segment that goes on from st: a fresh run of input when
// st is nil, a resume (after approvals or a restart) when input is "",
// a follow-up otherwise.
func goOn(st *agent.RunState, input string) segment {
	return func(ctx context.Context, rn *agent.Runner, a *agent.Agent, cfg agent.RunConfig) (*agent.Result, error) {
		switch {
		case st == nil:
			return rn.Run(ctx, a, input, cfg)
		case input == "":
			return rn.Resume(ctx, a, st, cfg)
		}
		return rn.Continue(ctx, a, st, input, cfg)
	}
}

// launchAndShow launches a segment and returns the run's view (or why it
// could not start). The caller holds lr.op.
func (s *Service) launchAndShow(lr *liveRun, do segment) (api.Run, error) {
	if err := s.launch(lr, "", do); err != nil {
		return api.Run{}, err
	}
	return lr.view(), nil
}

// launch starts a segment of the run. The caller holds lr.op.
func (s *Service) launch(lr *liveRun, text string, do segment) error {
	h := s.hub
	if !h.add() {
		return fmt.Errorf("%w: retry on the restarted server", errShutdown)
	}
	if ok, err := s.claim(h.ctx, lr.id); err != nil || !ok {
		h.wg.Done()
		if err == nil {
			err = fmt.Errorf("run %s is working on another replica of the server: wait for it to finish (or cancel it): %w", lr.id, sandbox.ErrState)
		}
		return err
	}
	ctx, cancel := context.WithCancelCause(h.ctx)
	lr.mu.Lock()
	lr.running, lr.cancel, lr.done = true, cancel, make(chan struct{})
	lr.subs++ // the segment's own use
	lr.rec.FinishedAt = time.Time{}
	done := lr.done
	lr.mu.Unlock()
	lr.setStatus(api.RunRunning, "", text)
	if err := s.save(ctx, lr); err != nil {
		s.log.Error("saving run", "run", lr.id, "err", err)
	}
	go func() {
		defer h.wg.Done()
		defer close(done)
		defer s.release(lr)
		defer cancel(nil)
		res, err := s.runSegment(ctx, lr, do)
		s.finish(ctx, lr, res, err)
	}()
	return nil
}

// runSegment builds the agent and its sandbox session and runs do.
func (s *Service) runSegment(ctx context.Context, lr *liveRun, do segment) (*agent.Result, error) {
	lr.mu.Lock()
	rec := lr.rec
	lr.mu.Unlock()
	var cfg runConfig
	if err := json.Unmarshal(rec.Config, &cfg); err != nil {
		return nil, fmt.Errorf("run %s's configuration is damaged: %v", lr.id, err)
	}
	a, err := s.runAgent(ctx, lr.team, cfg.Agent)
	if err != nil {
		return nil, err
	}
	sess, err := s.cfg.Sandboxes.Open(ctx, lr.team, rec.SandboxID)
	if errors.Is(err, sandbox.ErrNotFound) {
		return nil, fmt.Errorf("the run's sandbox %s was deleted: start a new run: %w", rec.SandboxID, sandbox.ErrState)
	}
	if err != nil {
		return nil, err
	}
	end := s.cfg.Sandboxes.Begin(rec.SandboxID) // a working agent keeps its sandbox from idling out
	defer end()
	rc := agent.RunConfig{
		MaxTurns: cfg.Agent.MaxTurns,
		Sandbox:  &agent.SandboxRunConfig{Session: sess},
		Prices:   s.cfg.Model.Prices,
		OnEvent: func(e agent.Event) {
			if e.Error != "" {
				e.Error = s.cfg.Redact(e.Error)
			}
			lr.emit(runEvent{Event: e})
			if e.Type == agent.EventUsage {
				s.noteUsage(ctx, lr, e)
			}
		},
		OnCheckpoint: func(st *agent.RunState) { s.checkpoint(ctx, lr, st) },
	}
	return do(ctx, &agent.Runner{Logger: s.log}, a, rc)
}

// checkpoint saves the run's state at a turn boundary.
func (s *Service) checkpoint(ctx context.Context, lr *liveRun, st *agent.RunState) {
	data, err := json.Marshal(st)
	if err != nil {
		return
	}
	lr.mu.Lock()
	lr.rec.State = data
	lr.sum.Usage = runUsage(st.Usage)
	lr.mu.Unlock()
	if err := s.save(context.WithoutCancel(ctx), lr); err != nil {
		s.log.Error("saving a run's checkpoint", "run", lr.id, "err", err)
	}
}

// finish records how a segment ended, tells the webhook, and lets the
// run take its next operation.
func (s *Service) finish(ctx context.Context, lr *liveRun, res *agent.Result, err error) {
	cause := context.Cause(ctx)
	bg := context.WithoutCancel(ctx)
	lr.op.Lock()
	defer lr.op.Unlock()
	if errors.Is(cause, errLeaseLost) {
		// A peer may work on it now: nothing more of this segment is
		// written, and the peer goes on from the last checkpoint. A
		// flush in flight ends first.
		lr.flushMu.Lock()
		lr.mu.Lock()
		lr.pending = nil
		lr.mu.Unlock()
		lr.flushMu.Unlock()
		lr.stopped()
		return
	}
	// The lease goes once the record is saved, so that a peer taking the
	// run over reads it as this segment left it.
	defer s.unclaim(lr.id)
	if errors.Is(cause, errShutdown) {
		// Left "running" with its last checkpoint: the next server (or a
		// replica, at once) goes on from there.
		lr.emit(runEvent{Event: agent.Event{Type: EventRunStatus, Text: "the server is shutting down; the run goes on from its last turn when it starts again"}, Status: api.RunRunning})
		lr.stopped()
		if err := s.save(bg, lr); err != nil {
			s.log.Error("saving run at shutdown", "run", lr.id, "err", err)
		}
		return
	}
	status, msg := api.RunIdle, ""
	lr.mu.Lock()
	if res != nil {
		lr.record(res)
	}
	switch {
	case errors.Is(cause, errRunCancelled):
		status, msg = api.RunCancelled, cancelledByUser
	case err != nil:
		status, msg = api.RunFailed, s.cfg.Redact(err.Error())
	case len(lr.sum.Approvals) > 0:
		status = api.RunWaiting
	default:
		lr.rec.Output = res.Output
	}
	clear(lr.outBytes)
	unused := status == api.RunFailed && lr.sum.Usage.Requests == 0
	lr.mu.Unlock()
	if unused && s.stopUnused(bg, lr) {
		msg += " (the sandbox made for the run is stopped; a message resumes it)"
	}
	if err := s.end(bg, lr, status, msg); err != nil {
		s.log.Error("saving a finished run", "run", lr.id, "err", err)
	}
}

// stopUnused stops the sandbox a run made for itself when the run failed
// before its model ever answered (no model, a bad key, an unreachable
// endpoint): nothing ran in it, and it must not be left running and
// billed for a run that did not start. A sandbox the caller chose is
// left alone. It reports whether it stopped one.
func (s *Service) stopUnused(ctx context.Context, lr *liveRun) bool {
	lr.mu.Lock()
	rec := lr.rec
	lr.mu.Unlock()
	var cfg runConfig
	if json.Unmarshal(rec.Config, &cfg) != nil || !cfg.MadeSandbox || rec.SandboxID == "" {
		return false
	}
	if _, err := s.cfg.Sandboxes.Stop(ctx, lr.team, rec.SandboxID); err != nil {
		if !errors.Is(err, sandbox.ErrNotFound) {
			s.log.Error("stopping the sandbox of a run that failed before its first model call", "run", lr.id, "sandbox", rec.SandboxID, "err", err)
		}
		return false
	}
	return true
}

// record keeps a segment's result in the run's record. The caller holds
// lr.mu.
func (lr *liveRun) record(res *agent.Result) {
	if res.State != nil {
		if data, err := json.Marshal(res.State); err == nil {
			lr.rec.State = data
		}
	}
	lr.sum.Usage = runUsage(res.Usage)
	lr.sum.Cost = nil
	if res.CostKnown {
		c := res.Cost
		lr.sum.Cost = &c
	}
	lr.sum.Approvals = nil
	for _, ap := range res.Interruptions {
		lr.sum.Approvals = append(lr.sum.Approvals, approvalView(ap))
	}
}

// end records that the run stopped in status (msg says why when it
// failed or was cancelled), saves it and tells its webhook.
func (s *Service) end(ctx context.Context, lr *liveRun, status, msg string) error {
	lr.mu.Lock()
	lr.rec.FinishedAt = s.cfg.Now()
	lr.mu.Unlock()
	lr.setStatus(status, msg, "")
	lr.stopped()
	err := s.save(ctx, lr)
	s.notifyWebhook(lr)
	return err
}

// recoverRuns goes on with the runs a previous server left working: from
// their last checkpoint, or failed with the reason when they had none.
func (s *Service) recoverRuns(ctx context.Context) {
	for after := ""; ; {
		recs, next, err := s.cfg.Store.ListRuns(ctx, store.RunFilter{Status: api.RunRunning, After: after})
		if err != nil {
			s.log.Error("listing runs to recover", "err", err)
			return
		}
		for _, rec := range recs {
			s.recoverRun(rec)
		}
		if next == "" {
			return
		}
		after = next
	}
}

func (s *Service) recoverRun(rec store.Run) {
	lr := s.adopt(rec)
	defer s.release(lr)
	lr.op.Lock()
	defer lr.op.Unlock()
	lr.mu.Lock()
	running := lr.running
	lr.mu.Unlock()
	if running {
		return
	}
	// With replicas: only a run whose worker is gone (its lease free),
	// as the store has it now.
	if ok, err := s.claim(context.Background(), rec.ID); err != nil || !ok {
		return
	}
	if err := s.refresh(context.Background(), lr); err != nil {
		s.unclaim(rec.ID)
		return
	}
	lr.mu.Lock()
	rec = lr.rec
	lr.mu.Unlock()
	if rec.Status != api.RunRunning { // finished meanwhile
		s.unclaim(rec.ID)
		return
	}
	st, err := agent.ParseRunState(rec.State)
	if len(rec.State) == 0 || err != nil {
		if err := s.end(context.Background(), lr, api.RunFailed, "the server restarted before the run's first turn was saved; send a message to start again"); err != nil {
			s.log.Error("saving a run that could not be recovered", "run", rec.ID, "err", err)
		}
		s.unclaim(rec.ID)
		return
	}
	st.Abandon("the server restarted while it ran")
	lr.mu.Lock()
	keepUsage(st, lr.sum)
	lr.mu.Unlock()
	text := fmt.Sprintf("the server restarted; the run goes on from turn %d", st.Turn)
	s.log.Info("resuming run after restart", "run", rec.ID, "turn", st.Turn)
	if err := s.launch(lr, text, goOn(st, "")); err != nil {
		s.log.Error("resuming run", "run", rec.ID, "err", err)
		s.unclaim(rec.ID)
	}
}
