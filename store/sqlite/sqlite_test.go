package sqlite

import (
	"database/sql"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store/internal/check"
)

// t0 has nanoseconds and a zone other than UTC, to show that times
// round-trip exactly (time.Equal) and not only to the second or in UTC.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.FixedZone("CET", 3600))

func newStore(t *testing.T) *Store {
	t.Helper()
	return openAt(t, filepath.Join(t.TempDir(), "cove.db"))
}

// openAt opens the store at path and closes it when the test ends.
func openAt(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(t.Context(), path)
	if err != nil {
		t.Fatalf("Open(%q): %v", path, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// checkErr fails the test unless err wraps want (nil: no error) and its
// message has every part of msg.
func checkErr(t *testing.T, err, want error, msg ...string) {
	t.Helper()
	if want == nil {
		if err != nil {
			t.Fatalf("got error %v, want none", err)
		}
		return
	}
	if !errors.Is(err, want) {
		t.Fatalf("got error %v, want one wrapping %q", err, want)
	}
	for _, m := range msg {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("got error %q, want it to mention %q", err, m)
		}
	}
}

func schemaVersions(t *testing.T, path string) []int {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT version FROM schema_version ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var vs []int
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		vs = append(vs, v)
	}
	return vs
}

func TestOpenSetsUpConnections(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	for _, tc := range []struct {
		db     *sql.DB
		pragma string
		want   string
	}{
		{s.w, "journal_mode", "wal"},
		{s.w, "synchronous", "2"}, // FULL
		{s.w, "foreign_keys", "1"},
		{s.w, "busy_timeout", "10000"},
		{s.r, "query_only", "1"},
		{s.r, "busy_timeout", "5000"},
	} {
		var got string
		if err := tc.db.QueryRowContext(ctx, "PRAGMA "+tc.pragma).Scan(&got); err != nil {
			t.Fatalf("PRAGMA %s: %v", tc.pragma, err)
		}
		if got != tc.want {
			t.Errorf("PRAGMA %s: got %q, want %q", tc.pragma, got, tc.want)
		}
	}
	if got := s.w.Stats().MaxOpenConnections; got != 1 {
		t.Errorf("writer pool: got %d connections at most, want 1", got)
	}
	// The readers must not write, even by mistake.
	_, err := s.r.ExecContext(ctx, `CREATE TABLE x (y INTEGER)`)
	if err == nil {
		t.Errorf("a reader connection created a table")
	}
}

func TestOpenMakesFileOwnerOnly(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "cove.db")
	openAt(t, path)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o600 {
		t.Errorf("got mode %v, want 0600 (the file holds port tokens)", got)
	}
}

func TestOpenBadPath(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"", ":memory:"} {
		_, err := Open(t.Context(), path)
		checkErr(t, err, sandbox.ErrInvalid)
	}
	_, err := Open(t.Context(), filepath.Join(t.TempDir(), "no", "such", "dir", "cove.db"))
	if err == nil {
		t.Errorf("Open in a missing directory: got no error")
	}
}

func TestOpenPathWithURIChars(t *testing.T) {
	t.Parallel()
	// A '?' or '#' in the path must not be taken for URI parameters.
	dir := filepath.Join(t.TempDir(), "a?b#c%20d")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "cove.db")
	s := openAt(t, path)
	if err := s.CreateTeam(t.Context(), teamA); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + "-wal"); err != nil {
		t.Errorf("no WAL next to the database at %s: %v", path, err)
	}
}

func TestMigrationsIdempotentOnReopen(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "cove.db")
	for range 3 {
		s, err := Open(t.Context(), path)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	got := schemaVersions(t, path)
	if len(got) != len(migrations) || got[len(got)-1] != len(migrations) {
		t.Errorf("got schema versions %v, want 1..%d once each", got, len(migrations))
	}
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "cove.db")
	s, err := Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	// A newer cove migrated this file one step further.
	if _, err := s.w.Exec(`INSERT INTO schema_version (version, applied_at) VALUES (?, 0)`, len(migrations)+1); err != nil {
		t.Fatal(err)
	}
	s.Close()

	_, err = Open(t.Context(), path)
	checkErr(t, err, errNewerSchema, "schema version", "newer cove")
}

// TestMigrateKeepsData opens a file made at schema version 1, with a
// sandbox in it, with the current code.
func TestMigrateKeepsData(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "cove.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := migrate(ctx, db, migrations[:1]); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO teams VALUES ('team-a', 'A', 0, 0, 0, 1)`,
		`INSERT INTO sandboxes VALUES ('sb-1', 'team-a', '{"labels":{"k":"v"}}', 'running', '', 5, NULL, NULL, NULL, 0, 'stop', NULL)`,
		`INSERT INTO sandbox_labels VALUES ('sb-1', 'k', 'v')`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()

	s := openAt(t, path)
	if got := schemaVersions(t, path); len(got) != len(migrations) {
		t.Errorf("got schema versions %v, want 1..%d", got, len(migrations))
	}
	got, err := s.GetSandbox(ctx, "team-a", "sb-1")
	checkErr(t, err, nil)
	if got.Spec.Labels["k"] != "v" || !got.CreatedAt.Equal(time.Unix(0, 5)) {
		t.Errorf("sandbox after the upgrade: %+v", got)
	}
	checkErr(t, s.DeleteSandbox(ctx, "sb-1"), nil)
}

func TestMigrateIsAtomic(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "m.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := t.Context()
	steps := []string{`CREATE TABLE a (x INTEGER)`}
	if err := migrate(ctx, db, steps); err != nil {
		t.Fatal(err)
	}
	// Step 2 works, step 3 fails: neither may stay.
	steps = append(steps, `CREATE TABLE b (x INTEGER)`, `CREATE TABLE a (x INTEGER)`)
	if err := migrate(ctx, db, steps); err == nil || !strings.Contains(err.Error(), "schema version 3") {
		t.Fatalf("migrate with a failing step 3: got %v, want an error naming version 3", err)
	}
	var v int
	if err := db.QueryRow(`SELECT max(version) FROM schema_version`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	if v != 1 {
		t.Errorf("after a failed migration: got version %d, want 1", v)
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM sqlite_schema WHERE name = 'b'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("table b of the failed migration exists")
	}
	// Fixed, it applies once.
	steps[2] = `CREATE TABLE c (x INTEGER)`
	for range 2 {
		if err := migrate(ctx, db, steps); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.QueryRow(`SELECT count(*) FROM schema_version`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Errorf("got %d versions recorded, want 3", n)
	}
}

func TestTimeRoundTrip(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		t    time.Time
	}{
		{"zero", time.Time{}},
		{"nanoseconds and a zone", t0},
		{"epoch", time.Unix(0, 0)},
		{"before the epoch", time.Date(1969, 12, 31, 23, 59, 59, 999999999, time.UTC)},
		{"latest", time.Unix(0, math.MaxInt64)},
		{"earliest", time.Unix(0, math.MinInt64)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := check.Time("t", tc.t); err != nil {
				t.Fatal(err)
			}
			var n sql.NullInt64
			if v := nanos(tc.t); v != nil {
				n = sql.NullInt64{Int64: v.(int64), Valid: true}
			}
			if got := fromNanos(n); !got.Equal(tc.t) || got.IsZero() != tc.t.IsZero() {
				t.Errorf("got %v, want %v", got, tc.t)
			}
		})
	}
	for _, bad := range []time.Time{
		time.Date(2263, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		checkErr(t, check.Time("deadline", bad), sandbox.ErrInvalid, "deadline", "1678-2262")
	}
}
