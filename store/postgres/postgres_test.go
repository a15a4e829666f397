package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
	"github.com/cove-sandbox/cove/store/postgres/pgtest"
	"github.com/cove-sandbox/cove/store/storetest"
)

// One PostgreSQL server for the package's tests, a database each.
func TestMain(m *testing.M) { pgtest.Main(m) }

// TestContract runs the store contract suite (store/storetest), which
// store/sqlite passes too, on a real PostgreSQL.
func TestContract(t *testing.T) {
	storetest.Run(t, storetest.Target{
		NewDB: func(t *testing.T) string { return pgtest.NewDatabase(t) },
		Open: func(t *testing.T, url string, now func() time.Time) (store.Store, error) {
			s, err := Open(t.Context(), url)
			if err != nil {
				return nil, err
			}
			s.now = now
			return s, nil
		},
		KeptDeleted: func(t *testing.T, s store.Store) int {
			var n int
			if err := s.(*Store).pool.QueryRow(t.Context(), `SELECT count(*) FROM deleted_sandboxes`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		},
	})
}

func openT(t *testing.T, url string) *Store {
	t.Helper()
	s, err := Open(t.Context(), url)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func versions(t *testing.T, s *Store) []int {
	t.Helper()
	rows, err := s.pool.Query(t.Context(), `SELECT version FROM schema_migrations ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	vs, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		t.Fatal(err)
	}
	return vs
}

// TestMigrateReplicasAtOnce: eight replicas open a new database at the
// same moment; all succeed, and every step is applied once.
func TestMigrateReplicasAtOnce(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	var wg sync.WaitGroup
	stores := make([]*Store, 8)
	errs := make([]error, 8)
	for i := range stores {
		wg.Go(func() { stores[i], errs[i] = Open(t.Context(), url) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("replica %d: Open: %v", i, err)
			continue
		}
		defer stores[i].Close()
	}
	if t.Failed() {
		return
	}
	if got := versions(t, stores[0]); len(got) != len(migrations) || got[len(got)-1] != len(migrations) {
		t.Errorf("schema versions %v, want 1..%d once each", got, len(migrations))
	}
}

// TestOpenRefusesNewerSchema: a database a newer cove migrated further
// is refused, with what to do.
func TestOpenRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	s := openT(t, url)
	if _, err := s.pool.Exec(t.Context(), `INSERT INTO schema_migrations (version, applied_at) VALUES ($1, 0)`, len(migrations)+1); err != nil {
		t.Fatal(err)
	}
	_, err := Open(t.Context(), url)
	if !errors.Is(err, errNewerSchema) || !strings.Contains(err.Error(), "newer cove") {
		t.Errorf("Open of a newer schema: got %v, want errNewerSchema", err)
	}
}

// TestMigrateIsAtomic: a failing step leaves the database as it was;
// fixed, the steps apply once.
func TestMigrateIsAtomic(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	s := openT(t, url)
	ctx := t.Context()
	steps := []string{`CREATE TABLE a (x int)`, `CREATE TABLE b (x int)`, `CREATE TABLE a (x int)`}
	if _, err := s.pool.Exec(ctx, `DROP TABLE schema_migrations`); err != nil {
		t.Fatal(err)
	}
	err := migrate(ctx, s.pool, steps)
	if err == nil || !strings.Contains(err.Error(), "schema version 3") {
		t.Fatalf("migrate with a failing step 3: got %v, want an error naming version 3", err)
	}
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE tablename IN ('a', 'b', 'schema_migrations')`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d tables of the failed migration exist", n)
	}
	steps[2] = `CREATE TABLE c (x int)`
	for range 2 {
		if err := migrate(ctx, s.pool, steps); err != nil {
			t.Fatal(err)
		}
	}
	if got := versions(t, s); len(got) != 3 {
		t.Errorf("versions %v, want 3", got)
	}
}

// TestOpenErrors: a bad URL is ErrInvalid, an unreachable server
// ErrUnavailable; neither error shows the password.
func TestOpenErrors(t *testing.T) {
	t.Parallel()
	const pw = "s3cret-pw"
	srv := pgtest.For(t)
	for _, tc := range []struct {
		name, url string
		want      error
	}{
		{"bad url", "postgres://cove:" + pw + "@host:notaport/db", sandbox.ErrInvalid},
		{"no server", "postgres://cove:" + pw + "@127.0.0.1:1/db?connect_timeout=5", sandbox.ErrUnavailable},
		{"password parameter", "postgres://cove@127.0.0.1:1/db?password=" + pw + "&connect_timeout=5", sandbox.ErrUnavailable},
		{"no such database", srv.URL("nope") + "&password=" + pw, sandbox.ErrUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Open(t.Context(), tc.url)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if strings.Contains(err.Error(), pw) {
				t.Errorf("the error shows the password: %v", err)
			}
			t.Log(err)
		})
	}
}

// TestDurableAcrossServerKill: every write the store acknowledged is
// there after the server is killed (SIGKILL, every process of it) and
// started again, while a writer was writing.
func TestDurableAcrossServerKill(t *testing.T) {
	srv := pgtest.Start(t) // its own server: this test kills it
	ctx := t.Context()
	url, err := srv.CreateDatabase(ctx, "crash")
	if err != nil {
		t.Fatal(err)
	}
	s := openT(t, url)
	team := store.Team{ID: "team-a", CreatedAt: time.Now()}
	if err := s.CreateTeam(ctx, team); err != nil {
		t.Fatal(err)
	}
	// Four writers write until the server dies under them, killed while
	// their writes are in flight.
	var acked []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				x := store.Sandbox{ID: fmt.Sprintf("sb-%d-%05d", w, i), TeamID: team.ID, State: store.StateRunning, CreatedAt: time.Now(),
					Spec: sandbox.Spec{Labels: map[string]string{"crash": "yes", "n": fmt.Sprint(i)}}}
				if err := s.PutSandbox(context.Background(), x); err != nil {
					return // the server is gone
				}
				mu.Lock()
				acked = append(acked, x.ID)
				mu.Unlock()
			}
		})
	}
	for {
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		if n >= 100 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	srv.Kill()
	wg.Wait()
	// While it is down, calls fail as unavailable (the API's 503, whose
	// detail tenants do not see).
	if _, err := s.GetTeam(ctx, team.ID); !errors.Is(err, sandbox.ErrUnavailable) {
		t.Errorf("GetTeam with the server down: got %v, want ErrUnavailable", err)
	}
	if err := s.PutSandbox(ctx, store.Sandbox{ID: "sb-down", TeamID: team.ID, State: store.StateRunning, CreatedAt: time.Now()}); !errors.Is(err, sandbox.ErrUnavailable) {
		t.Errorf("PutSandbox with the server down: got %v, want ErrUnavailable", err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	// The store open before the crash works again once the server is
	// back (its pool replaces the dead connections): a replica need not
	// restart with its database.
	for deadline := time.Now().Add(30 * time.Second); ; {
		_, err := s.GetTeam(ctx, team.ID)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store never recovered from the server's restart: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := s.PutSandbox(ctx, store.Sandbox{ID: "sb-after", TeamID: team.ID, State: store.StateRunning, CreatedAt: time.Now()}); err != nil {
		t.Errorf("a write through the old store after the restart: %v", err)
	}
	s2 := openT(t, url)
	mu.Lock()
	defer mu.Unlock()
	if len(acked) < 100 {
		t.Fatalf("only %d writes acknowledged before the kill", len(acked))
	}
	page, _, err := s2.ListSandboxes(ctx, store.SandboxFilter{Labels: map[string]string{"crash": "yes"}, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, x := range page {
		have[x.ID] = true
	}
	for _, id := range acked {
		if !have[id] {
			t.Errorf("sandbox %s was acknowledged and is gone after the kill", id)
		}
	}
	// Each write whole or not at all: every sandbox of the writers has
	// its labels (sb-after, written after the restart, has none).
	all, _, err := s2.ListSandboxes(ctx, store.SandboxFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != len(page)+1 {
		t.Errorf("%d sandboxes, %d of the writers' with their labels: a write was torn", len(all), len(page))
	}
	t.Logf("%d writes acknowledged, %d sandboxes with their labels after the restart", len(acked), len(page))
}

func TestRedact(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"postgres://u:pw@h:5432/db?sslmode=require": "postgres://u:xxxxx@h:5432/db?sslmode=require",
		"postgres://u@h/db?password=pw":             "postgres://u@h/db?password=xxxxx",
		"postgres://h/db":                           "postgres://h/db",
		"host=h password=pw":                        "(a URL that does not parse)",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestBlobs(t *testing.T) {
	storetest.RunBlobs(t, func(t *testing.T) store.Blobs { return openT(t, pgtest.NewDatabase(t)) })
}

// A blob put by one replica is read, and deleted, by another: snapshots
// made through one server are served by the others.
func TestBlobsAcrossReplicas(t *testing.T) {
	url := pgtest.NewDatabase(t)
	a, b := openT(t, url), openT(t, url)
	want := bytes.Repeat([]byte("cove"), 600_000) // over two chunks
	if _, err := a.PutBlob(t.Context(), "snapshots/t/s.tar", bytes.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	blob, err := b.OpenBlob(t.Context(), "snapshots/t/s.tar")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(blob)
	blob.Close()
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the other replica read %d bytes (%v), want %d", len(got), err, len(want))
	}
	if err := b.DeleteBlob(t.Context(), "snapshots/t/s.tar"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.OpenBlob(t.Context(), "snapshots/t/s.tar"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("after the other's delete: %v, want ErrNotFound", err)
	}
	var chunks int
	a.pool.QueryRow(t.Context(), `SELECT count(*) FROM blob_chunks`).Scan(&chunks)
	if chunks != 0 {
		t.Errorf("%d chunks left after the delete", chunks)
	}
}
