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
// Callers hold createMu until the sandbox is recorded.
func (f *Fleet) admit(ctx context.Context, team string, spec sandbox.Spec) error {
	t, err := f.cfg.Store.GetTeam(ctx, team)
	if err != nil {
		return err
	}
	q := t.Quota
	if q == (store.Quota{}) {
		return nil
	}
	n, cpus, mem := 1, spec.Limits.CPUs, spec.Limits.MemoryBytes
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
	if err := f.admit(ctx, team, spec); err != nil {
		return rec, nil, err
	}
	sess, err := f.cfg.Runtime.Create(ctx, spec)
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
	// Under createMu: the lifecycle loop's read-modify-write of a record
	// must not put back one deleted in between.
	f.createMu.Lock()
	err := f.cfg.Store.DeleteSandbox(ctx, id)
	f.createMu.Unlock()
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

// Pause is Stop for a running sandbox that also drops its deadline: it
// is then kept for the retention. ErrState when it is not running.
func (f *Fleet) Pause(ctx context.Context, team, id string) (store.Sandbox, error) {
	rec, err := f.Get(ctx, team, id)
	if err != nil {
		return rec, err
	}
	if rec.State != store.StateRunning {
		return rec, fmt.Errorf("sandbox %s is already stopped: %w", rec.ID, sandbox.ErrState)
	}
	err = f.stop(ctx, &rec, true)
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
	defer f.ops.lock(id)()
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
	defer f.ops.lock(id)()
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
// its quota), and records it; a running one is left as it is.
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
	if err := f.admit(ctx, team, fresh.Spec); err != nil {
		return err
	}
	now := f.cfg.Now()
	deadline := now.Add(ttl)
	// The runtime's deadline is moved first: the past one would refuse
	// the resume, and a stopped sandbox starts with the one it has.
	if d, ok := f.cfg.Runtime.(sandbox.Deadliner); ok {
		if err := d.SetDeadline(ctx, fresh.ID, deadline); err != nil {
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
	fresh.State, fresh.StartedAt, fresh.StoppedAt, fresh.LastActivity = store.StateRunning, now, time.Time{}, now
	fresh.Deadline = deadline
	if err := f.cfg.Store.PutSandbox(ctx, fresh); err != nil {
		return err
	}
	*rec = fresh
	return nil
}

// Fork makes a running copy of team's sandbox id (within the team's
// quota) and records it. errors.ErrUnsupported when the runtime cannot
// fork.
func (f *Fleet) Fork(ctx context.Context, team, id string) (store.Sandbox, error) {
	rec, err := f.Get(ctx, team, id)
	if err != nil {
		return rec, err
	}
	fk, ok := f.cfg.Runtime.(sandbox.Forker)
	if !ok {
		return rec, fmt.Errorf("this server's runtime cannot fork sandboxes: %w", errors.ErrUnsupported)
	}
	f.createMu.Lock()
	defer f.createMu.Unlock()
	if err := f.admit(ctx, team, rec.Spec); err != nil {
		return rec, err
	}
	sess, err := fk.Fork(ctx, rec.ID)
	if err != nil {
		return rec, sandbox.WrapIDf(rec.ID, err, "forking sandbox %s", rec.ID)
	}
	now := f.cfg.Now()
	child := rec
	child.ID, child.State, child.CreatedAt, child.StartedAt, child.StoppedAt, child.LastActivity = sess.ID(), store.StateRunning, now, now, time.Time{}, now
	// The child gets the user's labels and the team, not the front
	// doors' own: those are per-sandbox marks and tokens (E2B's envd and
	// traffic tokens), and a copy would let the parent's token open the
	// child. A front door gives the child its own when it is reached.
	child.Spec.Labels = UserLabels(rec.Spec.Labels)
	if child.Spec.Labels == nil {
		child.Spec.Labels = map[string]string{}
	}
	child.Spec.Labels[teamLabel] = rec.Spec.Labels[teamLabel]
	child.Deadline = now.Add(rec.Spec.TTL)
	if err := f.cfg.Store.PutSandbox(ctx, child); err != nil {
		f.cfg.Runtime.Delete(ctx, sess.ID())
		return rec, err
	}
	return child, nil
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
			if err := d.SetDeadline(ctx, rec.ID, t); err != nil {
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

// update changes a record read afresh and writes it, under createMu as
// every read-modify-write of a record is (the lifecycle loop's too); rec
// becomes what was written.
// A change that fails writes nothing.
func (f *Fleet) update(ctx context.Context, rec *store.Sandbox, change func(*store.Sandbox) error) error {
	f.createMu.Lock()
	defer f.createMu.Unlock()
	fresh, err := f.cfg.Store.GetSandbox(ctx, "", rec.ID)
	if err != nil {
		return err
	}
	// change may set labels: on a copy, as a store may share its map.
	fresh.Spec.Labels = maps.Clone(fresh.Spec.Labels)
	if fresh.Spec.Labels == nil {
		fresh.Spec.Labels = map[string]string{}
	}
	if err := change(&fresh); err != nil {
		return err
	}
	if err := f.cfg.Store.PutSandbox(ctx, fresh); err != nil {
		return sandbox.WrapIDf(rec.ID, err, "recording sandbox %s", rec.ID)
	}
	*rec = fresh
	return nil
}
