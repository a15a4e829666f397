package fleet

import (
	"context"
	"sync"
	"time"

	"github.com/cove-sandbox/cove/store"
)

// Resuming on traffic. A front door that resumes a sandbox when a
// request reaches it (E2B's autoResume) calls Wake for each request that
// finds it stopped; many may at once. The sandbox's lock (sandboxLocks)
// makes them one resume, and keeps the lifecycle loop's stop at a
// deadline from interleaving with it: read, stop and resume of one
// sandbox are one step each. The lock is this process's, and with
// replicas the store's too ("op/<id>", lockOp in replicas.go).

// Due reports whether a running sandbox's deadline has passed and it is
// to be stopped then: the runtime stops it at its deadline and the
// lifecycle loop records so within a tick; a front door may answer as
// after already.
func (f *Fleet) Due(rec store.Sandbox) bool {
	return rec.State == store.StateRunning && rec.OnExpire == store.ExpireStop &&
		!rec.Deadline.IsZero() && !f.cfg.Now().Before(rec.Deadline)
}

// Wake starts team's sandbox id again to end ttl from now (within the
// team's quota) when it is stopped or Due, and records it; resumed says
// whether this call started it. A running one, or one another call
// resumed meanwhile, is returned as it is, its deadline untouched.
func (f *Fleet) Wake(ctx context.Context, team, id string, ttl time.Duration) (rec store.Sandbox, resumed bool, err error) {
	unlock, err := f.lockOp(ctx, id)
	if err != nil {
		return rec, false, err
	}
	defer unlock()
	rec, err = f.getSettled(ctx, team, id)
	if err != nil || rec.State == store.StateRunning {
		return rec, false, err
	}
	err = f.resume(ctx, team, &rec, ttl)
	return rec, err == nil, err
}

// getSettled reads team's sandbox id and, when it is Due, stops it now
// (as the lifecycle loop would a moment later), so that what follows
// resumes it rather than trusting a runtime that has stopped it.
// Callers hold id's lock.
func (f *Fleet) getSettled(ctx context.Context, team, id string) (store.Sandbox, error) {
	rec, err := f.Get(ctx, team, id)
	if err != nil || !f.Due(rec) {
		return rec, err
	}
	err = f.settle(ctx, &rec)
	return rec, err
}

// sandboxLocks is a mutex per sandbox id, made when first wanted and
// dropped when no one holds or waits for it.
type sandboxLocks struct {
	mu sync.Mutex // guards m and each entry's refs
	m  map[string]*sandboxLock
}

type sandboxLock struct {
	sync.Mutex
	refs int // holders and waiters
}

// lock takes id's lock and returns what releases it.
func (l *sandboxLocks) lock(id string) (unlock func()) {
	l.mu.Lock()
	if l.m == nil {
		l.m = map[string]*sandboxLock{}
	}
	e := l.m[id]
	if e == nil {
		e = &sandboxLock{}
		l.m[id] = e
	}
	e.refs++
	l.mu.Unlock()
	e.Lock()
	return func() {
		e.Unlock()
		l.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(l.m, id)
		}
		l.mu.Unlock()
	}
}
