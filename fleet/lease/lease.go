// Package lease runs work in one process at a time among the processes
// that share a store (several `cove serve` replicas on one PostgreSQL),
// through the store's store.Leaser: Elect runs a loop only while this
// process holds a named lease, and Lock holds a lease as a mutex across
// processes around a read-modify-write of a record.
//
// A holder renews its lease every ttl/3. When a renew fails (another
// process took the lease, or the store did not answer) the holder stops
// its work at once: it can no longer be sure it is the only one. A
// holder that dies loses the lease when the ttl passes since its last
// renew, and a waiting process takes it within Retry after that.
package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/cove-sandbox/cove/store"
)

// DefaultTTL is how long a lease outlives its holder's last renew.
const DefaultTTL = 15 * time.Second

// Holder returns an id for this process, unique among replicas:
// hostname, pid and a random part (a restarted process with the pid of
// a dead one is still another holder).
func Holder() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "host"
	}
	b := make([]byte, 4)
	rand.Read(b)
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b))
}

// Elector runs work while this process holds the lease Name.
type Elector struct {
	Leaser store.Leaser
	Name   string
	Holder string
	// TTL is the lease's life past each renew (DefaultTTL); Retry how
	// often a process that does not hold it asks again (TTL/5).
	TTL, Retry time.Duration
	Log        *slog.Logger
}

func (e *Elector) defaults() {
	if e.TTL <= 0 {
		e.TTL = DefaultTTL
	}
	if e.Retry <= 0 {
		e.Retry = e.TTL / 5
	}
	if e.Log == nil {
		e.Log = slog.New(slog.DiscardHandler)
	}
}

// Run calls work with a context that ends when the lease is lost or done
// is closed, each time this process takes the lease, until done is
// closed; it returns after work has returned and the lease is released.
// With no Leaser, work runs once, its context ending with done (a single
// process is always the holder).
func (e *Elector) Run(done <-chan struct{}, work func(ctx context.Context)) {
	e.defaults()
	if e.Leaser == nil {
		ctx, cancel := context.WithCancel(context.Background())
		stop := make(chan struct{})
		go func() {
			select {
			case <-done:
				cancel()
			case <-stop:
			}
		}()
		work(ctx)
		close(stop)
		cancel()
		return
	}
	t := time.NewTicker(e.Retry)
	defer t.Stop()
	for {
		if e.acquire() {
			e.hold(done, work)
		}
		select {
		case <-done:
			return
		case <-t.C:
		}
	}
}

// acquire asks for the lease once.
func (e *Elector) acquire() bool {
	ctx, cancel := context.WithTimeout(context.Background(), e.TTL/3)
	defer cancel()
	ok, err := e.Leaser.AcquireLease(ctx, e.Name, e.Holder, e.TTL)
	if err != nil {
		e.Log.Warn("lease: asking for it", "lease", e.Name, "err", err)
		return false
	}
	return ok
}

// hold runs work while the renews every TTL/3 succeed, then releases
// the lease if done was closed (a lost lease is not ours to release).
func (e *Elector) hold(done <-chan struct{}, work func(ctx context.Context)) {
	e.Log.Info("lease taken: this process runs the loop", "lease", e.Name, "holder", e.Holder)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		work(ctx)
	}()
	t := time.NewTicker(e.TTL / 3)
	defer t.Stop()
	for {
		select {
		case <-done:
			cancel()
			<-finished
			rctx, rcancel := context.WithTimeout(context.Background(), e.TTL/3)
			if err := e.Leaser.ReleaseLease(rctx, e.Name, e.Holder); err != nil {
				e.Log.Warn("lease: releasing it", "lease", e.Name, "err", err)
			}
			rcancel()
			return
		case <-t.C:
			// Renewed even after work returned on its own, so no peer
			// runs it again meanwhile.
			if !e.acquire() {
				e.Log.Warn("lease lost: stopping the loop", "lease", e.Name, "holder", e.Holder)
				cancel()
				<-finished
				return
			}
		}
	}
}

// Lock asks again for a lease another holds after lockRetry, doubling
// the wait up to maxLockRetry: a lock held across a sandbox's create
// (a team's quota) must not make its waiters hammer the store.
const (
	lockRetry    = 10 * time.Millisecond
	maxLockRetry = 250 * time.Millisecond
)

// Lock takes the lease name as a mutex across processes (and across
// callers in this one: each Lock is a holder of its own): it asks again,
// less and less often, until it has it or ctx ends, then renews it every ttl/3 until
// unlock, which releases it. A process that dies holding it frees it
// when ttl passes. With no Leaser it does nothing.
func Lock(ctx context.Context, l store.Leaser, name, holder string, ttl time.Duration, log *slog.Logger) (unlock func(), err error) {
	if l == nil {
		return func() {}, nil
	}
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b := make([]byte, 4)
	rand.Read(b)
	me := holder + "#" + hex.EncodeToString(b)
	wait := lockRetry
	for {
		ok, err := l.AcquireLease(ctx, name, me, ttl)
		if err != nil {
			return nil, fmt.Errorf("taking the lock %s: %w", name, err)
		}
		if ok {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the lock %s: %w", name, context.Cause(ctx))
		case <-time.After(wait):
		}
		wait = min(2*wait, maxLockRetry)
	}
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(ttl / 3)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				rctx, cancel := context.WithTimeout(context.Background(), ttl/3)
				if ok, err := l.AcquireLease(rctx, name, me, ttl); !ok || err != nil {
					log.Warn("lock: renewing it failed; a peer may take it", "lock", name, "err", err)
				}
				cancel()
			}
		}
	}()
	return func() {
		close(stop)
		<-stopped
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ttl/3)
		defer cancel()
		if err := l.ReleaseLease(rctx, name, me); err != nil {
			log.Warn("lock: releasing it", "lock", name, "err", err)
		}
	}, nil
}
