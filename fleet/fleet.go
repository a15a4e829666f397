// Package fleet is the sandbox service under every front door of `cove
// serve` (/v1, the E2B API, envd routing, the ports proxy, agent runs):
// it owns the runtime and the sandbox records, and does create, stop,
// resume, fork, delete and deadlines with quotas and tenancy, hands out
// live sessions by team and id, records activity (touch, traffic, open
// streams), runs the lifecycle loop (TTL, idle timeout, retention,
// reconciling after a restart), keeps snapshots and exposed ports, and
// meters use. It knows no HTTP: every method takes the caller's team and
// returns the sandbox package's sentinel errors (ErrNotFound, ErrInvalid,
// ErrState, ErrLimit, ErrUnavailable), wrapped with what failed.
//
// # Several replicas over one store
//
// The store is the truth, and Fleet keeps nothing a peer's write can
// make stale: every call reads the record afresh from the store. What it
// keeps in memory is safe with a second `cove serve` over the same store:
//   - live sessions, by sandbox id and the record's StartedAt: one is
//     used only after the record, read afresh, says the sandbox has run
//     since that start (a peer's stop makes the record say stopped, a
//     peer's resume gives it a new StartedAt);
//   - activity not yet written (touched) and the latest seen (lastTouch),
//     which only add to the store's LastActivity (TouchSandbox keeps the
//     latest); sandboxes with a stream open here are touched at every
//     flush, so a peer's lifecycle loop sees them in use;
//   - bytes through this process per sandbox (traffic), which this
//     process's lifecycle loop meters;
//   - the samples of each sandbox's use taken here when asked
//     (metrics.go), a measurement rather than a copy of a record: each
//     replica answers with its own.
//
// A quota check and the create it admits are serialised by createMu, a
// mutex of this process, and across processes by a lock in the store
// (Config.Lease, replicas.go); without a Lease nothing serialises them
// across replicas. Each read-modify-write of a record is one transaction
// of the store (store.UpdateSandbox), whoever makes it.
//
// The lifecycle loop (Start) and Reconcile act for the whole store: they
// meter every sandbox, stop and delete by policy, and delete a sandbox
// the runtime has but the store does not. So they run in ONE process per
// store: with Config.Lease, the holder of LifecycleLease (elected, with
// failover when it dies); without, the one not built with
// Config.NoLifecycle. Bytes through a replica that does not hold the
// lease (CountIn, CountOut), and CPU time it read at a stop or delete,
// it records itself every MeterInterval (meterHere); without a lease, a
// NoLifecycle replica's are not metered.
//
// Replicas must share the runtime too (every replica sees every sandbox,
// as with the kube runtime): the loop treats a sandbox the runtime does
// not list as gone.
package fleet

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/egress"
	"github.com/cove-sandbox/cove/fleet/lease"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
	"github.com/cove-sandbox/cove/store/blobdir"
)

