package fleet

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
)

// Pause with memory and forks of many. A sandbox on a tier whose
// runtime keeps memory (sandbox.Pauser, gVisor) is paused with its
// processes: the runtime checkpoints it beside its disk, the record is
// stopped and marked (pausedLabel), and the next resume (Resume, Keep,
// Wake: E2B's connect and autoResume) restores it. The native tier's
// pause is a stop: the disk is kept, processes end.

// pausedLabel marks the record of a stopped sandbox that kept its
// memory; a resume takes it off.
const pausedLabel = "cove.paused-memory"

// ExpireMemoryLabel is an own label (CreateLabeled, value "1") that
// makes a sandbox's deadline pause it with its memory where its tier
// keeps memory, as E2B's autoPause with autoPauseMemory does, rather
// than stop it.
const ExpireMemoryLabel = "cove.expire-memory"

// Memory says what a pause keeps besides the disk.
type Memory int

const (
	// MemoryIfKept keeps the memory when the sandbox's tier can, else
	// the disk only (E2B's pause, whose keepMemory defaults to true).
	MemoryIfKept Memory = iota
	// MemoryRequired keeps the memory, or refuses with ErrInvalid when
	// the sandbox's tier cannot.
	MemoryRequired
	// MemoryDropped keeps the disk only: processes end.
	MemoryDropped
)

// Isolation is the tier of a sandbox's record: sandbox.IsolationNative
// or sandbox.IsolationGVisor.
func Isolation(rec store.Sandbox) string {
	if rec.Spec.Isolation == "" {
		return sandbox.IsolationNative
	}
	return rec.Spec.Isolation
}

// Paused reports whether a stopped sandbox kept its memory: its resume
// brings back its processes.
func Paused(rec store.Sandbox) bool {
	return rec.State == store.StateStopped && rec.Spec.Labels[pausedLabel] != ""
}

// KeepsMemory reports whether this server pauses rec with its memory.
func (f *Fleet) KeepsMemory(rec store.Sandbox) bool {
	_, ok := f.cfg.Runtime.(sandbox.Pauser)
	return ok && Isolation(rec) == sandbox.IsolationGVisor
}

// Pause stops team's running sandbox id and drops its deadline (it is
// then kept for the retention), keeping its memory as mem says: see
// Memory. ErrState when it is not running; ErrInvalid when mem is
// MemoryRequired and its tier keeps no memory.
func (f *Fleet) Pause(ctx context.Context, team, id string, mem Memory) (store.Sandbox, error) {
	unlock, err := f.lockOp(ctx, id)
	if err != nil {
		return store.Sandbox{}, err
	}
	defer unlock()
	rec, err := f.Get(ctx, team, id)
	if err != nil {
		return rec, err
	}
	if rec.State != store.StateRunning {
		return rec, fmt.Errorf("sandbox %s is already stopped: %w", rec.ID, sandbox.ErrState)
	}
	keep := f.KeepsMemory(rec)
	if mem == MemoryRequired && !keep {
		return rec, invalid("sandbox %s runs on the %s tier, whose pause keeps the disk only (processes end); pause it without keeping memory, or create it with isolation gvisor", rec.ID, Isolation(rec))
	}
	if !keep || mem == MemoryDropped {
		err = f.stop(ctx, &rec, true)
		return rec, err
	}
	err = f.pauseMemory(ctx, &rec, true)
	return rec, err
}

// pauseMemory pauses a running sandbox with its memory and records it
// stopped and paused (without its deadline when noDeadline). Callers
// hold its lock and know the runtime is a Pauser.
func (f *Fleet) pauseMemory(ctx context.Context, rec *store.Sandbox, noDeadline bool) error {
	f.forgetSession(rec.ID)
	f.readCPU(ctx, *rec) // its last CPU time, before the counter goes
	if err := f.cfg.Runtime.(sandbox.Pauser).Pause(ctx, rec.ID); err != nil {
		return sandbox.WrapIDf(rec.ID, err, "pausing sandbox %s", rec.ID)
	}
	return f.update(ctx, rec, func(r *store.Sandbox) error {
		r.State, r.StoppedAt = store.StateStopped, f.cfg.Now()
		r.Spec.Labels[pausedLabel] = "1"
		if noDeadline {
			r.Deadline = time.Time{}
		}
		return nil
	})
}

// expireMemory reports whether a running sandbox's deadline pauses it
// with its memory rather than stopping it.
func (f *Fleet) expireMemory(rec store.Sandbox) bool {
	return rec.OnExpire == store.ExpireStop && rec.Spec.Labels[ExpireMemoryLabel] != "" && f.KeepsMemory(rec)
}

// expireGrace is how much later than the record's deadline the runtime
// is told to stop a sandbox whose deadline pauses it with its memory:
// the lifecycle loop pauses it first, and the runtime's stop at its own
// deadline stays the backstop should the loop not run.
func (f *Fleet) expireGrace(rec store.Sandbox) time.Duration {
	if !f.expireMemory(rec) {
		return 0
	}
	return 2*f.cfg.LifecycleInterval + time.Minute
}

