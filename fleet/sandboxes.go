package fleet

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/manifest"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
)

// ErrQuota is what a create, resume or fork over a team's quota returns
// (wrapped, with the quota that was hit).
var ErrQuota = fmt.Errorf("quota exceeded: %w", sandbox.ErrLimit)

// Get returns team's sandbox id, read afresh from the store; another
// team's is ErrNotFound.
func (f *Fleet) Get(ctx context.Context, team, id string) (store.Sandbox, error) {
	if team == "" {
		return store.Sandbox{}, fmt.Errorf("sandbox %q: no team: %w", id, sandbox.ErrNotFound)
	}
	return hideFrozen(f.cfg.Store.GetSandbox(ctx, team, id))
}

// Find returns sandbox id whichever team's it is: for the front doors
// that let a caller in by a token of the sandbox's own (an exposed
// port's, envd's), which they check themselves.
func (f *Fleet) Find(ctx context.Context, id string) (store.Sandbox, error) {
	return hideFrozen(f.cfg.Store.GetSandbox(ctx, "", id))
}

// List returns a page of team's sandboxes (filter.TeamID is set to team)
// and the cursor of the next ("" at the end).
func (f *Fleet) List(ctx context.Context, team string, filter store.SandboxFilter) ([]store.Sandbox, string, error) {
	if team == "" {
		return nil, "", fmt.Errorf("listing sandboxes: no team: %w", sandbox.ErrInvalid)
	}
	filter.TeamID = team
	return f.listSandboxes(ctx, filter) // frozen copies are not sandboxes
}

// Expired reports whether a sandbox's deadline has passed and it is to
// be deleted then: the lifecycle loop deletes it within a few seconds,
// and a front door may already answer as after.
func (f *Fleet) Expired(rec store.Sandbox) bool {
	return rec.OnExpire == store.ExpireDelete && !rec.Deadline.IsZero() && !f.cfg.Now().Before(rec.Deadline)
}

// admit checks a team's quota for one more running sandbox of spec.
// Callers hold createMu, and call release once the sandbox is recorded.
func (f *Fleet) admit(ctx context.Context, team string, spec sandbox.Spec) (release func(), err error) {
	return f.admitN(ctx, team, spec, 1)
}

// admitN checks a team's quota for count more running sandboxes of spec.
// A team with a quota is locked across replicas (quotaLock) until
// release, so that a peer's create cannot pass the same check meanwhile.
func (f *Fleet) admitN(ctx context.Context, team string, spec sandbox.Spec, count int) (release func(), err error) {
	t, err := f.cfg.Store.GetTeam(ctx, team)
	if err != nil {
		return nil, err
	}
	q := t.Quota
	if q == (store.Quota{}) {
		return func() {}, nil
	}
	release, err = f.lockShared(ctx, "quota/"+team)
	if err != nil {
		return nil, err
	}
	if err := f.checkQuota(ctx, team, q, spec, count); err != nil {
		release()
		return nil, err
	}
	return release, nil
}

// checkQuota counts a team's running sandboxes with count more of spec
// against its quota q.
func (f *Fleet) checkQuota(ctx context.Context, team string, q store.Quota, spec sandbox.Spec, count int) error {
	n, cpus, mem := count, float64(count)*spec.Limits.CPUs, int64(count)*spec.Limits.MemoryBytes
	cursor := ""
	for {
		page, next, err := f.cfg.Store.ListSandboxes(ctx, store.SandboxFilter{TeamID: team, State: store.StateRunning, After: cursor, Limit: 1000})
		if err != nil {
			return err
		}
		for _, r := range page {
			n++
			cpus += r.Spec.Limits.CPUs
			mem += r.Spec.Limits.MemoryBytes
		}
		if next == "" {
			break
		}
		cursor = next
	}
	switch {
	case q.Sandboxes > 0 && n > q.Sandboxes:
		return fmt.Errorf("team %s may run %d sandboxes at once; stop or delete one first: %w", team, q.Sandboxes, ErrQuota)
	case q.CPUs > 0 && cpus > q.CPUs:
		return fmt.Errorf("team %s may use %g CPUs at once and this would make %g; stop a sandbox or ask for fewer cpus: %w", team, q.CPUs, cpus, ErrQuota)
	case q.MemoryBytes > 0 && mem > q.MemoryBytes:
		return fmt.Errorf("team %s may use %d bytes of memory at once and this would make %d; stop a sandbox or ask for less: %w", team, q.MemoryBytes, mem, ErrQuota)
	}
	return nil
}

// Create makes a running sandbox for team (within its quota), records
// it, and builds its workspace from the request's manifest, if any. On
// error nothing is left behind. The sandbox's session is returned live.
func (f *Fleet) Create(ctx context.Context, team string, req api.CreateSandbox) (store.Sandbox, sandbox.Session, error) {
	return f.CreateLabeled(ctx, team, req, nil)
}