// Config configures a Fleet. Zero values mean the defaults.
type Config struct {
	Runtime sandbox.Runtime
	Store   store.Store
	// DataDir holds what the store does not: snapshot tars, unless
	// Blobs keeps them.
	DataDir string
	// Blobs keeps snapshot tars ("snapshots/TEAM/ID.tar"); nil means the
	// store's own when it keeps blobs (PostgreSQL: replicas on several
	// hosts, each with its own DataDir, serve each other's snapshots),
	// else files under DataDir (store/blobdir).
	Blobs  store.Blobs
	Logger *slog.Logger
	// DefaultTTL applies when a create names none (30 min); MaxTTL caps
	// any TTL (7 days).
	DefaultTTL, MaxTTL time.Duration
	// Retention deletes stopped sandboxes this long after they stopped
	// (7 days); negative keeps them.
	Retention time.Duration
	// Prices turn usage into cost (Usage).
	Prices Prices
	// CPUByAllocation bills CPU by allocation (CPU limit x running
	// seconds) even when the runtime measures the CPU used (cpu.go).
	CPUByAllocation bool
	// Now is the clock (tests move it).
	Now func() time.Time
	// Egress vets the git_repo entries of a create's manifest; nil
	// refuses every non-public address (egress.New(nil, nil)).
	Egress *egress.Policy
	// MaxPids is the largest pids limit a create may ask for (8192);
	// AllowUnlimitedPids lets a create ask for none (pids -1).
	MaxPids            int
	AllowUnlimitedPids bool
	// MaxCPUs is the most CPUs a sandbox may have: this machine's count
	// unless set (a runtime whose sandboxes run elsewhere sets its
	// own). A create asking for more is refused; a size's preset above
	// it gets MaxCPUs.
	MaxCPUs float64
	// NoLifecycle keeps Start from running the lifecycle loop and makes
	// Reconcile do nothing, for a replica that shares its store with the
	// one process that runs them (see the package doc).
	NoLifecycle bool
	// Lease, when set, is shared by every process over this store: the
	// one holding LifecycleLease runs the lifecycle loop (and Reconcile
	// when it takes it), and a quota check or an operation on a sandbox
	// holds a lock across them (replicas.go). Nil: one process.
	Lease store.Leaser
	// Holder names this process in Lease (lease.Holder() unless set);
	// LeaseTTL is how long a lease outlives a holder that stopped
	// renewing it (lease.DefaultTTL).
	Holder   string
	LeaseTTL time.Duration
	// LifecycleInterval is how often the lifecycle loop runs (5 s): the
	// TTL, idle timeout and retention act at most this late. Tests
	// shorten it.
	LifecycleInterval time.Duration
}

// DefaultMaxPids is Config.MaxPids unless the operator sets it.
const DefaultMaxPids = 8192

// Fleet is the sandbox service. Make it with New, call Reconcile and
// Start, and Close at the end.
type Fleet struct {
	cfg Config
	log *slog.Logger

	// mu guards active (open streams and connections per sandbox),
	// traffic (bytes in and out per sandbox since the last meter) and
	// touched (activity not yet written to the store).
	mu      sync.Mutex
	active  map[string]int
	traffic map[string]*traffic
	touched map[string]time.Time
	// lastTouch is the latest activity seen per sandbox (kept after the
	// flush, so the lifecycle loop never misses one in flight).
	lastTouch map[string]time.Time
	// flushMu serialises flushTouches.
	flushMu sync.Mutex

	// sessMu guards sessions: the live session of each running sandbox,
	// kept so requests reuse its daemon connections (a new session per
	// request would dial the daemon each time).
	sessMu   sync.Mutex
	sessions map[string]cachedSession

	// metrics keeps each sandbox's recent samples (metrics.go).
	metrics metricRings
	// cpu holds the reads of sandboxes' CPU counters (cpu.go).
	cpu cpuCounts

	// createMu serialises quota checks with the creates they admit, and
	// the lifecycle loop's reading of records and the runtime's list with
	// creates and resumes, in this process (package doc).
	createMu sync.Mutex
	// ops serialises, per sandbox, the lifecycle loop's stop or delete
	// with a resume (wake.go). Taken before createMu, never after.
	ops sandboxLocks

	// leaseHeld is true while this process runs the lifecycle loop;
	// ticks counts the loop's rounds (tests).
	leaseHeld atomic.Bool
	ticks     atomic.Int64

	done   chan struct{}
	wg     sync.WaitGroup
	closed atomic.Bool
}

type traffic struct{ in, out atomic.Int64 }

