package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/cove-sandbox/cove/guest"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/internal/sbutil"
	"github.com/cove-sandbox/cove/sandbox/local/internal/host"
	"github.com/cove-sandbox/cove/sandbox/local/internal/sbdir"
)

// The warm pool. Starting a sandbox costs two Go start-ups, the mounts
// and the hardening, tens of milliseconds on a small machine; with
// Config.Pool set, the runtime keeps that many sandboxes started ahead
// (host template, default workspace, Config.PoolDiskBytes of disk) and Create hands one
// out: it takes the caller's spec (environment through the daemon, limits
// through its cgroup, TTL through its supervisor) in about a millisecond.
// Pooled sandboxes live on disk like any other, so a short-lived process
// (the CLI) fills the pool for the next one.

// poolable reports whether a spec can be served from the pool: what a
// pooled sandbox cannot change after it started is at its default.
func (r *Runtime) poolable(spec sandbox.Spec) bool {
	return (spec.Template == "" || spec.Template == "host") &&
		(spec.Root == "" || spec.Root == sandbox.DefaultRoot) &&
		spec.Limits.DiskBytes == r.cfg.PoolDiskBytes && spec.User == "" &&
		(spec.Network.Mode == "" || spec.Network.Mode == "none") &&
		(spec.Isolation == "" || spec.Isolation == sandbox.IsolationNative)
}

// claim hands out a ready pooled sandbox, made into spec; ok is false
// when none is ready (or one could not take the spec: it is deleted).
func (r *Runtime) claim(ctx context.Context, spec sandbox.Spec) (sandbox.Session, bool) {
	entries, err := os.ReadDir(r.cfg.Dir)
	if err != nil {
		return nil, false
	}
	for _, e := range entries {
		id := e.Name()
		if !validID(id) {
			continue
		}
		st, err := sbdir.Read(r.dir(id))
		if err != nil || !st.Pooled || st.Info.State != sandbox.StateRunning || !sbutil.Alive(st.ShimPID) {
			continue
		}
		won := false
		st, err = sbdir.Update(r.dir(id), func(s *state) error {
			if !s.Pooled || s.Info.State != sandbox.StateRunning {
				return nil // another process took it first
			}
			won = true
			s.Pooled = false
			s.Info.Spec = spec
			s.Info.CreatedAt = time.Now().UTC()
			if spec.TTL > 0 {
				s.Deadline = time.Now().Add(spec.TTL)
			}
			return nil
		})
		if err != nil || !won {
			continue
		}
		if err := r.adopt(ctx, id, st); err != nil {
			r.log.Warn("a pooled sandbox could not take the spec; deleting it", "id", id, "err", err)
			r.deleteQuiet(id)
			continue
		}
		return r.session(id, st), true
	}
	return nil, false
}

// adopt applies a claimed sandbox's spec to what is already running.
func (r *Runtime) adopt(ctx context.Context, id string, st *state) error {
	if host.Limited(st.Info.Spec.Limits) {
		if err := host.UpdateLimits(st, st.Info.Spec.Limits); err != nil {
			return err
		}
	}
	if len(st.Info.Spec.Env) > 0 {
		c, err := guest.NewClient("unix://"+r.dir(id)+"/guest.sock", guest.ClientOptions{AccessToken: st.Token})
		if err != nil {
			return err
		}
		defer c.Close()
		if err := c.SetEnv(ctx, st.Info.Spec.Env); err != nil {
			return err
		}
	}
	if !st.Deadline.IsZero() {
		if err := syscall.Kill(st.ShimPID, syscall.SIGHUP); err != nil {
			return fmt.Errorf("telling the supervisor its TTL: %w", err)
		}
	}
	return nil
}

// refill starts pooled sandboxes until Config.Pool are ready or starting.
// It runs in the background; WaitPool waits for it.
func (r *Runtime) refill() {
	if r.cfg.Pool <= 0 {
		return
	}
	r.poolWG.Add(1)
	go func() {
		defer r.poolWG.Done()
		r.poolMu.Lock()
		defer r.poolMu.Unlock()
		spec := sandbox.Spec{Limits: sandbox.Limits{DiskBytes: r.cfg.PoolDiskBytes}}
		spec.Normalize() // the defaults; cannot fail
		r.defaults(&spec)
		for n := r.pooledCount(); n < r.cfg.Pool; n++ {
			s, err := r.create(context.Background(), spec, true)
			if err != nil {
				r.log.Warn("filling the sandbox pool", "err", err)
				return
			}
			// Its connection would idle until the sandbox is claimed.
			s.Client().Close()
		}
	}()
}

// pooledCount counts pooled sandboxes that run, deleting dead ones.
func (r *Runtime) pooledCount() int {
	entries, _ := os.ReadDir(r.cfg.Dir)
	n := 0
	for _, e := range entries {
		if !validID(e.Name()) {
			continue
		}
		st, err := r.load(e.Name())
		if err != nil || !st.Pooled {
			continue
		}
		if st.Info.State != sandbox.StateRunning {
			r.deleteQuiet(e.Name())
			continue
		}
		n++
	}
	return n
}

// WaitPool waits until the pool has been refilled (a process about to
// exit calls it, so the next one finds sandboxes ready).
func (r *Runtime) WaitPool() { r.poolWG.Wait() }

// DrainPool deletes every pooled sandbox.
func (r *Runtime) DrainPool(ctx context.Context) error {
	r.WaitPool()
	entries, err := os.ReadDir(r.cfg.Dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if st, err := sbdir.Read(r.dir(e.Name())); err == nil && st.Pooled {
			if err := r.Delete(ctx, e.Name()); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func (r *Runtime) deleteQuiet(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r.Delete(ctx, id)
}

// poolState is the Runtime's pool bookkeeping.
type poolState struct {
	poolMu sync.Mutex     // one refill at a time
	poolWG sync.WaitGroup // refills in flight
}

// FillPool starts filling the pool now rather than at the first create
// (a server calls it at start).
func (r *Runtime) FillPool() { r.refill() }
