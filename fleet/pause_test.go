package fleet

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/sandboxtest/fake"
	"github.com/cove-sandbox/cove/store"
	"github.com/cove-sandbox/cove/store/sqlite"
)

// memRuntime is the fake with a tier that keeps memory: Pause of a
// gvisor sandbox is a stop it remembers, and forks are new sandboxes of
// the same spec. It counts what the fleet asked of it.
type memRuntime struct {
	*fake.Runtime

	mu          sync.Mutex // guards the fields below
	paused      map[string]bool
	pauses      int
	memoryForks []int // n of each ForkMemory
	diskForks   int
	restored    []string // ids resumed while paused
	failPause   bool     // Pause fails as a checkpoint gVisor cannot save
}

var (
	_ sandbox.Pauser       = (*memRuntime)(nil)
	_ sandbox.MemoryForker = (*memRuntime)(nil)
)

func (r *memRuntime) spec(ctx context.Context, id string) (sandbox.Info, error) {
	s, err := r.Runtime.Get(ctx, id)
	if err != nil {
		return sandbox.Info{}, err
	}
	return s.Info(ctx)
}

func (r *memRuntime) Pause(ctx context.Context, id string) error {
	in, err := r.spec(ctx, id)
	if err != nil {
		return err
	}
	r.mu.Lock()
	fail := r.failPause
	r.mu.Unlock()
	if in.Spec.Isolation != sandbox.IsolationGVisor || fail {
		return sandbox.ErrUnavailable
	}
	if err := r.Runtime.Stop(ctx, id); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pauses++
	r.paused[id] = true
	return nil
}

func (r *memRuntime) Resume(ctx context.Context, id string) (sandbox.Session, error) {
	r.mu.Lock()
	if r.paused[id] {
		r.restored = append(r.restored, id)
		delete(r.paused, id)
	}
	r.mu.Unlock()
	return r.Runtime.Resume(ctx, id)
}

func (r *memRuntime) Fork(ctx context.Context, id string) (sandbox.Session, error) {
	in, err := r.spec(ctx, id)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.diskForks++
	r.mu.Unlock()
	return r.Runtime.Create(ctx, in.Spec)
}

