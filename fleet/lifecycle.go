package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
)

// lifecycleLoop enforces the lifecycle policies and meters use, once at
// start and then every Config.LifecycleInterval, until the server closes. At
// the end it records the usage up to then, so a restarted server goes on
// from there.
//
// One process runs the loop over a store (see the package doc): ctx
// ends when the server closes or this process loses the lease. Only at
// a close is use flushed: after a lost lease the new holder meters from
// where the store's usage ends.
func (f *Fleet) lifecycleLoop(ctx context.Context) {
	f.leaseHeld.Store(true)
	defer f.leaseHeld.Store(false)
	lc := &lifecycle{f: f, meter: newMeter(f)}
	t := time.NewTicker(f.cfg.LifecycleInterval)
	defer t.Stop()
	for {
		lc.tick(ctx)
		f.ticks.Add(1)
		select {
		case <-ctx.Done():
			if f.closed.Load() {
				fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				lc.flush(fctx)
				fcancel()
			}
			return
		case <-t.C:
		}
	}
}

// lifecycle is the loop's state; only the loop's goroutine uses it.
type lifecycle struct {
	f     *Fleet
	meter *meter
}

// tick runs each policy once, in this order: (a) a sandbox the runtime
// stopped on its own (its TTL, a dead supervisor) is recorded stopped;
// (b) use up to now is metered; (c) sandboxes past their deadline, or
// (d) running ones idle past their idle timeout, are stopped or deleted
// as their OnExpire says; (e) stopped sandboxes kept longer than the
// retention are deleted. A failure is logged and retried next tick.
func (lc *lifecycle) tick(ctx context.Context) {
	f := lc.f
	// Activity recorded in memory goes to the store first, so the idle
	// policy sees it.
	f.flushTouches()
	// Read before the records: a sandbox deleted after this is billed
	// up to it at most, never for time after its deletion.
	now := f.cfg.Now()
	recs, live, err := lc.snapshot(ctx)
	if err != nil {
		if ctx.Err() == nil {
			f.log.Error("lifecycle: listing sandboxes", "err", err)
		}
		return
	}
	for i := range recs {
		if in, ok := live[recs[i].ID]; ok && in.State == sandbox.StateStopped && recs[i].State == store.StateRunning {
			lc.syncStopped(ctx, &recs[i], in.Paused)
		}
	}
	lc.meter.run(ctx, recs, now, false)
	for _, rec := range recs {
		if ctx.Err() != nil {
			return
		}
		switch {
		case IsFrozen(rec):
			// A snapshot (freeze.go): kept until deleted, metered above.
		case lc.expired(ctx, rec, now):
			lc.act(ctx, rec.ID, "ttl", lc.expired)
		case lc.idle(ctx, rec, now):
			lc.act(ctx, rec.ID, "idle timeout", lc.idle)
		case lc.retired(ctx, rec, now):
			lc.act(ctx, rec.ID, "retention", lc.retired)
		}
	}
}

// snapshot reads every record and the runtime's sandboxes. createMu is
// held so that no create, resume or fork runs between the two reads: a
// sandbox resumed in the runtime but not yet recorded running would look
// stopped by the runtime otherwise.
func (lc *lifecycle) snapshot(ctx context.Context) ([]store.Sandbox, map[string]sandbox.Info, error) {
	f := lc.f
	f.createMu.Lock()
	defer f.createMu.Unlock()
	recs, err := f.allSandboxes(ctx, "")
	if err != nil {
		return nil, nil, err
	}
	infos, err := f.cfg.Runtime.List(ctx)
	if err != nil {
		return nil, nil, err
	}
	live := make(map[string]sandbox.Info, len(infos))
	for _, in := range infos {
		live[in.ID] = in
	}
	return recs, live, nil
}