// New returns a fleet; nothing runs in the background until Start.
func New(cfg Config) (*Fleet, error) {
	if cfg.Runtime == nil || cfg.Store == nil {
		return nil, fmt.Errorf("fleet: a runtime and a store are required: %w", sandbox.ErrInvalid)
	}
	if cfg.Blobs == nil {
		if b, ok := cfg.Store.(store.Blobs); ok {
			cfg.Blobs = b
		} else {
			cfg.Blobs = blobdir.New(cfg.DataDir)
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.DefaultTTL == 0 {
		cfg.DefaultTTL = 30 * time.Minute
	}
	if cfg.MaxTTL == 0 {
		cfg.MaxTTL = 7 * 24 * time.Hour
	}
	if cfg.Retention == 0 {
		cfg.Retention = 7 * 24 * time.Hour
	}
	if cfg.Prices == (Prices{}) {
		cfg.Prices = DefaultPrices
	}
	if cfg.LifecycleInterval == 0 {
		cfg.LifecycleInterval = 5 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Holder == "" {
		cfg.Holder = lease.Holder()
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = lease.DefaultTTL
	}
	if cfg.MaxCPUs <= 0 {
		cfg.MaxCPUs = float64(runtime.NumCPU())
	}
	if cfg.MaxPids == 0 {
		cfg.MaxPids = DefaultMaxPids
	}
	if cfg.MaxPids < api.MinPids {
		return nil, fmt.Errorf("fleet: the largest pids limit %d is below the smallest a sandbox can run with, %d: %w", cfg.MaxPids, api.MinPids, sandbox.ErrInvalid)
	}
	if cfg.Egress == nil {
		out, err := egress.New(nil, nil)
		if err != nil {
			return nil, err
		}
		cfg.Egress = out
	}
	return &Fleet{cfg: cfg, log: cfg.Logger, active: map[string]int{}, traffic: map[string]*traffic{},
		touched: map[string]time.Time{}, lastTouch: map[string]time.Time{}, sessions: map[string]cachedSession{},
		done: make(chan struct{})}, nil
}

// Now is the fleet's clock.
func (f *Fleet) Now() time.Time { return f.cfg.Now() }

// MaxTTL is the longest TTL a sandbox may be given.
func (f *Fleet) MaxTTL() time.Duration { return f.cfg.MaxTTL }

// Start runs the background loops: activity reaching the store every
// touchInterval and, unless Config.NoLifecycle, the lifecycle loop.
// Reconcile should have run first.
func (f *Fleet) Start() {
	if !f.cfg.NoLifecycle {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			f.runLifecycle()
		}()
	}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		t := time.NewTicker(touchInterval)
		defer t.Stop()
		metered := time.Now()
		for {
			select {
			case <-f.done:
				f.flushTouches()
				f.meterHere(context.Background())
				return
			case <-t.C:
				f.flushTouches()
				if time.Since(metered) >= MeterInterval {
					f.meterHere(context.Background())
					metered = time.Now()
				}
			}
		}
	}()
}

// Close stops the background loops, recording activity and use up to
// now. Sandboxes keep running: their supervisors outlive the server, and
// a new one picks them up.
func (f *Fleet) Close() error {
	if f.closed.CompareAndSwap(false, true) {
		close(f.done)
	}
	f.wg.Wait()
	return nil
}

// allSandboxes lists every sandbox of a team ("" for all teams).
func (f *Fleet) allSandboxes(ctx context.Context, team string) ([]store.Sandbox, error) {
	var all []store.Sandbox
	cursor := ""
	for {
		page, next, err := f.cfg.Store.ListSandboxes(ctx, store.SandboxFilter{TeamID: team, After: cursor, Limit: 1000})
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if next == "" {
			return all, nil
		}
		cursor = next
	}
}

// Counts is the number of sandboxes of every team by recorded state
// (running, stopped).
func (f *Fleet) Counts(ctx context.Context) (map[string]int, error) {
	counts := map[string]int{store.StateRunning: 0, store.StateStopped: 0}
	recs, err := f.allSandboxes(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("counting sandboxes: %w", err)
	}
	for _, rec := range recs {
		if IsFrozen(rec) {
			continue // a snapshot, not a sandbox
		}
		counts[rec.State]++
	}
	return counts, nil
}