// CreateLabeled is Create with labels of the server's own (keys under
// OwnLabelPrefix, which a request may not set): a front door's marks and
// tokens, recorded with the sandbox (they never reach the runtime).
func (f *Fleet) CreateLabeled(ctx context.Context, team string, req api.CreateSandbox, own map[string]string) (store.Sandbox, sandbox.Session, error) {
	for k := range own {
		if !strings.HasPrefix(k, OwnLabelPrefix) || k == teamLabel {
			return store.Sandbox{}, nil, fmt.Errorf("label %q is not one of the server's own: %w", k, sandbox.ErrInvalid)
		}
	}
	spec, rec, m, err := f.specFor(req, team)
	if err != nil {
		return rec, nil, err
	}
	rec, sess, err := f.createRecorded(ctx, team, spec, rec, own)
	if err != nil {
		return rec, nil, err
	}
	if m != nil {
		if err := f.applyManifest(ctx, m, sess); err != nil {
			f.remove(ctx, rec.ID)
			return rec, nil, fmt.Errorf("applying the manifest (the sandbox was deleted): %w", err)
		}
	}
	return rec, sess, nil
}

// createRecorded makes the sandbox of spec and records it as rec.
func (f *Fleet) createRecorded(ctx context.Context, team string, spec sandbox.Spec, rec store.Sandbox, own map[string]string) (store.Sandbox, sandbox.Session, error) {
	// One create at a time, quota check and all. Measured on 2 cores with
	// 50 clients creating, running and deleting: 907-1031 cycles in 30 s
	// one at a time, 807 with two at once, 690 with no limit; starting a
	// sandbox is CPU work, and more at once only makes each slower.
	f.createMu.Lock()
	defer f.createMu.Unlock()
	if err := f.haveTier(spec); err != nil {
		return rec, nil, err
	}
	release, err := f.admit(ctx, team, spec)
	if err != nil {
		return rec, nil, err
	}
	defer release()
	sess, err := f.cfg.Runtime.Create(ctx, f.runtimeSpec(spec, rec, own))
	if err != nil {
		return rec, nil, fmt.Errorf("creating the sandbox: %w", err)
	}
	now := f.cfg.Now()
	rec.ID, rec.State, rec.CreatedAt, rec.StartedAt, rec.LastActivity = sess.ID(), store.StateRunning, now, now, now
	rec.Deadline = now.Add(spec.TTL)
	if len(own) > 0 {
		// The runtime has the spec's labels; the record's own copy gets
		// the server's too.
		rec.Spec.Labels = maps.Clone(rec.Spec.Labels)
		maps.Copy(rec.Spec.Labels, own)
	}
	if err := f.cfg.Store.PutSandbox(ctx, rec); err != nil {
		f.cfg.Runtime.Delete(ctx, sess.ID())
		return rec, nil, fmt.Errorf("recording sandbox %s: %w", sess.ID(), err)
	}
	return rec, sess, nil
}

// applyManifest builds the workspace of a sandbox just made from a
// tenant's manifest.
func (f *Fleet) applyManifest(ctx context.Context, m *manifest.Manifest, sess sandbox.Session) error {
	// Host paths in a tenant's manifest would read the server's own
	// files: local_file and local_dir are confined to an empty
	// directory, which refuses them. git_repo entries: https only, to
	// addresses the outbound policy allows, never the server's own disk.
	return manifest.Apply(ctx, m, sess, manifest.ApplyOptions{BaseDir: f.emptyDir(), Git: manifest.GitPolicy{
		Schemes: []string{"https"}, CheckAddr: f.cfg.Egress.Check, Resolve: f.cfg.Egress.Lookup,
	}})
}

// emptyDir is a directory with nothing in it, for manifest base dirs.
func (f *Fleet) emptyDir() string {
	d := filepath.Join(f.cfg.DataDir, "empty")
	os.MkdirAll(d, 0o755)
	return d
}

// Delete deletes team's sandbox id, from the runtime and the store.
func (f *Fleet) Delete(ctx context.Context, team, id string) error {
	rec, err := f.Get(ctx, team, id)
	if err != nil {
		return err
	}
	f.readCPU(ctx, rec) // its last CPU time, before the counter goes
	return f.remove(ctx, rec.ID)
}

// remove deletes a sandbox from the runtime and the store.
func (f *Fleet) remove(ctx context.Context, id string) error {
	f.forgetSession(id)
	if err := f.cfg.Runtime.Delete(ctx, id); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
		return sandbox.WrapIDf(id, err, "deleting sandbox %s", id)
	}
	// No read-modify-write puts the record back: each is one
	// transaction that finds it gone (update).
	err := f.cfg.Store.DeleteSandbox(ctx, id)
	if err != nil && !errors.Is(err, sandbox.ErrNotFound) {
		return err
	}
	f.mu.Lock()
	delete(f.traffic, id)
	delete(f.lastTouch, id)
	f.mu.Unlock()
	return nil
}

