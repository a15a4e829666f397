package fleet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
)

// Frozen copies: snapshots of a whole sandbox (E2B's snapshots).
//
// A frozen copy is a fork of a sandbox (sandbox.Forker: its whole disk,
// root filesystem, home and workspace) stopped at once, its disk kept as
// a pause keeps it. It is a record in the store like a sandbox's, marked
// with frozenLabel, and nothing else sees it as a sandbox: Get, Find and
// List do not return it (another team's or not, it is not found), the
// quota does not count it (it never runs for long: admit counts running
// sandboxes), and the lifecycle loop's TTL, idle and retention policies
// pass it by. Reconcile keeps it as any stopped sandbox the runtime has.
// It is metered as a stopped sandbox is, its disk limit by the hour: it
// holds that disk until it is deleted. Sandboxes are made from it by
// Thaw, a fork of it into a running sandbox.
//
// Cove's workspace snapshots (Snapshot, /v1/snapshots) are another
// thing, and neither lists the other.

const (
	// frozenLabel is "1" on a frozen copy's record.
	frozenLabel = "cove.frozen"
	// frozenIDLabel holds its id as a snapshot (snapPrefix...).
	frozenIDLabel = "cove.frozen.id"
	// frozenOfLabel holds the sandbox it was taken of.
	frozenOfLabel = "cove.frozen.of"
	// thawedLabel is "1" on a sandbox made from a frozen copy: its
	// daemon gets the record's environment at every start.
	thawedLabel = "cove.thawed"
	// snapPrefix starts the ids of frozen copies, as of snapshots.
	snapPrefix = "snap-"
)

// IsFrozen reports whether a record is a frozen copy, not a sandbox.
func IsFrozen(rec store.Sandbox) bool { return rec.Spec.Labels[frozenLabel] != "" }

// frozenView is a frozen copy as a snapshot: its id, team, the sandbox
// it was taken of and when; Size is the disk it holds (its limit).
func frozenView(rec store.Sandbox) store.Snapshot {
	return store.Snapshot{ID: rec.Spec.Labels[frozenIDLabel], TeamID: rec.TeamID, SandboxID: rec.Spec.Labels[frozenOfLabel],
		Size: rec.Spec.Limits.DiskBytes, CreatedAt: rec.CreatedAt}
}

// forker is the runtime's Forker, or errors.ErrUnsupported.
func (f *Fleet) forker() (sandbox.Forker, error) {
	fk, ok := f.cfg.Runtime.(sandbox.Forker)
	if !ok {
		return nil, fmt.Errorf("this server's runtime cannot copy sandboxes, so it keeps no snapshots of whole sandboxes: %w", errors.ErrUnsupported)
	}
	return fk, nil
}

// Freeze makes a frozen copy of team's sandbox id, running or stopped,
// and returns it as a snapshot. It is not within the team's quota: the
// copy runs only until it is stopped, here.
func (f *Fleet) Freeze(ctx context.Context, team, id string) (store.Snapshot, error) {
	rec, err := f.Get(ctx, team, id)
	if err != nil {
		return store.Snapshot{}, err
	}
	fk, err := f.forker()
	if err != nil {
		return store.Snapshot{}, err
	}
	// Under createMu: the lifecycle loop must not see the copy running in
	// the runtime before it is recorded (nor Reconcile's orphan rule).
	f.createMu.Lock()
	defer f.createMu.Unlock()
	sess, err := fk.Fork(ctx, rec.ID)
	if err != nil {
		return store.Snapshot{}, fmt.Errorf("copying sandbox %s: %w", rec.ID, err)
	}
	cid := sess.ID()
	closeSession(sess)
	if err := f.cfg.Runtime.Stop(ctx, cid); err != nil {
		f.cfg.Runtime.Delete(ctx, cid)
		return store.Snapshot{}, fmt.Errorf("stopping the copy of sandbox %s: %w", rec.ID, err)
	}
	now := f.cfg.Now()
	fr := store.Sandbox{ID: cid, TeamID: rec.TeamID, Spec: rec.Spec, State: store.StateStopped, Size: rec.Size,
		CreatedAt: now, StartedAt: now, StoppedAt: now, LastActivity: now, OnExpire: store.ExpireStop}
	fr.Spec.Labels = map[string]string{teamLabel: rec.Spec.Labels[teamLabel], frozenLabel: "1",
		frozenIDLabel: NewID(snapPrefix), frozenOfLabel: rec.ID}
	maps.Copy(fr.Spec.Labels, UserLabels(rec.Spec.Labels))
	if err := f.cfg.Store.PutSandbox(ctx, fr); err != nil {
		f.cfg.Runtime.Delete(ctx, cid)
		return store.Snapshot{}, fmt.Errorf("recording the copy of sandbox %s: %w", rec.ID, err)
	}
	return frozenView(fr), nil
}