// syncStopped records a sandbox stopped that the runtime stopped. The
// record is read again in the write's transaction (update): the API may
// have stopped or deleted it since the snapshot.
func (lc *lifecycle) syncStopped(ctx context.Context, rec *store.Sandbox, paused bool) {
	f := lc.f
	started := rec.StartedAt
	// The runtime does not say when; now is at most one tick late.
	now := f.cfg.Now()
	err := f.update(ctx, rec, func(r *store.Sandbox) error {
		// A new start since the snapshot (a resume here or on another
		// replica) is not what the runtime said stopped.
		if r.State != store.StateRunning || !r.StartedAt.Equal(started) {
			return errUnchanged
		}
		r.State, r.StoppedAt = store.StateStopped, now
		if paused { // it kept its memory
			r.Spec.Labels[pausedLabel] = "1"
		}
		return nil
	})
	switch {
	case errors.Is(err, errUnchanged) || errors.Is(err, sandbox.ErrNotFound):
		return
	case err != nil:
		f.log.Error("lifecycle: recording a sandbox the runtime stopped", "sandbox", rec.ID, "err", err)
		return
	}
	f.forgetSession(rec.ID)
	f.log.Info("the runtime stopped a sandbox (its TTL, or its supervisor died)", "sandbox", rec.ID)
}

// A policy says whether it applies to a sandbox now.
type policy func(ctx context.Context, rec store.Sandbox, now time.Time) bool

// expired: a sandbox past its deadline, running, or stopped with
// OnExpire delete: the runtime enforces the TTL too, and when its stop
// comes first the deletion must still follow.
func (lc *lifecycle) expired(_ context.Context, rec store.Sandbox, now time.Time) bool {
	if rec.Deadline.IsZero() || now.Before(rec.Deadline) {
		return false
	}
	return rec.State == store.StateRunning || rec.OnExpire == store.ExpireDelete
}

// idle: a running sandbox with an idle timeout, no open stream or
// connection, no running process, and no activity for that long. Status
// polling (GET /v1/sandboxes/{id}) does not count as activity: it does
// not touch the record.
func (lc *lifecycle) idle(ctx context.Context, rec store.Sandbox, now time.Time) bool {
	if rec.State != store.StateRunning || rec.IdleTimeout <= 0 {
		return false
	}
	last := rec.LastActivity
	if rec.StartedAt.After(last) {
		last = rec.StartedAt
	}
	if t := lc.f.LastActivity(rec.ID); t.After(last) {
		last = t // activity not yet in the store
	}
	if now.Sub(last) < rec.IdleTimeout || lc.f.Busy(rec.ID) {
		return false
	}
	// Asked last: it reaches into the sandbox. Unsure means busy.
	sess, err := lc.f.LiveSession(ctx, rec)
	if err != nil {
		return false
	}
	procs, err := sess.Processes(ctx)
	return err == nil && len(procs) == 0
}

// retired: a stopped sandbox kept longer than the retention.
func (lc *lifecycle) retired(_ context.Context, rec store.Sandbox, now time.Time) bool {
	r := lc.f.cfg.Retention
	return rec.State == store.StateStopped && r > 0 && !rec.StoppedAt.IsZero() && now.Sub(rec.StoppedAt) >= r
}

// act stops or deletes sandbox id for why, if the policy still applies
// to its record read afresh (the API may have moved its deadline, or
// stopped, resumed or deleted it, since the snapshot). A retired sandbox
// is deleted; an expired or idle one stopped or deleted as its OnExpire
// says (a stopped one is only ever deleted). Deleting meters it up to
// now first: its record goes.
func (lc *lifecycle) act(ctx context.Context, id, why string, applies policy) {
	f := lc.f
	// A resume between the read and the stop would be stopped, or
	// recorded stopped while it runs.
	unlock, err := f.lockOp(ctx, id)
	if err != nil {
		return
	}
	defer unlock()
	rec, err := f.cfg.Store.GetSandbox(ctx, "", id)
	if err != nil {
		return
	}
	now := f.cfg.Now()
	if !applies(ctx, rec, now) {
		return
	}
	if rec.State == store.StateStopped || rec.OnExpire == store.ExpireDelete {
		lc.meter.record(ctx, rec, now, true)
		if err := f.remove(ctx, id); err != nil {
			f.log.Error("lifecycle: deleting sandbox", "sandbox", id, "why", why, "err", err)
			return
		}
		lc.meter.forget(id)
		f.log.Info("deleted sandbox", "sandbox", id, "why", why)
		return
	}
	if why == "ttl" {
		err = f.settle(ctx, &rec) // a pause with memory where its deadline says so
	} else {
		err = f.stop(ctx, &rec, false)
	}
	if err != nil && !errors.Is(err, sandbox.ErrNotFound) {
		f.log.Error("lifecycle: stopping sandbox", "sandbox", id, "why", why, "err", err)
		return
	}
	f.log.Info("stopped sandbox", "sandbox", id, "why", why)
}