// Stop stops team's sandbox id (its disk is kept) and records it; a
// stopped one is left as it is.
func (f *Fleet) Stop(ctx context.Context, team, id string) (store.Sandbox, error) {
	rec, err := f.Get(ctx, team, id)
	if err != nil {
		return rec, err
	}
	err = f.stop(ctx, &rec, false)
	return rec, err
}

// stop stops a sandbox and records it (without its deadline when
// noDeadline); rec becomes what was recorded.
func (f *Fleet) stop(ctx context.Context, rec *store.Sandbox, noDeadline bool) error {
	f.forgetSession(rec.ID)
	f.readCPU(ctx, *rec) // its last CPU time, before the counter goes
	if err := f.cfg.Runtime.Stop(ctx, rec.ID); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
		return sandbox.WrapIDf(rec.ID, err, "stopping sandbox %s", rec.ID)
	}
	if rec.State == store.StateStopped && !noDeadline {
		return nil
	}
	return f.update(ctx, rec, func(r *store.Sandbox) error {
		if r.State != store.StateStopped {
			r.State, r.StoppedAt = store.StateStopped, f.cfg.Now()
		}
		if noDeadline {
			r.Deadline = time.Time{}
		}
		return nil
	})
}

// Resume starts team's stopped sandbox id again (within the team's
// quota) with its TTL afresh, and records it; a running one is left as
// it is.
func (f *Fleet) Resume(ctx context.Context, team, id string) (store.Sandbox, error) {
	unlock, err := f.lockOp(ctx, id)
	if err != nil {
		return store.Sandbox{}, err
	}
	defer unlock()
	rec, err := f.Get(ctx, team, id)
	if err != nil {
		return rec, err
	}
	err = f.resume(ctx, team, &rec, rec.Spec.TTL)
	return rec, err
}

// Keep makes team's sandbox id run for at least ttl more: a running one's
// deadline is moved to ttl from now if that is later (never sooner); a
// stopped one, or one whose deadline has passed and is to stop then
// (Due), is resumed with that deadline (resumed is then true).
func (f *Fleet) Keep(ctx context.Context, team, id string, ttl time.Duration) (rec store.Sandbox, resumed bool, err error) {
	unlock, err := f.lockOp(ctx, id)
	if err != nil {
		return rec, false, err
	}
	defer unlock()
	rec, err = f.getSettled(ctx, team, id)
	if err != nil {
		return rec, false, err
	}
	if rec.State == store.StateRunning {
		if t := f.cfg.Now().Add(ttl); t.After(rec.Deadline) {
			err = f.setDeadline(ctx, &rec, t)
		}
		return rec, false, err
	}
	err = f.resume(ctx, team, &rec, ttl)
	return rec, true, err
}

// resume starts a stopped sandbox of team to end ttl from now (within
// its quota), and records it; a running one is left as it is. Callers
// hold its operation lock (lockOp): the runtime's resume sits between
// the read and the write, so no other resume, pause or lifecycle stop of
// it, here or on a peer, may run meanwhile. createMu is held too, so
// this process's lifecycle loop does not see it running in the runtime
// before it is recorded so.
func (f *Fleet) resume(ctx context.Context, team string, rec *store.Sandbox, ttl time.Duration) error {
	if rec.State == store.StateRunning {
		return nil
	}
	f.createMu.Lock()
	defer f.createMu.Unlock()
	fresh, err := f.cfg.Store.GetSandbox(ctx, "", rec.ID)
	if err != nil {
		return err
	}
	if fresh.State == store.StateRunning {
		*rec = fresh // resumed meanwhile
		return nil
	}
	release, err := f.admit(ctx, team, fresh.Spec)
	if err != nil {
		return err
	}
	defer release()
	now := f.cfg.Now()
	deadline := now.Add(ttl)
	// The runtime's deadline is moved first: the past one would refuse
	// the resume, and a stopped sandbox starts with the one it has.
	if d, ok := f.cfg.Runtime.(sandbox.Deadliner); ok {
		if err := d.SetDeadline(ctx, fresh.ID, deadline.Add(f.expireGrace(fresh))); err != nil {
			return err
		}
	}
	sess, err := f.cfg.Runtime.Resume(ctx, fresh.ID)
	if err != nil {
		return sandbox.WrapIDf(fresh.ID, err, "resuming sandbox %s", fresh.ID)
	}
	if err := f.thawedEnv(ctx, sess, fresh); err != nil {
		f.log.Warn("resuming a sandbox made from a snapshot: its create's envs are not set", "sandbox", fresh.ID, "err", err)
	}
	// A change a peer made meanwhile (its labels, a reconcile's) is kept.
	return f.update(ctx, rec, func(r *store.Sandbox) error {
		*r = unpaused(*r) // its processes run again
		r.State, r.StartedAt, r.StoppedAt, r.LastActivity = store.StateRunning, now, time.Time{}, now
		r.Deadline = deadline
		return nil
	})
}