// Frozen lists team's frozen copies as snapshots, oldest first.
func (f *Fleet) Frozen(ctx context.Context, team string) ([]store.Snapshot, error) {
	if team == "" {
		return nil, fmt.Errorf("listing snapshots: no team: %w", sandbox.ErrInvalid)
	}
	var out []store.Snapshot
	cursor := ""
	for {
		page, next, err := f.cfg.Store.ListSandboxes(ctx, store.SandboxFilter{TeamID: team, Labels: map[string]string{frozenLabel: "1"}, After: cursor, Limit: 1000})
		if err != nil {
			return nil, err
		}
		for _, rec := range page {
			out = append(out, frozenView(rec))
		}
		if next == "" {
			return out, nil
		}
		cursor = next
	}
}

// frozen reads team's frozen copy sid; ErrNotFound when team has none
// of that id.
func (f *Fleet) frozen(ctx context.Context, team, sid string) (store.Sandbox, error) {
	if team != "" && strings.HasPrefix(sid, snapPrefix) {
		page, _, err := f.cfg.Store.ListSandboxes(ctx, store.SandboxFilter{TeamID: team, Labels: map[string]string{frozenIDLabel: sid}, Limit: 1})
		if err != nil {
			return store.Sandbox{}, err
		}
		if len(page) == 1 && IsFrozen(page[0]) {
			return page[0], nil
		}
	}
	return store.Sandbox{}, fmt.Errorf("snapshot %q not found: %w", sid, sandbox.ErrNotFound)
}

// DeleteFrozen deletes team's frozen copy sid, its disk with it.
func (f *Fleet) DeleteFrozen(ctx context.Context, team, sid string) error {
	fr, err := f.frozen(ctx, team, sid)
	if err != nil {
		return err
	}
	return f.remove(ctx, fr.ID)
}

// envSetter is a session whose daemon takes environment variables for
// every later process (guest.Session).
type envSetter interface {
	SetEnv(ctx context.Context, env map[string]string) error
}

// Thaw makes a running sandbox for team (within its quota) from team's
// frozen copy sid: a fork of it, with req's labels, TTL, idle timeout
// and OnExpire, its environment with req.Env added, and own as
// CreateLabeled's. The rest (template, size, user, network) is the
// copy's: req may not set a template, manifest, size or root. On error
// nothing is left behind.
func (f *Fleet) Thaw(ctx context.Context, team, sid string, req api.CreateSandbox, own map[string]string) (store.Sandbox, error) {
	fr, err := f.frozen(ctx, team, sid)
	if err != nil {
		return store.Sandbox{}, err
	}
	rec, err := f.thawRecord(fr, req, own)
	if err != nil {
		return rec, err
	}
	fk, err := f.forker()
	if err != nil {
		return store.Sandbox{}, err
	}
	f.createMu.Lock()
	defer f.createMu.Unlock()
	release, err := f.admit(ctx, team, rec.Spec)
	if err != nil {
		return store.Sandbox{}, err
	}
	defer release()
	sess, err := fk.Fork(ctx, fr.ID)
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("copying snapshot %s: %w", sid, err)
	}
	defer closeSession(sess)
	rec.ID = sess.ID()
	if err := f.thawStart(ctx, sess, &rec, req.Env); err != nil {
		f.cfg.Runtime.Delete(ctx, rec.ID)
		return store.Sandbox{}, fmt.Errorf("starting a sandbox from snapshot %s (it was deleted): %w", sid, err)
	}
	return rec, nil
}

