// Package sqlite keeps the Cove server's records (store.Store) in one
// SQLite database file. It uses modernc.org/sqlite, a pure-Go SQLite, so
// cove stays one static binary without cgo.
//
// How it is set up, and why:
//
//   - WAL journal: readers do not block the writer nor it them, so API
//     reads (a key lookup on every request, listings) go on while usage is
//     metered and sandboxes change state.
//   - synchronous=FULL, not NORMAL: with WAL, NORMAL syncs the log only at
//     checkpoints, so a power loss or kernel crash (not a process crash)
//     can roll back the last commits. store.Store promises that a
//     committed write survives a crash, and some writes cannot be redone
//     after one: an API key whose secret was shown once, the record of a
//     Kubernetes pod that kept running while the server's host went down.
//     FULL costs one fsync of the WAL per commit (about half a
//     millisecond here, see the benchmarks), which caps the writer near
//     two thousand commits a second. The writes that would come with every
//     request are therefore rate-limited: a key's last use (KeyByHash) at
//     most once a minute, a sandbox's activity (TouchSandbox) once a
//     second.
//   - One writer: every write runs in a transaction on a pool of exactly
//     one connection, so concurrent writers of this process queue in
//     database/sql, which honours their ctx, instead of polling in
//     SQLite's busy handler; they never see SQLITE_BUSY from each other.
//     Its transactions BEGIN IMMEDIATE (_txlock=immediate), so a writer in
//     another process (a second cove on the same file) makes this one wait
//     up to busy_timeout at BEGIN, where waiting is safe, rather than fail
//     at the upgrade from read to write lock mid-transaction, where SQLite
//     returns SQLITE_BUSY at once because waiting could deadlock.
//   - Reads use a separate pool of query_only connections, each query in
//     its own snapshot.
//   - foreign_keys on: a key, sandbox, snapshot or usage row cannot point
//     at a team that does not exist, and deleting a sandbox deletes its
//     ports and labels in the same transaction.
//   - The schema is versioned in code (migrate.go); Open upgrades an older
//     file and refuses a newer one.
//
// Times are INTEGER columns of UTC unix nanoseconds, the zero time.Time
// is NULL: they round-trip exactly (time.Equal), order as integers, and
// cover the years 1678 to 2262; a time outside that is ErrInvalid.
// Durations are INTEGER nanoseconds. A sandbox's Spec is stored as JSON;
// its labels are also copied to a table so that listing by label uses an
// index instead of parsing every spec.
//
// The file holds port tokens, so Open creates it readable by its owner
// only (SQLite gives the -wal and -shm files the same mode).
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
)

var _ store.Store = (*Store)(nil)

// Store is a store.Store in one SQLite file. It is safe for concurrent
// use.
type Store struct {
	// w is the single write connection (see the package doc); r reads.
	w, r *sql.DB
	// now is the clock for the times the store makes itself (a key's last
	// use, its revocation, a sandbox's deletion); tests replace it.
	now func() time.Time
	// swept is when this process last deleted expired idempotency keys
	// (unix nanoseconds of now).
	swept atomic.Int64

	// stmtMu guards stmts, the prepared read statements by query text.
	stmtMu sync.Mutex
	stmts  map[string]*sql.Stmt
}

const (
	// writeBusyTimeout bounds how long a write waits for another process
	// holding the write lock. Writes within this process never wait here.
	writeBusyTimeout = 10 * time.Second
	// readBusyTimeout bounds a read's wait, which happens only while
	// another connection recovers the WAL after a crash.
	readBusyTimeout = 5 * time.Second
)

// Open opens the database at path, creating it if needed, and brings its
// schema up to date. A database written by a newer cove, with a schema
// this code does not know, is refused. path is a file name, not a URI,
// and not ":memory:" (the writer and the readers are separate
// connections and must share one file).
func Open(ctx context.Context, path string) (*Store, error) {
	if path == "" || path == ":memory:" {
		return nil, fmt.Errorf("%w: sqlite store needs a file path, got %q", sandbox.ErrInvalid, path)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("opening store %s: %w", path, err)
	}
	// Create the file ourselves so its mode is 0600: it holds port tokens.
	f, err := os.OpenFile(abs, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening store: %w", err)
	}
	f.Close()

	s := &Store{now: time.Now}
	s.w, err = sql.Open("sqlite", dsn(abs, writeBusyTimeout, url.Values{
		"_pragma": {"journal_mode(WAL)", "synchronous(FULL)", "foreign_keys(ON)"},
		"_txlock": {"immediate"},
	}))
	if err != nil {
		return nil, fmt.Errorf("opening store %s: %w", abs, err)
	}
	s.w.SetMaxOpenConns(1)
	s.w.SetMaxIdleConns(1)
	s.w.SetConnMaxLifetime(0)
	s.w.SetConnMaxIdleTime(0)

	// journal_mode=WAL can fail quietly (a file system without shared
	// memory for the -shm file); without WAL, readers would block writes.
	var mode string
	if err := s.w.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		s.w.Close()
		return nil, fmt.Errorf("opening store %s: %w", abs, err)
	}
	if mode != "wal" {
		s.w.Close()
		return nil, fmt.Errorf("opening store %s: journal mode is %q, not wal; is it on a network file system?", abs, mode)
	}
	if err := migrate(ctx, s.w, migrations); err != nil {
		s.w.Close()
		return nil, fmt.Errorf("opening store %s: %w", abs, err)
	}

	s.r, err = sql.Open("sqlite", dsn(abs, readBusyTimeout, url.Values{
		"_pragma": {"query_only(ON)", "synchronous(FULL)"},
	}))
	if err != nil {
		s.w.Close()
		return nil, fmt.Errorf("opening store %s: %w", abs, err)
	}
	n := max(4, runtime.GOMAXPROCS(0))
	s.r.SetMaxOpenConns(n)
	s.r.SetMaxIdleConns(n)
	if err := s.r.PingContext(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("opening store %s: %w", abs, err)
	}
	return s, nil
}

