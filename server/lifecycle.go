package server

import (
	"context"
	"errors"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
)

// lifecycleInterval is how often the lifecycle loop runs: the TTL, idle
// timeout and retention act at most this late. Tests shorten it.
var lifecycleInterval = 5 * time.Second

// lifecycleLoop enforces the lifecycle policies and meters use, once at
// start and then every lifecycleInterval, until the server closes. At
// the end it records the usage up to then, so a restarted server goes on
// from there.
//
// One server runs the loop over a store. Several replicas over one
// PostgreSQL store would each stop, delete and meter the same sandboxes;
// they need a leader election first.
func (s *Server) lifecycleLoop() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-s.done
		cancel()
	}()
	lc := &lifecycle{s: s, meter: newMeter(s)}
	t := time.NewTicker(lifecycleInterval)
	defer t.Stop()
	for {
		lc.tick(ctx)
		select {
		case <-s.done:
			fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			lc.flush(fctx)
			fcancel()
			return
		case <-t.C:
		}
	}
}

// lifecycle is the loop's state; only the loop's goroutine uses it.
type lifecycle struct {
	s     *Server
	meter *meter
}

// tick runs each policy once, in this order: (a) a sandbox the runtime
// stopped on its own (its TTL, a dead supervisor) is recorded stopped;
// (b) use up to now is metered; (c) sandboxes past their deadline, or
// (d) running ones idle past their idle timeout, are stopped or deleted
// as their OnExpire says; (e) stopped sandboxes kept longer than the
// retention are deleted. A failure is logged and retried next tick.
func (lc *lifecycle) tick(ctx context.Context) {
	s := lc.s
	// Activity recorded in memory goes to the store first, so the idle
	// policy sees it.
	s.flushTouches()
	// Read before the records: a sandbox deleted after this is billed
	// up to it at most, never for time after its deletion.
	now := s.cfg.Now()
	recs, live, err := lc.snapshot(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Error("lifecycle: listing sandboxes", "err", err)
		}
		return
	}
	for i := range recs {
		if in, ok := live[recs[i].ID]; ok && in.State == sandbox.StateStopped && recs[i].State == store.StateRunning {
			lc.syncStopped(ctx, &recs[i])
		}
	}
	lc.meter.run(ctx, recs, now, false)
	for _, rec := range recs {
		if ctx.Err() != nil {
			return
		}
		switch {
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
	s := lc.s
	s.createMu.Lock()
	defer s.createMu.Unlock()
	recs, err := s.allSandboxes(ctx, "")
	if err != nil {
		return nil, nil, err
	}
	infos, err := s.cfg.Runtime.List(ctx)
	if err != nil {
		return nil, nil, err
	}
	live := make(map[string]sandbox.Info, len(infos))
	for _, in := range infos {
		live[in.ID] = in
	}
	return recs, live, nil
}

// allSandboxes lists every sandbox of a team ("" for all teams).
func (s *Server) allSandboxes(ctx context.Context, team string) ([]store.Sandbox, error) {
	var all []store.Sandbox
	cursor := ""
	for {
		page, next, err := s.cfg.Store.ListSandboxes(ctx, store.SandboxFilter{TeamID: team, After: cursor, Limit: 1000})
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if next == "" {
			return all, nil
		}
		cursor = next
	}
}

// syncStopped records a sandbox stopped that the runtime stopped. The
// record is read again first: the API may have stopped or deleted it
// since the snapshot.
func (lc *lifecycle) syncStopped(ctx context.Context, rec *store.Sandbox) {
	s := lc.s
	s.createMu.Lock() // against a delete between the read and the write
	defer s.createMu.Unlock()
	fresh, err := s.cfg.Store.GetSandbox(ctx, "", rec.ID)
	if err != nil || fresh.State != store.StateRunning {
		return
	}
	s.forgetSession(rec.ID)
	// The runtime does not say when; now is at most one tick late.
	fresh.State, fresh.StoppedAt = store.StateStopped, s.cfg.Now()
	if err := s.cfg.Store.PutSandbox(ctx, fresh); err != nil {
		s.log.Error("lifecycle: recording a sandbox the runtime stopped", "sandbox", rec.ID, "err", err)
		return
	}
	s.log.Info("the runtime stopped a sandbox (its TTL, or its supervisor died)", "sandbox", rec.ID)
	*rec = fresh
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
	if t := lc.s.lastActivity(rec.ID); t.After(last) {
		last = t // activity not yet in the store
	}
	if now.Sub(last) < rec.IdleTimeout || lc.s.busy(rec.ID) {
		return false
	}
	// Asked last: it reaches into the sandbox. Unsure means busy.
	sess, err := lc.s.runtimeSession(ctx, rec)
	if err != nil {
		return false
	}
	procs, err := sess.Processes(ctx)
	return err == nil && len(procs) == 0
}

// retired: a stopped sandbox kept longer than the retention.
func (lc *lifecycle) retired(_ context.Context, rec store.Sandbox, now time.Time) bool {
	r := lc.s.cfg.Retention
	return rec.State == store.StateStopped && r > 0 && !rec.StoppedAt.IsZero() && now.Sub(rec.StoppedAt) >= r
}

// act stops or deletes sandbox id for why, if the policy still applies
// to its record read afresh (the API may have moved its deadline, or
// stopped, resumed or deleted it, since the snapshot). A retired sandbox
// is deleted; an expired or idle one stopped or deleted as its OnExpire
// says (a stopped one is only ever deleted). Deleting meters it up to
// now first: its record goes.
func (lc *lifecycle) act(ctx context.Context, id, why string, applies policy) {
	s := lc.s
	rec, err := s.cfg.Store.GetSandbox(ctx, "", id)
	if err != nil {
		return
	}
	now := s.cfg.Now()
	if !applies(ctx, rec, now) {
		return
	}
	if rec.State == store.StateStopped || rec.OnExpire == store.ExpireDelete {
		lc.meter.record(ctx, rec, now, true)
		if err := s.remove(ctx, id); err != nil {
			s.log.Error("lifecycle: deleting sandbox", "sandbox", id, "why", why, "err", err)
			return
		}
		lc.meter.forget(id)
		s.log.Info("deleted sandbox", "sandbox", id, "why", why)
		return
	}
	if err := s.stop(ctx, &rec); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
		s.log.Error("lifecycle: stopping sandbox", "sandbox", id, "why", why, "err", err)
		return
	}
	s.log.Info("stopped sandbox", "sandbox", id, "why", why)
}

// flush records every sandbox's use up to now (at shutdown).
func (lc *lifecycle) flush(ctx context.Context) {
	now := lc.s.cfg.Now()
	recs, err := lc.s.allSandboxes(ctx, "")
	if err != nil {
		lc.s.log.Error("lifecycle: metering at shutdown", "err", err)
		return
	}
	lc.meter.run(ctx, recs, now, true)
}