func (r *memRuntime) ForkMemory(ctx context.Context, id string, n int) ([]sandbox.Session, error) {
	in, err := r.spec(ctx, id)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.memoryForks = append(r.memoryForks, n)
	r.mu.Unlock()
	var out []sandbox.Session
	for range n {
		s, err := r.Runtime.Create(ctx, in.Spec)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// newMemFleet is a fleet over a memRuntime, for team "t", whose clock
// the test moves with the returned func.
func newMemFleet(t *testing.T) (*Fleet, *memRuntime, func(time.Duration)) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	db, err := sqlite.Open(ctx, filepath.Join(dir, "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.CreateTeam(ctx, store.Team{ID: "t", Name: "t", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	now := time.Now().Truncate(time.Second)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	move := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	rt := &memRuntime{Runtime: fake.New(), paused: map[string]bool{}}
	f, err := New(Config{Runtime: rt, Store: db, DataDir: dir, NoLifecycle: true, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	return f, rt, move
}

// TestPauseKeepsMemoryWhereTheTierCan: a gvisor sandbox's pause asks
// the runtime to keep its memory, drops its deadline and marks the
// record paused, and its resume restores it and takes the mark off; a
// native sandbox's pause is a stop, refused when memory is required; a
// pause that drops memory is a stop on any tier.
func TestPauseKeepsMemoryWhereTheTierCan(t *testing.T) {
	ctx := context.Background()
	f, rt, _ := newMemFleet(t)
	gv, _, err := f.Create(ctx, "t", api.CreateSandbox{Isolation: "gvisor", TTLSeconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	if got := Isolation(gv); got != sandbox.IsolationGVisor {
		t.Fatalf("record's isolation %q, want gvisor", got)
	}
	rec, err := f.Pause(ctx, "t", gv.ID, MemoryIfKept)
	if err != nil || rec.State != store.StateStopped || !Paused(rec) || !rec.Deadline.IsZero() || rt.pauses != 1 {
		t.Fatalf("pause of a gvisor sandbox: %v, state %s paused %v deadline %v, %d runtime pauses; want stopped, paused, no deadline, 1",
			err, rec.State, Paused(rec), rec.Deadline, rt.pauses)
	}
	if _, err := f.Pause(ctx, "t", gv.ID, MemoryIfKept); !errors.Is(err, sandbox.ErrState) {
		t.Errorf("pause of a paused sandbox: %v, want ErrState", err)
	}
	rec, err = f.Resume(ctx, "t", gv.ID)
	if err != nil || rec.State != store.StateRunning || Paused(rec) || len(rt.restored) != 1 {
		t.Fatalf("resume of a paused sandbox: %v, %s paused %v, restored %v; want running, not paused, restored", err, rec.State, Paused(rec), rt.restored)
	}
	if rec, err = f.Pause(ctx, "t", gv.ID, MemoryDropped); err != nil || Paused(rec) || rt.pauses != 1 {
		t.Errorf("pause dropping memory: %v, paused %v, %d runtime pauses; want a stop", err, Paused(rec), rt.pauses)
	}

	nat, _, err := f.Create(ctx, "t", api.CreateSandbox{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Pause(ctx, "t", nat.ID, MemoryRequired); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("pause of a native sandbox with memory required: %v, want ErrInvalid", err)
	}
	if rec, _ := f.Get(ctx, "t", nat.ID); rec.State != store.StateRunning {
		t.Errorf("a refused pause left the sandbox %s, want running", rec.State)
	}
	rec, err = f.Pause(ctx, "t", nat.ID, MemoryIfKept)
	if err != nil || rec.State != store.StateStopped || Paused(rec) || rt.pauses != 1 {
		t.Errorf("pause of a native sandbox: %v, %s paused %v, %d runtime pauses; want stopped with the disk only", err, rec.State, Paused(rec), rt.pauses)
	}
	if _, _, err := f.Create(ctx, "t", api.CreateSandbox{Isolation: "firecracker"}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("create with an unknown isolation: %v, want ErrInvalid", err)
	}
}

// TestForkN: copies of a running gvisor sandbox come from one memory
// fork; of a native one, from disk forks; the count is checked, the
// quota counts every copy, and a refused fork leaves nothing.
func TestForkN(t *testing.T) {
	ctx := context.Background()
	f, rt, _ := newMemFleet(t)
	gv, _, err := f.Create(ctx, "t", api.CreateSandbox{Isolation: "gvisor", Labels: map[string]string{"app": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, -1, api.MaxForks + 1, 1000} {
		if _, err := f.ForkN(ctx, "t", gv.ID, n); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("fork of %d copies: %v, want ErrInvalid", n, err)
		}
	}
	kids, err := f.ForkN(ctx, "t", gv.ID, 3)
	if err != nil || len(kids) != 3 {
		t.Fatalf("fork of 3: %v, %d copies", err, len(kids))
	}
	if len(rt.memoryForks) != 1 || rt.memoryForks[0] != 3 || rt.diskForks != 0 {
		t.Errorf("runtime forks: memory %v, disk %d; want one memory fork of 3", rt.memoryForks, rt.diskForks)
	}
	for _, k := range kids {
		got, err := f.Get(ctx, "t", k.ID)
		if err != nil || got.State != store.StateRunning || Isolation(got) != sandbox.IsolationGVisor || got.Spec.Labels["app"] != "x" {
			t.Errorf("copy %s: %v, %s %s labels %v; want a running gvisor sandbox with the parent's labels", k.ID, err, got.State, Isolation(got), got.Spec.Labels)
		}
	}
	if _, err := f.ForkN(ctx, "t", gv.ID, 2); err != nil {
		t.Fatal(err)
	}
	if len(rt.memoryForks) != 2 {
		t.Errorf("a second fork: %d memory forks, want 2", len(rt.memoryForks))
	}

	nat, _, err := f.Create(ctx, "t", api.CreateSandbox{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.ForkN(ctx, "t", nat.ID, 2); err != nil || rt.diskForks != 2 {
		t.Errorf("fork of a native sandbox: %v, %d disk forks; want 2", err, rt.diskForks)
	}

	if err := f.cfg.Store.SetQuota(ctx, "t", store.Quota{Sandboxes: 12}); err != nil {
		t.Fatal(err)
	}
	before, _ := rt.List(ctx)
	if _, err := f.ForkN(ctx, "t", gv.ID, 4); !errors.Is(err, ErrQuota) {
		t.Errorf("fork of 4 with room for 2: %v, want ErrQuota", err)
	}
	if after, _ := rt.List(ctx); len(after) != len(before) {
		t.Errorf("a refused fork left sandboxes: %d before, %d after", len(before), len(after))
	}
}

// TestDeadlinePausesWithMemory: a gvisor sandbox whose deadline pauses
// it with its memory (E2B's autoPause) gives the runtime a later
// deadline, so that the fleet pauses it first; past its deadline it is
// paused with its memory, and traffic's Wake restores it.
func TestDeadlinePausesWithMemory(t *testing.T) {
	ctx := context.Background()
	f, rt, move := newMemFleet(t)
	rec, sess, err := f.CreateLabeled(ctx, "t", api.CreateSandbox{Isolation: "gvisor", TTLSeconds: 60, OnExpire: store.ExpireStop}, map[string]string{ExpireMemoryLabel: "1"})
	if err != nil {
		t.Fatal(err)
	}
	in, err := sess.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if in.Spec.TTL <= time.Minute {
		t.Errorf("the runtime's TTL is %v, want more than the record's 1m (the fleet pauses first)", in.Spec.TTL)
	}
	move(2 * time.Minute)
	if !f.Due(rec) {
		t.Fatal("the sandbox is not Due past its deadline")
	}
	got, resumed, err := f.Wake(ctx, "t", rec.ID, time.Hour)
	if err != nil || !resumed || got.State != store.StateRunning || rt.pauses != 1 || len(rt.restored) != 1 {
		t.Errorf("wake past the deadline: %v resumed %v %s, %d pauses, restored %v; want paused with memory then restored",
			err, resumed, got.State, rt.pauses, rt.restored)
	}

	// A pause that fails at the deadline is a stop: the deadline holds,
	// the disk is kept.
	rt.mu.Lock()
	rt.failPause = true
	rt.mu.Unlock()
	move(2 * time.Hour)
	got, resumed, err = f.Wake(ctx, "t", rec.ID, time.Hour)
	if err != nil || !resumed || got.State != store.StateRunning || rt.pauses != 1 || len(rt.restored) != 1 {
		t.Errorf("wake past the deadline when the pause fails: %v resumed %v %s, %d pauses, restored %v; want stopped and started again",
			err, resumed, got.State, rt.pauses, rt.restored)
	}
	rt.mu.Lock()
	rt.failPause = false
	rt.mu.Unlock()

	// Without the mark (autoPauseMemory false), or on native, the
	// deadline stops it.
	plain, _, err := f.Create(ctx, "t", api.CreateSandbox{Isolation: "gvisor", TTLSeconds: 60, OnExpire: store.ExpireStop})
	if err != nil {
		t.Fatal(err)
	}
	move(2 * time.Minute)
	if _, _, err := f.Wake(ctx, "t", plain.ID, time.Hour); err != nil || rt.pauses != 1 {
		t.Errorf("wake of a gvisor sandbox without the mark: %v, %d pauses; want a stop (1 pause, the first sandbox's)", err, rt.pauses)
	}
}