// flush records every sandbox's use up to now (at shutdown).
func (lc *lifecycle) flush(ctx context.Context) {
	now := lc.f.cfg.Now()
	recs, err := lc.f.allSandboxes(ctx, "")
	if err != nil {
		lc.f.log.Error("lifecycle: metering at shutdown", "err", err)
		return
	}
	lc.meter.run(ctx, recs, now, true)
}

// Reconcile makes the store and the runtime agree after a (re)start:
// sandboxes whose supervisor died or whose TTL stopped them while the
// server was down are recorded stopped, records of sandboxes the runtime
// no longer has are dropped, and sandboxes the runtime has with a team
// label but no record (a create cut short by a crash) are deleted. Like
// the lifecycle loop, it is for the one process per store that runs it:
// with Config.NoLifecycle it does nothing, and with Config.Lease the
// loop runs it whenever it takes the lease (replicas.go).
func (f *Fleet) Reconcile(ctx context.Context) error {
	if f.cfg.NoLifecycle || f.cfg.Lease != nil {
		return nil
	}
	return f.reconcile(ctx)
}

// reconcile is Reconcile's work.
func (f *Fleet) reconcile(ctx context.Context) error {
	infos, err := f.cfg.Runtime.List(ctx)
	if err != nil {
		return fmt.Errorf("listing the runtime's sandboxes: %w", err)
	}
	live := map[string]sandbox.Info{}
	for _, in := range infos {
		live[in.ID] = in
	}
	recs, err := f.allSandboxes(ctx, "")
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, rec := range recs {
		seen[rec.ID] = true
		in, ok := live[rec.ID]
		switch {
		case !ok:
			f.log.Warn("sandbox gone from the runtime; dropping its record", "sandbox", rec.ID)
			f.cfg.Store.DeleteSandbox(ctx, rec.ID)
		case IsFrozen(rec):
			if in.State == sandbox.StateRunning { // a snapshot stays stopped
				f.cfg.Runtime.Stop(ctx, rec.ID)
			}
		case in.State != sandbox.StateStopped && in.State != sandbox.StateRunning:
		case (in.State == sandbox.StateStopped) != (rec.State == store.StateStopped):
			f.reconcileState(ctx, rec, in.State)
		}
	}
	for id, in := range live {
		// With replicas, a young one may be a peer's create in flight.
		young := f.cfg.Lease != nil && f.cfg.Now().Sub(in.CreatedAt) < orphanGrace
		if !seen[id] && in.Spec.Labels[teamLabel] != "" && !young {
			f.log.Warn("deleting a sandbox created but never recorded (the server stopped mid-create)", "sandbox", id)
			if err := f.cfg.Runtime.Delete(ctx, id); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
				f.log.Error("deleting orphan", "sandbox", id, "err", err)
			}
		}
	}
	return nil
}

// reconcileState records sandbox rec in the runtime's state, if its
// record, read afresh in the write's transaction, still says otherwise
// (a peer may have stopped or resumed it since the list).
func (f *Fleet) reconcileState(ctx context.Context, rec store.Sandbox, state sandbox.State) {
	now := f.cfg.Now()
	f.update(ctx, &rec, func(r *store.Sandbox) error {
		switch {
		case state == sandbox.StateStopped && r.State == store.StateRunning:
			r.State, r.StoppedAt = store.StateStopped, now
		case state == sandbox.StateRunning && r.State == store.StateStopped:
			r.State, r.StoppedAt = store.StateRunning, time.Time{}
		default:
			return errUnchanged
		}
		return nil
	})
}