// Fork makes a running copy of team's sandbox id (within the team's
// quota) and records it: ForkN of one. errors.ErrUnsupported when the
// runtime cannot fork.
func (f *Fleet) Fork(ctx context.Context, team, id string) (store.Sandbox, error) {
	children, err := f.ForkN(ctx, team, id, 1)
	if err != nil {
		return store.Sandbox{}, err
	}
	return children[0], nil
}

// SetTTL makes team's sandbox id end ttlSeconds from now, sooner or
// later than it would have.
func (f *Fleet) SetTTL(ctx context.Context, team, id string, ttlSeconds int64) (store.Sandbox, error) {
	ttl, err := Seconds("ttl_seconds", ttlSeconds, f.cfg.MaxTTL)
	if err == nil && ttl == 0 {
		err = invalid("ttl_seconds: give a number of seconds > 0")
	}
	if err != nil {
		return store.Sandbox{}, err
	}
	return f.Extend(ctx, team, id, ttl, true)
}

// Extend moves the end of team's sandbox id to ttl from now: only when
// that is later than its deadline, unless shorten.
func (f *Fleet) Extend(ctx context.Context, team, id string, ttl time.Duration, shorten bool) (store.Sandbox, error) {
	rec, err := f.Get(ctx, team, id)
	if err != nil {
		return rec, err
	}
	if t := f.cfg.Now().Add(ttl); shorten || t.After(rec.Deadline) {
		err = f.setDeadline(ctx, &rec, t)
	}
	return rec, err
}

// setDeadline moves a sandbox's end to t, in the runtime (which enforces
// it while the sandbox runs) and the record.
func (f *Fleet) setDeadline(ctx context.Context, rec *store.Sandbox, t time.Time) error {
	if rec.State == store.StateRunning {
		if d, ok := f.cfg.Runtime.(sandbox.Deadliner); ok {
			if err := d.SetDeadline(ctx, rec.ID, t.Add(f.expireGrace(*rec))); err != nil {
				return sandbox.WrapIDf(rec.ID, err, "setting the TTL of sandbox %s", rec.ID)
			}
		}
	}
	return f.update(ctx, rec, func(rec *store.Sandbox) error {
		rec.Deadline = t
		return nil
	})
}

// SetOwnLabels changes the server's own labels (OwnLabelPrefix) of
// team's sandbox id: change gets a copy of the labels read afresh, and
// may set or delete keys under the prefix. It returns the record written.
func (f *Fleet) SetOwnLabels(ctx context.Context, team, id string, change func(labels map[string]string)) (store.Sandbox, error) {
	rec, err := f.Get(ctx, team, id)
	if err != nil {
		return rec, err
	}
	err = f.update(ctx, &rec, func(r *store.Sandbox) error {
		user, team := UserLabels(r.Spec.Labels), r.Spec.Labels[teamLabel]
		change(r.Spec.Labels)
		if !maps.Equal(user, UserLabels(r.Spec.Labels)) || r.Spec.Labels[teamLabel] != team {
			return fmt.Errorf("sandbox %s: only the server's own labels (cove.) may change: %w", id, sandbox.ErrInvalid)
		}
		return nil
	})
	return rec, err
}

// update changes a record read afresh and writes it, in one transaction
// of the store (store.UpdateSandbox) as every read-modify-write of a
// record is (the lifecycle loop's too), so no peer's write between the
// read and the write is lost and a deleted record is not put back; rec
// becomes what was written. change must do no I/O and may run more than
// once. A change that fails writes nothing and its error is returned;
// errUnchanged from it is a change that found nothing to do.
func (f *Fleet) update(ctx context.Context, rec *store.Sandbox, change func(*store.Sandbox) error) error {
	fresh, err := f.cfg.Store.UpdateSandbox(ctx, "", rec.ID, func(r *store.Sandbox) error {
		// change may set labels: on a copy, as a store may share its map.
		r.Spec.Labels = maps.Clone(r.Spec.Labels)
		if r.Spec.Labels == nil {
			r.Spec.Labels = map[string]string{}
		}
		return change(r)
	})
	if err != nil {
		return err
	}
	*rec = fresh
	return nil
}

// errUnchanged is what a change given to update returns when the record
// read afresh needs no write (a peer got there first).
var errUnchanged = errors.New("the record needs no change")
