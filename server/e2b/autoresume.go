package e2b

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
)

// Auto-pause and auto-resume: E2B's autoPause, autoPauseMemory,
// autoResume, and the lifecycle object newer APIs take instead.
//
// A sandbox made with autoPause (lifecycle.onTimeout "pause") is paused
// at its timeout instead of killed: the fleet's OnExpire stop, which
// keeps the disk and the record across a server restart. Cove's native
// tier keeps no memory: processes end, as at a pause with keepMemory
// false. autoPauseMemory is accepted all the same (true is E2B's default,
// which the SDKs' default options send) and documented; false is refused
// where E2B refuses it, so code that works here works on E2B.
//
// A sandbox made with autoResume (the record's autoResumeLabel) is
// started again by the first traffic to it that would be let in were it
// running: an envd call with its access token or a URL signed with it,
// or a request to one of its ports (with its traffic access token when
// its ports are private). Any other request, and any request to a paused
// sandbox without autoResume, gets the paused answer and resumes
// nothing. Requests that find it paused at once resume it once
// (wakeLocks). Its timeout then starts afresh: the create's timeout, at
// least autoResumeMinTTL, as E2B's API does.

const (
	// autoResumeLabel marks a sandbox that traffic resumes.
	autoResumeLabel = "cove.e2b.auto-resume"
	// autoResumeMinTTL is the least a sandbox resumed by traffic runs
	// before its timeout: E2B's floor (its minimum-autoresume-timeout),
	// so a sandbox with a short timeout does not pause between a
	// client's requests.
	autoResumeMinTTL = 5 * time.Minute
)

// newLifecycle is the lifecycle object of a create, which newer E2B APIs
// take in place of autoPause and autoResume.
type newLifecycle struct {
	OnTimeout  *string `json:"onTimeout"`
	AutoResume *bool   `json:"autoResume"`
	Keepalive  *struct {
		Traffic *struct {
			Enabled bool `json:"enabled"`
		} `json:"traffic"`
	} `json:"keepalive"`
}

// timeoutPolicy is what a create asks for at its timeout and on traffic
// while paused: pause (else kill) and resume; msg says what is wrong
// when the fields disagree.
func (b *newSandbox) timeoutPolicy() (pause, resume bool, msg string) {
	if b.AutoPause != nil {
		pause = *b.AutoPause
	}
	if b.AutoResume != nil {
		resume = b.AutoResume.Enabled
	}
	if lc := b.Lifecycle; lc != nil {
		if lc.OnTimeout != nil {
			if b.AutoPause != nil {
				return false, false, "autoPause and lifecycle.onTimeout cannot both be set; give one"
			}
			switch *lc.OnTimeout {
			case "pause", "kill":
				pause = *lc.OnTimeout == "pause"
			default:
				return false, false, fmt.Sprintf("lifecycle.onTimeout %q: use pause or kill", *lc.OnTimeout)
			}
		}
		if lc.AutoResume != nil {
			if b.AutoResume != nil {
				return false, false, "autoResume and lifecycle.autoResume cannot both be set; give one"
			}
			resume = *lc.AutoResume
		}
		if lc.Keepalive != nil && lc.Keepalive.Traffic != nil && lc.Keepalive.Traffic.Enabled {
			return false, false, "lifecycle.keepalive: Cove does not extend a sandbox's timeout on traffic yet; extend it with setTimeout"
		}
	}
	if b.AutoPauseMemory != nil && !*b.AutoPauseMemory {
		// E2B's rules, so that what Cove takes E2B takes too (Cove's
		// pause never keeps memory either way).
		if !pause {
			return false, false, "autoPauseMemory=false only applies when autoPause is true"
		}
		if resume {
			return false, false, "autoPauseMemory=false (filesystem-only auto-pause) cannot be combined with autoResume, as on E2B; leave autoPauseMemory unset (Cove's pause keeps the disk, never memory)"
		}
	}
	return pause, resume, ""
}

// autoResumes reports whether traffic resumes a paused sandbox.
func autoResumes(rec store.Sandbox) bool { return rec.Spec.Labels[autoResumeLabel] != "" }

