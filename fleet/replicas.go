package fleet

import (
	"context"
	"errors"
	"time"

	"github.com/cove-sandbox/cove/fleet/lease"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
)

// Replicas. With Config.Lease set, several processes share the store
// (and a runtime whose sandboxes they all see, such as the kube runtime):
//   - the lifecycle loop runs in the one that holds the lease
//     LifecycleLease; it reconciles first each time it takes the lease
//     (a holder that died may have left a create half done), and stops
//     when a renew fails;
//   - every read-modify-write of a sandbox record is one transaction of
//     the store (store.UpdateSandbox, through update): a peer's change to
//     a record is never lost, and a deleted record never put back;
//   - where runtime work sits between a read and its write, a lock in
//     the store (a lease, lockShared) holds off peers: a quota check
//     holds the team's, "quota/<team>", until the sandbox it admits is
//     recorded, so two replicas cannot each pass a team's quota with the
//     same room; the loop's stop or delete of a sandbox and a resume or
//     pause of it hold its operation lock, "op/<id>" (lockOp).
//     Order: an operation lock, then a team's.

// LifecycleLease is the lease whose holder runs the lifecycle loop.
const LifecycleLease = "cove/lifecycle"

// orphanGrace is how old a sandbox the runtime has and the store does
// not must be before Reconcile deletes it when replicas share the store:
// a younger one may be a peer's create in flight, not yet recorded.
const orphanGrace = 2 * time.Minute

// lockShared holds the lease name as a mutex across the processes
// sharing the store (and the callers of this one: each is a holder of
// its own) until the returned func is called; with no Config.Lease (one
// process) it does nothing.
func (f *Fleet) lockShared(ctx context.Context, name string) (func(), error) {
	return lease.Lock(ctx, f.cfg.Lease, name, f.cfg.Holder, lockTTL, f.log)
}

// lockTTL is how long an operation's or team's lock outlives a process that
// died holding it. Not Config.LeaseTTL: a lock is held for one step and
// renewed while held, and a short one lost to a slow store would let a
// peer's write in.
const lockTTL = lease.DefaultTTL

// lockOp takes sandbox id's operation lock: this process's (f.ops) and
// the same across replicas ("op/<id>"), so that the lifecycle loop's stop
// or delete on one replica and a resume or pause on another happen one
// after the other (the loop would stop a sandbox a peer just resumed).
// Taken before createMu and any other lock.
func (f *Fleet) lockOp(ctx context.Context, id string) (func(), error) {
	unlockLocal := f.ops.lock(id)
	unlock, err := f.lockShared(ctx, "op/"+id)
	if err != nil {
		unlockLocal()
		return nil, err
	}
	return func() { unlock(); unlockLocal() }, nil
}

// runLifecycle runs the lifecycle loop: in this process alone, or, with
// Config.Lease, whenever this process holds LifecycleLease.
func (f *Fleet) runLifecycle() {
	e := &lease.Elector{Leaser: f.cfg.Lease, Name: LifecycleLease, Holder: f.cfg.Holder, TTL: f.cfg.LeaseTTL, Log: f.log}
	e.Run(f.done, func(ctx context.Context) {
		if f.cfg.Lease != nil {
			if err := f.reconcile(ctx); err != nil && ctx.Err() == nil {
				f.log.Error("reconciling on taking the lifecycle lease", "err", err)
			}
		}
		f.lifecycleLoop(ctx)
	})
}

// LeaseHeld reports whether this process runs the lifecycle loop now
// (always true with no Config.Lease unless NoLifecycle).
func (f *Fleet) LeaseHeld() bool { return f.leaseHeld.Load() }

// meterHere bills, on a replica that does not run the lifecycle loop,
// the bytes through it (CountIn, CountOut) and the CPU time it read at
// its stops and deletes: only the loop meters, so they were lost. Each
// sandbox's go in as an interval of one nanosecond at the end of its
// recorded line of usage, which the loop's meter then goes on from as
// before (a line that ends 1 ns later bills 1 ns less).
func (f *Fleet) meterHere(ctx context.Context) {
	if f.cfg.Lease == nil || f.leaseHeld.Load() {
		return
	}
	ids := map[string]bool{}
	f.mu.Lock()
	for id := range f.traffic {
		ids[id] = true
	}
	f.mu.Unlock()
	f.cpu.mu.Lock()
	for id := range f.cpu.pending {
		ids[id] = true
	}
	f.cpu.mu.Unlock()
	for id := range ids {
		f.meterOne(ctx, id)
	}
}

// meterOne is meterHere for one sandbox.
func (f *Fleet) meterOne(ctx context.Context, id string) {
	in, out := f.takeTraffic(id)
	cpu := f.takeCPU(id)
	if in == 0 && out == 0 && cpu == 0 {
		return
	}
	giveBack := func() { f.CountIn(id, in); f.CountOut(id, out); f.giveBackCPU(id, cpu) }
	rec, err := f.cfg.Store.GetSandbox(ctx, "", id)
	if err != nil {
		if !errors.Is(err, sandbox.ErrNotFound) { // a deleted one's record is gone: nothing to bill to
			giveBack()
		}
		return
	}
	end := rec.CreatedAt
	sums, err := f.cfg.Store.UsageByTeam(ctx, rec.TeamID, rec.CreatedAt, farFuture)
	if err != nil {
		giveBack()
		return
	}
	for _, u := range sums {
		if u.SandboxID == id && u.End.After(end) {
			end = u.End
		}
	}
	u := store.Usage{TeamID: rec.TeamID, SandboxID: id, Start: end, End: end.Add(time.Nanosecond),
		BytesIn: in, BytesOut: out, CPUSeconds: cpu.Seconds()}
	if err := f.cfg.Store.AddUsage(ctx, u); err != nil {
		f.log.Warn("metering here: recording the bytes and CPU counted here", "sandbox", id, "err", err)
		giveBack()
	}
}
