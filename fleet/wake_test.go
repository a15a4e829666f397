package fleet

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/sandboxtest/fake"
	"github.com/cove-sandbox/cove/store"
	"github.com/cove-sandbox/cove/store/sqlite"
)

// countingRuntime counts resumes.
type countingRuntime struct {
	*fake.Runtime
	resumes atomic.Int32
}

func (r *countingRuntime) Resume(ctx context.Context, id string) (sandbox.Session, error) {
	r.resumes.Add(1)
	return r.Runtime.Resume(ctx, id)
}

// TestWake: many Wakes at once of a stopped sandbox start it once, each
// returning it running with the deadline asked for; a running one is
// left as it is; one past a deadline that stops it (Due) is stopped and
// started afresh.
func TestWake(t *testing.T) {
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
	rt := &countingRuntime{Runtime: fake.New()}
	f, err := New(Config{Runtime: rt, Store: db, DataDir: dir, NoLifecycle: true, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	rec, _, err := f.Create(ctx, "t", api.CreateSandbox{TTLSeconds: 60, OnExpire: store.ExpireStop})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Stop(ctx, "t", rec.ID); err != nil {
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	var started atomic.Int32
	for range 8 {
		wg.Go(func() {
			got, resumed, err := f.Wake(ctx, "t", rec.ID, time.Hour)
			if err != nil || got.State != store.StateRunning || !got.Deadline.Equal(now.Add(time.Hour)) {
				t.Errorf("wake: %v %s until %v", err, got.State, got.Deadline)
			}
			if resumed {
				started.Add(1)
			}
		})
	}
	wg.Wait()
	if n, s := rt.resumes.Load(), started.Load(); n != 1 || s != 1 {
		t.Errorf("8 wakes at once: %d resumes, %d said they resumed; want 1", n, s)
	}

	if got, resumed, err := f.Wake(ctx, "t", rec.ID, time.Minute); err != nil || resumed || !got.Deadline.Equal(now.Add(time.Hour)) {
		t.Errorf("wake of a running sandbox: %v %v until %v, want it as it was", err, resumed, got.Deadline)
	}
	if _, _, err := f.Wake(ctx, "other", rec.ID, time.Minute); err == nil {
		t.Error("another team's wake: no error")
	}

	mu.Lock()
	now = now.Add(2 * time.Hour)
	mu.Unlock()
	before, _ := f.Get(ctx, "t", rec.ID)
	if !f.Due(before) {
		t.Fatalf("past its deadline: not due (%+v)", before)
	}
	got, resumed, err := f.Wake(ctx, "t", rec.ID, time.Hour)
	if err != nil || !resumed || got.State != store.StateRunning || !got.StartedAt.Equal(now) || rt.resumes.Load() != 2 {
		t.Errorf("wake of a due sandbox: %v %v %s started %v, want stopped and started again", err, resumed, got.State, got.StartedAt)
	}
}
