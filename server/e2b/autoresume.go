package e2b

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
)

// Auto-pause and auto-resume: E2B's autoPause, autoPauseMemory,
// autoResume, and the lifecycle object newer APIs take instead.
//
// A sandbox made with autoPause (lifecycle.onTimeout "pause") is paused
// at its timeout instead of killed: the fleet's OnExpire stop, which
// keeps the disk and the record across a server restart. On the gvisor
// tier the pause keeps memory too, unless autoPauseMemory is false
// (fleet.ExpireMemoryLabel): its processes come back at resume, by
// connect or by traffic. Cove's native tier keeps no memory: processes
// end, as at a pause with keepMemory false, and autoPauseMemory true
// (E2B's default, which the SDKs' default options send) is accepted all
// the same; false is refused where E2B refuses it, so code that works
// here works on E2B.
//
// A sandbox made with autoResume (the record's autoResumeLabel) is
// started again by the first traffic to it that would be let in were it
// running: an envd call with its access token or a URL signed with it,
// or a request to one of its ports (with its traffic access token when
// its ports are private). Any other request, and any request to a paused
// sandbox without autoResume, gets the paused answer and resumes
// nothing. Requests that find it paused at once resume it once
// (fleet.Wake), a gvisor sandbox with the processes it was paused with.
// Its timeout then starts afresh: the create's timeout, at
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
		// E2B's rules, so that what Cove takes E2B takes too.
		if !pause {
			return false, false, "autoPauseMemory=false only applies when autoPause is true"
		}
		if resume {
			return false, false, "autoPauseMemory=false (filesystem-only auto-pause) cannot be combined with autoResume, as on E2B; leave autoPauseMemory unset"
		}
	}
	return pause, resume, ""
}

// autoResumes reports whether traffic resumes a paused sandbox.
func autoResumes(rec store.Sandbox) bool { return rec.Spec.Labels[autoResumeLabel] != "" }

// paused reports whether E2B would call a sandbox paused: a running
// record past a deadline that pauses it is paused already, as the
// runtime has stopped it or is about to (fleet.Due).
func (s *API) paused(rec store.Sandbox) bool {
	return rec.State != store.StateRunning || s.fleet.Due(rec)
}

// resumeTTL is how long a sandbox resumed by traffic runs: its create's
// timeout, at least autoResumeMinTTL, within the server's longest.
func (s *API) resumeTTL(rec store.Sandbox) time.Duration {
	return min(max(rec.Spec.TTL, autoResumeMinTTL), s.fleet.MaxTTL())
}

// resumeFor resumes a paused sandbox with autoResume for a request that
// is let in to it, and returns its record; false when it could not, the
// request answered.
func (s *API) resumeFor(w http.ResponseWriter, r *http.Request, rec store.Sandbox, port int) (store.Sandbox, bool) {
	// Of requests that come at once, one resumes it and the others find
	// it running (fleet.Wake). A client that leaves must not cut a
	// resume short.
	fresh, resumed, err := s.fleet.Wake(context.WithoutCancel(r.Context()), rec.TeamID, rec.ID, s.resumeTTL(rec))
	switch {
	case errors.Is(err, sandbox.ErrNotFound):
		writeProxyError(w, r, http.StatusBadGateway, rec.ID, port, fmt.Sprintf("The sandbox %s was not found: it was killed, its timeout passed, or the id is wrong", rec.ID))
		return fresh, false
	case err != nil:
		status, _, msg := s.cfg.Errs.Failure(r, sandbox.WrapIDf(rec.ID, err, "resuming sandbox %s", rec.ID))
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
