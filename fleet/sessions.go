package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
)

// Live sessions and activity.

type cachedSession struct {
	sess    sandbox.Session
	started time.Time // the record's StartedAt when cached: a resume makes a new one
}

// Session returns team's running sandbox id and its live session, and
// marks the sandbox active (every use of a live session is activity:
// exec, files, processes, ports; reading a record is not). ErrNotFound
// when team has no such sandbox, ErrState when it is stopped.
func (f *Fleet) Session(ctx context.Context, team, id string) (store.Sandbox, sandbox.Session, error) {
	rec, err := f.Get(ctx, team, id)
	if err != nil {
		return rec, nil, err
	}
	if rec.State != store.StateRunning {
		f.forgetSession(rec.ID)
		return rec, nil, fmt.Errorf("sandbox %s is stopped; resume it first: %w", rec.ID, sandbox.ErrState)
	}
	f.Touch(rec.ID)
	sess, err := f.LiveSession(ctx, rec)
	if err != nil {
		return rec, nil, sandbox.WrapIDf(rec.ID, err, "sandbox %s", rec.ID)
	}
	return rec, sess, nil
}

// Open returns the live session of team's sandbox id, resuming it (within
// the team's quota) when it is stopped, and marks it active: what an
// agent run needs of its sandbox. ErrNotFound when team has no such
// sandbox.
func (f *Fleet) Open(ctx context.Context, team, id string) (sandbox.Session, error) {
	rec, err := f.Get(ctx, team, id)
	if err != nil {
		return nil, err
	}
	if rec.State != store.StateRunning {
		unlock, err := f.lockOp(ctx, rec.ID)
		if err != nil {
			return nil, err
		}
		err = f.resume(ctx, team, &rec, rec.Spec.TTL)
		unlock()
		if err != nil {
			return nil, err
		}
	}
	f.Touch(rec.ID)
	return f.LiveSession(ctx, rec)
}

// LiveSession returns the live session of the sandbox of a record just
// read (running), reusing the one made since it last started. It checks
// nothing of the caller: the front doors that reach a sandbox by a token
// of its own (envd, ports) use it after Find.
func (f *Fleet) LiveSession(ctx context.Context, rec store.Sandbox) (sandbox.Session, error) {
	f.sessMu.Lock()
	c, ok := f.sessions[rec.ID]
	f.sessMu.Unlock()
	if ok && c.started.Equal(rec.StartedAt) {
		return c.sess, nil
	}
	sess, err := f.cfg.Runtime.Get(ctx, rec.ID)
	if err != nil {
		return nil, err
	}
	// Two requests that missed at once each made one: the first kept
	// wins and the other is closed, so no daemon connection is left
	// without an owner. A session of an earlier start is not closed here:
	// a request that read the record before a resume may still hold it.
	f.sessMu.Lock()
	if c, ok := f.sessions[rec.ID]; ok && c.started.Equal(rec.StartedAt) {
		f.sessMu.Unlock()
		closeSession(sess)
		return c.sess, nil
	}
	f.sessions[rec.ID] = cachedSession{sess: sess, started: rec.StartedAt}
	f.sessMu.Unlock()
	return sess, nil
}

// forgetSession drops a sandbox's cached session (it stopped or went).
func (f *Fleet) forgetSession(id string) {
	f.sessMu.Lock()
	c, ok := f.sessions[id]
	delete(f.sessions, id)
	f.sessMu.Unlock()
	if ok {
		closeSession(c.sess)
	}
}

func closeSession(sess sandbox.Session) {
	if cl, ok := sess.(io.Closer); ok {
		cl.Close()
	}
}

// Begin records an open stream or connection to a sandbox: it counts as
// activity for the idle timeout until end is called.
func (f *Fleet) Begin(id string) (end func()) {
	f.mu.Lock()
	f.active[id]++
	f.mu.Unlock()
	f.Touch(id)
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			if f.active[id]--; f.active[id] <= 0 {
				delete(f.active, id)
			}
			f.mu.Unlock()
			f.Touch(id)
		})
	}
}

// Busy reports whether a sandbox has a stream or connection open through
// this process.
func (f *Fleet) Busy(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.active[id] > 0
}

// Touch records activity on a sandbox now. The store hears of it within
// touchInterval (flushTouches): a write per request would put an fsync on
// every exec's path, and idle timeouts are minutes long.
func (f *Fleet) Touch(id string) {
	now := f.cfg.Now()
	f.mu.Lock()
	if now.After(f.touched[id]) {
		f.touched[id] = now
	}
	if now.After(f.lastTouch[id]) {
		f.lastTouch[id] = now
	}
	f.mu.Unlock()
}

// LastActivity is the latest activity on a sandbox this process saw,
// whether or not it has reached the store yet.
func (f *Fleet) LastActivity(id string) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastTouch[id]
}

// touchInterval is how often recorded activity reaches the store.
var touchInterval = time.Second

// flushTouches writes the activity recorded since the last flush, and
// now for every sandbox with a stream open here (so a peer's lifecycle
// loop, which cannot see this process's streams, sees it in use). One
// flush runs at a time, so one that returns has seen every touch before
// it written (the lifecycle loop relies on it).
func (f *Fleet) flushTouches() {
	f.flushMu.Lock()
	defer f.flushMu.Unlock()
	now := f.cfg.Now()
	f.mu.Lock()
	pending := f.touched
	f.touched = map[string]time.Time{}
	for id := range f.active {
		if now.After(pending[id]) {
			pending[id] = now
		}
	}
	f.mu.Unlock()
	for id, t := range pending {
		if err := f.cfg.Store.TouchSandbox(context.Background(), id, t); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
			f.log.Warn("recording activity", "sandbox", id, "err", err)
		}
	}
}

// CountIn and CountOut meter bytes into and out of a sandbox through the
// front doors (the API, the proxies).
func (f *Fleet) CountIn(id string, n int64)  { f.trafficOf(id).in.Add(n) }
func (f *Fleet) CountOut(id string, n int64) { f.trafficOf(id).out.Add(n) }

func (f *Fleet) trafficOf(id string) *traffic {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.traffic[id]
	if t == nil {
		t = &traffic{}
		f.traffic[id] = t
	}
	return t
}

// takeTraffic returns and resets a sandbox's byte counts.
func (f *Fleet) takeTraffic(id string) (in, out int64) {
	f.mu.Lock()
	t := f.traffic[id]
	f.mu.Unlock()
	if t == nil {
		return 0, 0
	}
	return t.in.Swap(0), t.out.Swap(0)
}

// Traffic is the bytes into and out of a sandbox counted here and not
// yet metered.
func (f *Fleet) Traffic(id string) (in, out int64) {
	t := f.trafficOf(id)
	return t.in.Load(), t.out.Load()
}