// due reports whether a running sandbox's timeout has passed and it is to
// be paused then: the runtime stops it at its deadline and the lifecycle
// loop records so within a few seconds; this API answers as after
// already.
func (s *API) due(rec store.Sandbox) bool {
	return rec.State == store.StateRunning && rec.OnExpire == store.ExpireStop &&
		!rec.Deadline.IsZero() && !s.fleet.Now().Before(rec.Deadline)
}

// paused reports whether E2B would call a sandbox paused.
func (s *API) paused(rec store.Sandbox) bool { return rec.State != store.StateRunning || s.due(rec) }

// resumeTTL is how long a sandbox resumed by traffic runs: its create's
// timeout, at least autoResumeMinTTL, within the server's longest.
func (s *API) resumeTTL(rec store.Sandbox) time.Duration {
	return min(max(rec.Spec.TTL, autoResumeMinTTL), s.fleet.MaxTTL())
}

// settle reads sandbox id afresh and, when its timeout has passed and it
// is to pause then, pauses it now (as the lifecycle loop would a moment
// later), so that what follows sees it paused rather than running on a
// runtime that has stopped it. Callers hold id's wake lock.
func (s *API) settle(ctx context.Context, id string) (store.Sandbox, error) {
	rec, err := s.fleet.Find(ctx, id)
	if err != nil || !s.due(rec) {
		return rec, err
	}
	return s.fleet.Stop(ctx, rec.TeamID, rec.ID)
}

// awaken runs paused sandbox id again for a request's traffic, once
// however many requests come at once: the first resumes it (resumed
// true), the others find it running.
func (s *API) awaken(ctx context.Context, id string) (rec store.Sandbox, resumed bool, err error) {
	unlock := s.wakes.lock(id)
	defer unlock()
	rec, err = s.settle(ctx, id)
	if err != nil || rec.State == store.StateRunning {
		return rec, false, err
	}
	rec, err = s.fleet.Wake(ctx, rec.TeamID, rec.ID, s.resumeTTL(rec))
	return rec, err == nil, err
}

// resumeFor resumes a paused sandbox with autoResume for a request that
// is let in to it, and returns its record; false when it could not, the
// request answered.
func (s *API) resumeFor(w http.ResponseWriter, r *http.Request, rec store.Sandbox, port int) (store.Sandbox, bool) {
	// A client that leaves must not cut a resume short.
	fresh, resumed, err := s.awaken(context.WithoutCancel(r.Context()), rec.ID)
	switch {
	case errors.Is(err, sandbox.ErrNotFound):
		writeProxyError(w, r, http.StatusBadGateway, rec.ID, port, fmt.Sprintf("The sandbox %s was not found: it was killed, its timeout passed, or the id is wrong", rec.ID))
		return fresh, false
	case err != nil:
		status, _, msg := s.cfg.Errs.Failure(r, fmt.Errorf("resuming sandbox %s: %w", rec.ID, err))
		writeProxyError(w, r, status, rec.ID, port, msg)
		return fresh, false
	case fresh.State != store.StateRunning:
		pausedError(w, r, fresh, port)
		return fresh, false
	}
	if resumed {
		s.log.Info("resumed a paused sandbox on traffic", "sandbox", rec.ID, "port", port, "ttl", s.resumeTTL(fresh))
	}
	return fresh, true
}

// wakeLocks serialises, per sandbox, what runs a paused sandbox again
// through this API (a resume on traffic, connect), in this process: of
// requests that find it paused at once, the first resumes it and the
// others then find it running.
type wakeLocks struct {
	mu sync.Mutex // guards m
	m  map[string]*wakeLock
}

type wakeLock struct {
	sync.Mutex
	refs int // holders and waiters; guarded by wakeLocks.mu
}

// lock takes id's lock and returns what releases it.
func (l *wakeLocks) lock(id string) (unlock func()) {
	l.mu.Lock()
	if l.m == nil {
		l.m = map[string]*wakeLock{}
	}
	e := l.m[id]
	if e == nil {
		e = &wakeLock{}
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