// haveTier refuses a create asking for a tier the runtime does not have
// (a host without runsc has no gvisor tier) with an ErrInvalid a tenant
// is shown: no retry would help, and native is there.
func (f *Fleet) haveTier(spec sandbox.Spec) error {
	il, ok := f.cfg.Runtime.(sandbox.IsolationLister)
	if !ok || spec.Isolation == "" || slices.Contains(il.Isolations(), spec.Isolation) {
		return nil
	}
	return invalid(fmt.Sprintf("isolation %s: this server has no %s tier (for gvisor: gVisor's runsc is not installed; its operator installs it with scripts/deps.sh); create the sandbox with isolation native", spec.Isolation, spec.Isolation))
}

// runtimeSpec is the spec the runtime gets for a create of rec with
// the server's own labels own: a deadline that pauses with memory is
// enforced by the runtime expireGrace later, as the backstop of the
// lifecycle loop's pause.
func (f *Fleet) runtimeSpec(spec sandbox.Spec, rec store.Sandbox, own map[string]string) sandbox.Spec {
	if own[ExpireMemoryLabel] != "" {
		rec.Spec.Labels = own
		spec.TTL += f.expireGrace(rec)
	}
	return spec
}

// settle stops, or pauses with its memory when its deadline does, a
// running sandbox whose deadline has passed (fleet.Due). The deadline
// is kept whatever becomes of the memory: a pause that fails is a stop,
// which keeps the disk. Callers hold its lock.
func (f *Fleet) settle(ctx context.Context, rec *store.Sandbox) error {
	if f.expireMemory(*rec) {
		err := f.pauseMemory(ctx, rec, false)
		if err == nil || errors.Is(err, sandbox.ErrNotFound) {
			return err
		}
		f.log.Warn("pausing a sandbox with its memory at its deadline failed; stopping it with its disk", "sandbox", rec.ID, "err", err)
	}
	return f.stop(ctx, rec, false)
}

// unpaused is a record resumed: without the paused mark.
func unpaused(rec store.Sandbox) store.Sandbox {
	if _, ok := rec.Spec.Labels[pausedLabel]; ok {
		rec.Spec.Labels = maps.Clone(rec.Spec.Labels)
		delete(rec.Spec.Labels, pausedLabel)
	}
	return rec
}

// ForkN makes n running copies of team's sandbox id (1 to
// api.MaxForks, within the team's quota) and records them. Copies of a
// running sandbox whose runtime forks memory (gVisor) start with its
// processes; others with its disk. errors.ErrUnsupported when the
// runtime cannot fork. On error no copy is left.
func (f *Fleet) ForkN(ctx context.Context, team, id string, n int) ([]store.Sandbox, error) {
	if n < 1 || n > api.MaxForks {
		return nil, invalid("count: %d copies; give 1 to %d", n, api.MaxForks)
	}
	rec, err := f.Get(ctx, team, id)
	if err != nil {
		return nil, err
	}
	if _, ok := f.cfg.Runtime.(sandbox.Forker); !ok {
		return nil, fmt.Errorf("this server's runtime cannot fork sandboxes: %w", errors.ErrUnsupported)
	}
	f.createMu.Lock()
	defer f.createMu.Unlock()
	release, err := f.admitN(ctx, team, rec.Spec, n)
	if err != nil {
		return nil, err
	}
	defer release()
	sessions, err := f.forkSessions(ctx, rec, n)
	if err != nil {
		return nil, sandbox.WrapIDf(rec.ID, err, "forking sandbox %s", rec.ID)
	}
	children := make([]store.Sandbox, 0, n)
	for i, sess := range sessions {
		child := f.childOf(rec, sess.ID())
		closeSession(sess)
		if err := f.cfg.Store.PutSandbox(ctx, child); err != nil {
			for _, s := range sessions[i:] {
				f.cfg.Runtime.Delete(ctx, s.ID())
			}
			for _, c := range children {
				f.cfg.Runtime.Delete(ctx, c.ID)
				f.cfg.Store.DeleteSandbox(ctx, c.ID)
			}
			return nil, sandbox.WrapIDf(rec.ID, err, "recording a copy of sandbox %s", rec.ID)
		}
		children = append(children, child)
	}
	return children, nil
}

// forkSessions makes n copies of rec in the runtime: with its memory
// when it runs on a tier that keeps memory, else n disk forks. On error
// none is left.
func (f *Fleet) forkSessions(ctx context.Context, rec store.Sandbox, n int) ([]sandbox.Session, error) {
	if mf, ok := f.cfg.Runtime.(sandbox.MemoryForker); ok && rec.State == store.StateRunning && f.KeepsMemory(rec) {
		return mf.ForkMemory(ctx, rec.ID, n)
	}
	fk := f.cfg.Runtime.(sandbox.Forker)
	var out []sandbox.Session
	for range n {
		sess, err := fk.Fork(ctx, rec.ID)
		if err != nil {
			for _, s := range out {
				closeSession(s)
				f.cfg.Runtime.Delete(context.WithoutCancel(ctx), s.ID())
			}
			return nil, err
		}
		out = append(out, sess)
	}
	return out, nil
}

// childOf is the record of a running copy of rec.
func (f *Fleet) childOf(rec store.Sandbox, id string) store.Sandbox {
	now := f.cfg.Now()
	child := rec
	child.ID, child.State, child.CreatedAt, child.StartedAt, child.StoppedAt, child.LastActivity = id, store.StateRunning, now, now, time.Time{}, now
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
	return child
}
