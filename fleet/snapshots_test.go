package fleet

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/sandboxtest/fake"
	"github.com/cove-sandbox/cove/store"
)

// TestSnapshotsAcrossHosts: replicas on two hosts (one PostgreSQL, a
// data directory each) serve each other's snapshots: one made through
// the first is downloaded, with a range, and restored through the
// second, and deleted through it; neither data directory holds it
// (PostgreSQL does).
func TestSnapshotsAcrossHosts(t *testing.T) {
	ctx := context.Background()
	db := stores["postgres"](t)
	t.Cleanup(func() { db.Close() })
	if err := db.CreateTeam(ctx, store.Team{ID: "t", Name: "t", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	rt := fake.New()
	var reps [2]*Fleet
	var dirs [2]string
	for i := range reps {
		dirs[i] = t.TempDir()
		f, err := New(Config{Runtime: rt, Store: db, DataDir: dirs[i], Lease: db, Holder: []string{"a", "b"}[i]})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		reps[i] = f
	}
	rec, sess, err := reps[0].Create(ctx, "t", api.CreateSandbox{})
	if err != nil {
		t.Fatal(err)
	}
	if err := sess.WriteFile(ctx, sandbox.DefaultRoot+"/kept.txt", strings.NewReader("made on host a"), 0o644); err != nil {
		t.Fatal(err)
	}
	sn, err := reps[0].Snapshot(ctx, "t", rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	_, blob, err := reps[1].OpenSnapshot(ctx, "t", sn.ID)
	if err != nil {
		t.Fatalf("the other host opening the snapshot: %v", err)
	}
	if blob.Size() != sn.Size || !tarHolds(t, blob, "kept.txt") {
		t.Errorf("the other host's download: size %d (recorded %d), or kept.txt missing", blob.Size(), sn.Size)
	}
	blob.Close()
	restored, err := reps[1].Restore(ctx, "t", sn.ID, api.CreateSandbox{})
	if err != nil {
		t.Fatalf("restoring on the other host: %v", err)
	}
	_, rs, err := reps[1].Session(ctx, "t", restored.ID)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rs.ReadFile(ctx, sandbox.DefaultRoot+"/kept.txt")
	if err != nil {
		t.Fatalf("the restored sandbox's file: %v", err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if string(got) != "made on host a" {
		t.Errorf("restored kept.txt: %q", got)
	}
	for i, dir := range dirs {
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Errorf("host %d's data directory holds %v: snapshots belong in PostgreSQL", i, ents)
		}
	}
	if err := reps[1].DeleteSnapshot(ctx, "t", sn.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := reps[0].OpenSnapshot(ctx, "t", sn.ID); err == nil {
		t.Errorf("a snapshot deleted through one host still opens through the other")
	}
}

// tarHolds reports whether the tar r holds a file named name.
func tarHolds(t *testing.T, r io.Reader, name string) bool {
	t.Helper()
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return false
		}
		if err != nil {
			t.Fatalf("reading the snapshot's tar: %v", err)
		}
		if strings.TrimPrefix(h.Name, "./") == name {
			return true
		}
	}
}