// dsn makes a modernc.org/sqlite data source name for the file at abs.
// It is a file: URI so that a '?' or '#' in the path is escaped, not taken
// for parameters.
func dsn(abs string, busy time.Duration, q url.Values) string {
	q["_pragma"] = append(q["_pragma"], fmt.Sprintf("busy_timeout(%d)", busy.Milliseconds()))
	u := url.URL{Scheme: "file", Path: abs, RawQuery: q.Encode()}
	return u.String()
}

// Close closes the database. The last connection to close checkpoints the
// WAL into the main file.
func (s *Store) Close() error {
	s.stmtMu.Lock()
	for _, st := range s.stmts {
		st.Close()
	}
	s.stmts = nil
	s.stmtMu.Unlock()
	return errors.Join(s.r.Close(), s.w.Close())
}

// write runs fn in a transaction on the write connection and commits it
// if fn returns nil.
func (s *Store) write(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// Errors.

// wrap adds what was being done to an unexpected error. The errors this
// package makes itself (not found, exists, invalid) already name their
// object and pass through as they are. A constraint SQLite enforced is
// mapped to its sentinel; the checks before each write should make that
// rare, it is the backstop.
func wrap(err error, format string, args ...any) error {
	if err == nil || errors.Is(err, sandbox.ErrNotFound) || errors.Is(err, sandbox.ErrExist) || errors.Is(err, sandbox.ErrInvalid) {
		return err
	}
	doing := fmt.Sprintf(format, args...)
	var se *msqlite.Error
	if errors.As(err, &se) {
		switch se.Code() {
		case sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY, sqlite3.SQLITE_CONSTRAINT_UNIQUE:
			return fmt.Errorf("%s: %w (%v)", doing, sandbox.ErrExist, err)
		case sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY:
			return fmt.Errorf("%s: %w: the team or sandbox it belongs to (%v)", doing, sandbox.ErrNotFound, err)
		case sqlite3.SQLITE_CONSTRAINT_CHECK, sqlite3.SQLITE_CONSTRAINT_NOTNULL:
			return fmt.Errorf("%s: %w (%v)", doing, sandbox.ErrInvalid, err)
		}
	}
	return fmt.Errorf("%s: %w", doing, err)
}

// Times.

// nanos is t as a column value: NULL for the zero time. t must have
// passed checkTime.
func nanos(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixNano()
}

// nanosPtr is nanos for an optional time.
func nanosPtr(t *time.Time) any {
	if t == nil {
		return nil
	}
	return nanos(*t)
}

// fromNanos is the inverse of nanos.
func fromNanos(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return time.Unix(0, n.Int64).UTC()
}

// fromNanosPtr is fromNanos for an optional time.
func fromNanosPtr(n sql.NullInt64) *time.Time {
	if !n.Valid {
		return nil
	}
	t := fromNanos(n)
	return &t
}

// scanner is a *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

// teamClause returns the condition and arguments that keep only teamID's
// rows, or none for "" (any team: the server's own background work).
func teamClause(teamID string) (string, []any) {
	if teamID == "" {
		return "", nil
	}
	return " AND team_id = ?", []any{teamID}
}

// Reads go through prepared statements, kept per query text: preparing
// (parsing the SQL) cost more than running the query on the hot paths
// (the API key and the sandbox record of every request).
func (s *Store) stmt(ctx context.Context, q string) (*sql.Stmt, error) {
	s.stmtMu.Lock()
	defer s.stmtMu.Unlock()
	if st, ok := s.stmts[q]; ok {
		return st, nil
	}
	st, err := s.r.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	if s.stmts == nil {
		s.stmts = map[string]*sql.Stmt{}
	}
	// Queries with built-up conditions (list filters) have many texts;
	// bound the cache rather than keep each.
	if len(s.stmts) < 256 {
		s.stmts[q] = st
	}
	return st, nil
}

func (s *Store) queryRow(ctx context.Context, q string, args ...any) *sql.Row {
	st, err := s.stmt(ctx, q)
	if err != nil {
		return s.r.QueryRowContext(ctx, q, args...)
	}
	return st.QueryRowContext(ctx, args...)
}

func (s *Store) query(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	st, err := s.stmt(ctx, q)
	if err != nil {
		return s.r.QueryContext(ctx, q, args...)
	}
	return st.QueryContext(ctx, args...)
}