// thawRecord checks a Thaw's request and makes the record of the
// sandbox (without id or times) from the frozen copy's.
func (f *Fleet) thawRecord(fr store.Sandbox, req api.CreateSandbox, own map[string]string) (store.Sandbox, error) {
	for k := range own {
		if !strings.HasPrefix(k, OwnLabelPrefix) || k == teamLabel || strings.HasPrefix(k, frozenLabel) || k == thawedLabel {
			return store.Sandbox{}, fmt.Errorf("label %q is not one of the server's own: %w", k, sandbox.ErrInvalid)
		}
	}
	switch {
	case req.Template != "", len(req.Manifest) > 0, req.Size != "", req.Root != "", req.User != "":
		return store.Sandbox{}, invalid("a sandbox made from a snapshot has the snapshot's template, files, size and user; create it without them")
	}
	if req.Isolation != "" && cmp.Or(req.Isolation, sandbox.IsolationNative) != Isolation(fr) {
		return store.Sandbox{}, invalid("isolation %q: a sandbox made from this snapshot runs on its tier, %s; create it without isolation", req.Isolation, Isolation(fr))
	}
	// A network the create names is not dropped for the snapshot's: a
	// create that asks for less egress than the snapshot had is refused,
	// not given more.
	if req.Network != nil {
		n, err := networkOf(req.Network)
		if err != nil {
			return store.Sandbox{}, err
		}
		if cmp.Or(n.Mode, "none") != cmp.Or(fr.Spec.Network.Mode, "none") || !slices.Equal(n.Allow, fr.Spec.Network.Allow) {
			return store.Sandbox{}, invalid("network %q: a sandbox made from a snapshot has the snapshot's network (%q); create it without one, or with the same",
				cmp.Or(n.Mode, "none"), cmp.Or(fr.Spec.Network.Mode, "none"))
		}
	}
	ttl, err := Seconds("ttl_seconds", req.TTLSeconds, f.cfg.MaxTTL)
	if err != nil {
		return store.Sandbox{}, err
	}
	if ttl == 0 {
		ttl = f.cfg.DefaultTTL
	}
	idle, err := Seconds("idle_timeout_seconds", req.IdleTimeoutSeconds, f.cfg.MaxTTL)
	if err != nil {
		return store.Sandbox{}, err
	}
	switch req.OnExpire {
	case "":
		req.OnExpire = store.ExpireStop
	case store.ExpireStop, store.ExpireDelete:
	default:
		return store.Sandbox{}, invalid("on_expire %q: use stop (keep the disk) or delete", req.OnExpire)
	}
	labels, err := checkLabels(req.Labels, fr.TeamID)
	if err != nil {
		return store.Sandbox{}, err
	}
	spec := fr.Spec
	spec.TTL, spec.Labels = ttl, labels
	spec.Env = maps.Clone(fr.Spec.Env)
	if len(req.Env) > 0 && spec.Env == nil {
		spec.Env = map[string]string{}
	}
	maps.Copy(spec.Env, req.Env)
	if err := spec.Normalize(); err != nil {
		return store.Sandbox{}, err
	}
	maps.Copy(spec.Labels, own)
	spec.Labels[thawedLabel] = "1"
	return store.Sandbox{TeamID: fr.TeamID, Spec: spec, Size: fr.Size, IdleTimeout: idle, OnExpire: req.OnExpire}, nil
}

// thawStart gives a fork of a frozen copy its environment and deadline
// and records it running. Callers hold createMu.
func (f *Fleet) thawStart(ctx context.Context, sess sandbox.Session, rec *store.Sandbox, env map[string]string) error {
	if len(env) > 0 {
		es, ok := sess.(envSetter)
		if !ok {
			return fmt.Errorf("this server's runtime cannot set a copied sandbox's environment; create it without envs: %w", errors.ErrUnsupported)
		}
		if err := es.SetEnv(ctx, env); err != nil {
			return err
		}
	}
	now := f.cfg.Now()
	rec.State, rec.CreatedAt, rec.StartedAt, rec.LastActivity = store.StateRunning, now, now, now
	rec.Deadline = now.Add(rec.Spec.TTL)
	if d, ok := f.cfg.Runtime.(sandbox.Deadliner); ok {
		if err := d.SetDeadline(ctx, rec.ID, rec.Deadline.Add(f.expireGrace(*rec))); err != nil {
			return err
		}
	}
	return f.cfg.Store.PutSandbox(ctx, *rec)
}

// thawedEnv gives the daemon of a sandbox made from a frozen copy, just
// resumed, the environment its record has: the runtime starts it with
// the copy's, and the create's envs were given to the daemon that
// stopped. sess is closed.
func (f *Fleet) thawedEnv(ctx context.Context, sess sandbox.Session, rec store.Sandbox) error {
	defer closeSession(sess)
	if rec.Spec.Labels[thawedLabel] == "" || len(rec.Spec.Env) == 0 {
		return nil
	}
	es, ok := sess.(envSetter)
	if !ok {
		return fmt.Errorf("this server's runtime cannot set the environment of a sandbox made from a snapshot: %w", errors.ErrUnsupported)
	}
	return es.SetEnv(ctx, rec.Spec.Env)
}

// hideFrozen is a frozen copy read by a sandbox's id: not found.
func hideFrozen(rec store.Sandbox, err error) (store.Sandbox, error) {
	if err == nil && IsFrozen(rec) {
		return store.Sandbox{}, fmt.Errorf("sandbox %s not found: %w", rec.ID, sandbox.ErrNotFound)
	}
	return rec, err
}

// listSandboxes is a page of the store's sandboxes without frozen
// copies: pages are read on until limit are found or none are left.
func (f *Fleet) listSandboxes(ctx context.Context, filter store.SandboxFilter) ([]store.Sandbox, string, error) {
	limit := filter.Limit
	if limit <= 0 {
		limit = 100
	}
	var out []store.Sandbox
	for {
		page, next, err := f.cfg.Store.ListSandboxes(ctx, filter)
		if err != nil {
			return nil, "", err
		}
		for i, rec := range page {
			if IsFrozen(rec) {
				continue
			}
			if len(out) == limit {
				return out, page[i-1].ID, nil
			}
			out = append(out, rec)
		}
		if next == "" {
			return out, "", nil
		}
		if len(out) == limit {
			return out, next, nil
		}
		filter.After = next
	}
}
