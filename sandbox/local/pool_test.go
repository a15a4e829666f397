package local

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/local/cgroup"
	"github.com/cove-sandbox/cove/sandbox/local/internal/host"
	"github.com/cove-sandbox/cove/sandbox/local/internal/sbdir"
)

// TestPool: with a warm pool, Create hands out a sandbox started ahead,
// made into the caller's spec (env, limits, TTL), and the pool refills.
func TestPool(t *testing.T) {
	rt, dir := newPoolRuntime(t, 0)
	ctx := context.Background()
	first, err := rt.Create(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	rt.WaitPool()
	pooled := pooledIDs(t, dir)
	if len(pooled) != 1 {
		t.Fatalf("after a create with Pool 1: %d pooled sandboxes, want 1", len(pooled))
	}
	infos, _ := rt.List(ctx)
	if len(infos) != 1 || infos[0].ID != first.ID() {
		t.Errorf("List = %v, want only %s (pooled sandboxes are hidden)", infos, first.ID())
	}

	s, err := rt.Create(ctx, sandbox.Spec{Env: map[string]string{"FROM_SPEC": "yes"}, TTL: 2 * time.Second, Limits: sandbox.Limits{MemoryBytes: 128 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	if s.ID() != pooled[0] {
		t.Errorf("Create gave %s, want the pooled %s", s.ID(), pooled[0])
	}
	var out strings.Builder
	if _, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "printenv", Args: []string{"FROM_SPEC"}, Stdout: &out}); err != nil || out.String() != "yes\n" {
		t.Errorf("env from the spec in a pooled sandbox: %q %v", out.String(), err)
	}
	st, _ := sbdir.Read(rt.dir(s.ID()))
	root, err := host.CgroupRoot(st)
	if err == nil {
		g, err := root.Load(s.ID())
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		// The limit binds the commands (in their own group on v1).
		file := filepath.Join(g.Path(cgroup.Memory), host.WorkGroup, "memory.limit_in_bytes")
		if root.Version() == cgroup.V2 {
			file = filepath.Join(g.Path(""), "memory.max")
		}
		data, _ := os.ReadFile(file)
		if n, _ := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64); n != 128<<20 {
			t.Errorf("memory limit of the claimed sandbox: %q, want %d", data, 128<<20)
		}
	}
	rt.WaitPool()
	if again := pooledIDs(t, dir); len(again) != 1 || again[0] == s.ID() {
		t.Errorf("after the claim the pool holds %v, want one new sandbox", again)
	}
	// The TTL given at claim time is enforced.
	deadline := time.Now().Add(20 * time.Second)
	for {
		info, err := s.Info(ctx)
		if err == nil && info.State == sandbox.StateStopped {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the claimed sandbox's TTL did not stop it")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func pooledIDs(t *testing.T, dir string) []string {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		if st, err := sbdir.Read(filepath.Join(dir, e.Name())); err == nil && st.Pooled {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestPoolWithDisk: with PoolDiskBytes the pool serves creates that ask
// for exactly that disk, and the claimed sandbox's disk limit holds.
func TestPoolWithDisk(t *testing.T) {
	const diskBytes = 64 << 20
	rt, dir := newPoolRuntime(t, diskBytes)
	ctx := context.Background()
	// A create without a disk is not served from this pool.
	plain, err := rt.Create(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	rt.WaitPool()
	pooled := pooledIDs(t, dir)
	if len(pooled) != 1 || plain.ID() == pooled[0] {
		t.Fatalf("pooled %v, plain %s", pooled, plain.ID())
	}
	s, err := rt.Create(ctx, sandbox.Spec{Limits: sandbox.Limits{DiskBytes: diskBytes, CPUs: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if s.ID() != pooled[0] {
		t.Errorf("Create with the pool's disk gave %s, want the pooled %s", s.ID(), pooled[0])
	}
	st, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "sh", Args: []string{"-c", "head -c 100000000 /dev/zero > big"}})
	if err != nil || st.Success() {
		t.Errorf("writing 100 MB to a 64 MB pooled disk: %+v %v, want a failure", st, err)
	}
}

// newPoolRuntime is a runtime with a pool of one (of diskBytes disks),
// emptied and removed when the test ends.
func newPoolRuntime(t *testing.T, diskBytes int64) (*Runtime, string) {
	t.Helper()
	needRoot(t)
	exe, _ := os.Executable()
	dir, err := os.MkdirTemp("", "cp")
	if err != nil {
		t.Fatal(err)
	}
	rt, err := New(Config{Dir: dir, Command: []string{exe}, Env: []string{"GORACE=atexit_sleep_ms=0"}, Pool: 1, PoolDiskBytes: diskBytes})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		rt.DrainPool(context.Background())
		infos, _ := rt.List(context.Background())
		for _, in := range infos {
			rt.Delete(context.Background(), in.ID)
		}
		os.RemoveAll(dir)
	})
	return rt, dir
}
