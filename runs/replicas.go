package runs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/sandbox"
)

// Replicas. With Config.Lease set, several processes share the store, and
// each run is worked on by one of them at a time: the one holding the
// run's lease, "run/<id>". A segment takes it before it starts (a peer's
// Message or approval on a run working elsewhere is ErrState), renews it
// every LeaseTTL/3 while it works, and gives it up when it ends, its
// record saved. A segment whose renew fails stops at once and writes
// nothing more: a peer may have taken the run over. Every replica looks
// for runs recorded running whose lease is free (their process died or
// closed) every LeaseTTL, and goes on with them from their last turn.
//
// A run in memory that no segment of this process works on is read
// afresh from the store when it is used (a peer may have moved it on),
// and a feed following it polls the store; a cancel of a run that
// works on a peer asks the peer through the record (cancelRemote).

// errLeaseLost ends a segment whose run's lease was lost.
var errLeaseLost = errors.New("the run's lease was lost to another replica")

// remotePoll is how often a feed of a run working on a peer, and a
// cancel waiting for one, look at the store again.
const remotePoll = 250 * time.Millisecond

func runLease(id string) string { return "run/" + id }

// cancelLease is held by a replica asking for a cancel of a run a peer
// works on: the peer finds it taken at its next renew and cancels. A
// signal through the store that writes nothing to the run's record (a
// write there could put back an older record over the peer's last).
func cancelLease(id string) string { return "run-cancel/" + id }

// claim takes (or renews) run id's lease for this process: false when
// a peer holds it. Without a Lease this process is the only one.
func (s *Service) claim(ctx context.Context, id string) (bool, error) {
	if s.cfg.Lease == nil {
		return true, nil
	}
	ok, err := s.cfg.Lease.AcquireLease(ctx, runLease(id), s.cfg.Holder, s.cfg.LeaseTTL)
	if err != nil {
		return false, fmt.Errorf("taking run %s's lease: %v: %w", id, err, sandbox.ErrUnavailable)
	}
	return ok, nil
}

// unclaim gives run id's lease up, so a peer need not wait for its ttl.
func (s *Service) unclaim(id string) {
	if s.cfg.Lease == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.LeaseTTL/3)
	defer cancel()
	if err := s.cfg.Lease.ReleaseLease(ctx, runLease(id), s.cfg.Holder); err != nil {
		s.log.Warn("releasing a run's lease", "run", id, "err", err)
	}
}

// renewRuns renews the lease of every run a segment of this process
// works on, and stops those whose renew failed or whose record asks for
// a cancel made on a peer.
func (s *Service) renewRuns(ctx context.Context) {
	for _, lr := range s.liveRuns() {
		lr.mu.Lock()
		running, cancel := lr.running, lr.cancel
		lr.mu.Unlock()
		if !running {
			continue
		}
		if ok, err := s.claim(ctx, lr.id); !ok || err != nil {
			s.log.Warn("lost a run's lease: stopping its segment here", "run", lr.id, "err", err)
			cancel(errLeaseLost)
			continue
		}
		if s.cancelAsked(ctx, lr.id) {
			cancel(errRunCancelled)
		}
	}
}

// liveRuns lists the runs in memory.
func (s *Service) liveRuns() []*liveRun {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	runs := make([]*liveRun, 0, len(s.hub.runs))
	for _, lr := range s.hub.runs {
		runs = append(runs, lr)
	}
	return runs
}

// refresh reads a run in memory afresh from the store when no segment of
// this process works on it and nothing of it waits to be written (a peer
// may have moved it on). Only with a Lease: alone, memory is the truth.
func (s *Service) refresh(ctx context.Context, lr *liveRun) error {
	if s.cfg.Lease == nil {
		return nil
	}
	lr.mu.Lock()
	idle := !lr.running && len(lr.pending) == 0
	lr.mu.Unlock()
	if !idle {
		return nil
	}
	rec, err := s.cfg.Store.GetRun(ctx, "", lr.id)
	if err != nil {
		return err
	}
	lr.mu.Lock()
	defer lr.mu.Unlock()
	if lr.running || len(lr.pending) > 0 {
		return nil // a segment started here meanwhile: its memory is the truth
	}
	lr.rec = rec
	lr.sum = runSummary{}
	if len(rec.Usage) > 0 {
		_ = json.Unmarshal(rec.Usage, &lr.sum)
	}
	return nil
}

// remote reports whether a peer works on the run: recorded running with
// no segment of this process on it.
func (lr *liveRun) remote() bool {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	return !lr.running && lr.rec.Status == api.RunRunning
}

// cancelAsked reports whether a peer holds run id's cancelLease.
func (s *Service) cancelAsked(ctx context.Context, id string) bool {
	ok, err := s.cfg.Lease.AcquireLease(ctx, cancelLease(id), s.cfg.Holder, s.cfg.LeaseTTL)
	if err != nil {
		return false
	}
	if ok {
		s.cfg.Lease.ReleaseLease(ctx, cancelLease(id), s.cfg.Holder)
	}
	return !ok
}

// cancelRemote asks the peer working on a run to cancel it (holding the
// run's cancelLease) and waits until the run is no longer running, or
// ctx ends. When the peer died meanwhile, the run is this process's to
// cancel. The caller holds lr.op.
func (s *Service) cancelRemote(ctx context.Context, lr *liveRun) error {
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.LeaseTTL/3)
		defer cancel()
		s.cfg.Lease.ReleaseLease(rctx, cancelLease(lr.id), s.cfg.Holder)
	}()
	for {
		if _, err := s.cfg.Lease.AcquireLease(ctx, cancelLease(lr.id), s.cfg.Holder, s.cfg.LeaseTTL); err != nil {
			return fmt.Errorf("asking for run %s's cancel: %v: %w", lr.id, err, sandbox.ErrUnavailable)
		}
		rec, err := s.cfg.Store.GetRun(ctx, "", lr.id)
		if err != nil {
			return err
		}
		if rec.Status != api.RunRunning {
			return s.refresh(ctx, lr)
		}
		if ok, err := s.claim(ctx, lr.id); err == nil && ok {
			return s.cancelClaimed(ctx, lr)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(remotePoll):
		}
	}
}

// cancelClaimed records cancelled a run recorded running whose worker
// died, once this process holds its lease.
func (s *Service) cancelClaimed(ctx context.Context, lr *liveRun) error {
	defer s.unclaim(lr.id)
	if err := s.refresh(ctx, lr); err != nil {
		return err
	}
	lr.mu.Lock()
	lr.sum.Approvals = nil
	lr.mu.Unlock()
	return s.end(ctx, lr, api.RunCancelled, cancelledByUser)
}

// idlePoll is how often a feed following a run that works nowhere looks
// at the store again (a peer may start a segment of it).
const idlePoll = time.Second

// pollChanged is a channel closed after d, or when also (if not nil) is
// closed: a feed looks at the store again then.
func pollChanged(d time.Duration, also <-chan struct{}) <-chan struct{} {
	c := make(chan struct{})
	go func() {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-also:
		}
		close(c)
	}()
	return c
}
