package runs_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/agent/model/fake"
	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/runs"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/hostproc/hostproctest"
	"github.com/cove-sandbox/cove/store"
	"github.com/cove-sandbox/cove/store/postgres"
	"github.com/cove-sandbox/cove/store/postgres/pgtest"
	"github.com/cove-sandbox/cove/store/sqlite"
)

// cutLease is one replica's way to the shared leases; cut, every call
// fails, as for a replica cut off from its store.
type cutLease struct {
	store.Leaser
	cut atomic.Bool
}

func (c *cutLease) AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (bool, error) {
	if c.cut.Load() {
		return false, errors.New("cut off from the store")
	}
	return c.Leaser.AcquireLease(ctx, name, holder, ttl)
}

func (c *cutLease) ReleaseLease(ctx context.Context, name, holder string) error {
	if c.cut.Load() {
		return errors.New("cut off from the store")
	}
	return c.Leaser.ReleaseLease(ctx, name, holder)
}

// replicaServices returns two started services over one store (SQLite or
// PostgreSQL, as storeKind says) and
// one hostproc runtime, sharing their leases (1 s past a renew), as
// two `cove serve` replicas; and each one's way to the leases.
func replicaServices(t *testing.T, storeKind string, model *fake.Server) (a, b *runs.Service, la, lb *cutLease) {
	t.Helper()
	dir, err := os.MkdirTemp("", "runs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	rt := hostproctest.New(t)
	var st store.Store
	if storeKind == "postgres" {
		st, err = postgres.Open(context.Background(), pgtest.NewDatabase(t))
	} else {
		st, err = sqlite.Open(context.Background(), filepath.Join(dir, "cove.db"))
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateTeam(context.Background(), store.Team{ID: "alpha", Name: "alpha", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	shared := store.Leaser(st) // the store's own lease, as replicas use it
	boxes := &boxes{rt: rt, st: st}
	var svcs []*runs.Service
	var leases []*cutLease
	for _, holder := range []string{"a", "b"} {
		l := &cutLease{Leaser: shared}
		s, err := runs.New(runs.Config{Store: st, Sandboxes: boxes, Models: models, DataDir: filepath.Join(dir, "data"),
			Model: runs.ModelConfig{BaseURL: model.URL, APIKey: "sk-server", DefaultModel: "test-model"},
			Lease: l, Holder: holder, LeaseTTL: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		s.Start()
		svcs, leases = append(svcs, s), append(leases, l)
	}
	t.Cleanup(func() {
		for _, s := range svcs {
			s.Close()
		}
		ctx := context.Background()
		if infos, err := rt.List(ctx); err == nil {
			for _, in := range infos {
				rt.Delete(ctx, in.ID)
			}
		}
		st.Close()
	})
	return svcs[0], svcs[1], leases[0], leases[1]
}

// waitStatus polls s's view of a run until it is in status.
func waitStatus(t *testing.T, s *runs.Service, id, status string) api.Run {
	t.Helper()
	var run api.Run
	for end := time.Now().Add(2 * time.Minute); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		var err error
		if run, err = s.Get(context.Background(), "alpha", id); err != nil {
			t.Fatal(err)
		}
		if run.Status == status {
			return run
		}
	}
	t.Fatalf("run %s is still %s, want %s", id, run.Status, status)
	return run
}

// TestReplicaRunOnPeer: a run working on one replica is seen working
// from the other (its record and its log, followed), a message there is
// refused, and a cancel there stops it where it works.
func TestReplicaRunOnPeer(t *testing.T) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) { replicaRunOnPeer(t, kind) })
	}
}

func replicaRunOnPeer(t *testing.T, kind string) {
	model := fake.NewServer(t, fake.Text("never").WithDelay(time.Hour).Forever())
	a, b, _, _ := replicaServices(t, kind, model)
	ctx := context.Background()
	run, err := a.Create(ctx, "alpha", api.CreateRun{Input: "wait"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := waitStatus(t, b, run.ID, api.RunRunning); got.Input != "wait" {
		t.Errorf("b's view of a's run: %+v", got)
	}
	if _, err := b.Message(ctx, "alpha", run.ID, "more"); !errors.Is(err, sandbox.ErrState) {
		t.Errorf("a message on b while the run works on a: %v, want ErrState", err)
	}
	feed, err := b.Events(ctx, "alpha", run.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer feed.Close()
	batch, err := feed.Next(ctx)
	for err == nil && len(batch.Events) == 0 && batch.Working {
		<-batch.Changed
		batch, err = feed.Next(ctx)
	}
	if err != nil || len(batch.Events) == 0 || batch.Events[0].Type != string(runs.EventUserMessage) {
		t.Errorf("b following a's run: %+v, %v; want its first event", batch, err)
	}

	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	got, err := b.Cancel(cctx, "alpha", run.ID)
	if err != nil || got.Status != api.RunCancelled {
		t.Fatalf("b cancelling a's run: %+v, %v", got, err)
	}
	if got := waitStatus(t, a, run.ID, api.RunCancelled); got.Error == "" {
		t.Errorf("a's view after the cancel: %+v", got)
	}
}

// TestReplicaRunFailover: a replica cut off from the store mid-run stops
// working on it and writes nothing more; the other takes the run over
// from its last turn and finishes it, and its log is one line of events.
func TestReplicaRunFailover(t *testing.T) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) { replicaRunFailover(t, kind) })
	}
}

func replicaRunFailover(t *testing.T, kind string) {
	var cutA func()
	model := fake.NewServer(t, fake.Func(func(r *fake.Request) fake.Turn {
		switch r.N {
		case 1:
			return fake.Call("exec_command", `{"cmd":"echo turn one"}`)
		case 2: // on a, which is cut off now
			cutA()
			return fake.Text("stale").WithDelay(time.Hour)
		}
		return fake.Text("finished")
	}).Forever())
	a, b, la, _ := replicaServices(t, kind, model)
	cutA = func() { la.cut.Store(true) }
	ctx := context.Background()
	run, err := a.Create(ctx, "alpha", api.CreateRun{Input: "go"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := waitStatus(t, b, run.ID, api.RunIdle)
	if got.Output != "finished" {
		t.Errorf("the run b took over: %+v", got)
	}
	la.cut.Store(false)
	if got := waitStatus(t, a, run.ID, api.RunIdle); got.Output != "finished" {
		t.Errorf("a's view of the run b finished: %+v", got)
	}
	evs, _ := settle(t, b, "alpha", run.ID, 0)
	for i, ev := range evs {
		if ev.Seq != int64(i+1) {
			t.Fatalf("event %d is numbered %d: the log is not one line", i+1, ev.Seq)
		}
		if bytes.Contains(ev.Data, []byte(`stale`)) {
			t.Errorf("the cut replica's answer reached the log: %s", ev.Data)
		}
	}

	// b follows the idle run; a follow-up on a starts a segment there,
	// and b's feed hears of it.
	feed, err := b.Events(ctx, "alpha", run.ID, int64(len(evs)))
	if err != nil {
		t.Fatal(err)
	}
	defer feed.Close()
	if _, err := a.Message(ctx, "alpha", run.ID, "once more"); err != nil {
		t.Fatal(err)
	}
	for {
		batch, err := feed.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(batch.Events) > 0 {
			if batch.Events[0].Type != string(runs.EventUserMessage) {
				t.Errorf("b's feed after a's follow-up: %+v, want the message first", batch.Events[0])
			}
			break
		}
		select {
		case <-batch.Changed:
		case <-time.After(2 * time.Minute):
			t.Fatal("b's feed never heard of the follow-up on a")
		}
	}
}
