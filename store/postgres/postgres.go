// Package postgres keeps the Cove server's records (store.Store) in
// PostgreSQL, for several `cove serve` replicas sharing one database. It
// uses github.com/jackc/pgx/v5 with a connection pool (pgxpool).
//
// How it is set up, and why:
//
//   - The same semantics as store/sqlite, checked by the same contract
//     tests (store/storetest). Times are BIGINT columns of UTC unix
//     nanoseconds, NULL for the zero time.Time, as in SQLite: they
//     round-trip exactly, which timestamptz (microseconds) would not.
//     Text columns that order pages use COLLATE "C" (byte order, as
//     SQLite), whatever the database's locale.
//   - Durable: every write is a transaction committed with the server's
//     synchronous_commit (on by default), so an acknowledged write is in
//     the write-ahead log on disk and survives a killed server.
//   - Several processes: every read-modify-write is one statement with
//     its condition in it (an upsert whose WHERE keeps a record in its
//     team, an UPDATE ... WHERE last_activity < $1, greatest() for a run's
//     last event) or a transaction whose rows are locked (the label copy
//     of a sandbox is rewritten under the sandbox row's lock). A write
//     that meets a deadlock or a serialization failure is retried.
//   - The schema is versioned in code (migrate.go), applied at Open in one
//     transaction under an advisory lock, so replicas starting at once
//     migrate one after the other; a newer schema is refused.
//   - Leases (store.Leaser) use the database's clock, now(), never the
//     caller's, so a replica whose clock is wrong cannot steal a lease.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
	"github.com/cove-sandbox/cove/store/internal/check"
)

var (
	_ store.Store  = (*Store)(nil)
	_ store.Leaser = (*Store)(nil)
)

// Store is a store.Store in a PostgreSQL database. It is safe for
// concurrent use, by several processes too.
type Store struct {
	pool *pgxpool.Pool
	// now is the clock for the times the store makes itself (a key's last
	// use, its revocation, a sandbox's deletion); tests replace it. Leases
	// do not use it.
	now func() time.Time
	// swept is when this process last deleted expired idempotency keys
	// (unix nanoseconds of now).
	swept atomic.Int64
}

// Open connects to the database at url (postgres://user:password@host:
// port/db?sslmode=...; see pgx's ParseConfig for every form) and brings
// its schema up to date. Errors never show the password.
func Open(ctx context.Context, url string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("%w: the PostgreSQL URL does not parse (%v); want postgres://user:password@host:5432/database?sslmode=require", sandbox.ErrInvalid, redactErr(err, url))
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("opening PostgreSQL store %s: %w", Redact(url), err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("%w: cannot reach PostgreSQL at %s: %v; is the server running and the URL right?", sandbox.ErrUnavailable, Redact(url), redactErr(err, url))
	}
	s := &Store{pool: pool, now: time.Now}
	if err := migrate(ctx, pool, migrations); err != nil {
		pool.Close()
		return nil, fmt.Errorf("opening PostgreSQL store %s: %w", Redact(url), err)
	}
	return s, nil
}

// Redact is a connection URL without its password, fit for logs and
// errors.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		return "(a URL that does not parse)"
	}
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
	}
	q := u.Query()
	if q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// redactErr is err's message with the URL's password, if any, masked:
// pgx masks it already, this is the second lock.
func redactErr(err error, raw string) string {
	msg := err.Error()
	if u, perr := url.Parse(raw); perr == nil {
		if p, ok := u.User.Password(); ok && p != "" {
			msg = strings.ReplaceAll(msg, p, "xxxxx")
		}
		if p := u.Query().Get("password"); p != "" {
			msg = strings.ReplaceAll(msg, p, "xxxxx")
		}
	}
	return msg
}

// Close closes the pool's connections.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// write runs fn in a transaction and commits it if fn returns nil. A
// deadlock or serialization failure (another replica's transaction)
// rolls it back and runs it again, a few times.
func (s *Store) write(ctx context.Context, fn func(tx pgx.Tx) error) error {
	for attempt := 0; ; attempt++ {
		err := pgx.BeginFunc(ctx, s.pool, fn)
		if err == nil || attempt >= 4 || !retryable(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(attempt+1) * 5 * time.Millisecond):
		}
	}
}

func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

// Errors.

// wrap adds what was being done to an unexpected error, and maps a
// constraint PostgreSQL enforced to its sentinel (the checks before each
// write make that rare; it is the backstop). An unreachable server is
// ErrUnavailable.
func wrap(err error, format string, args ...any) error {
	if err == nil || errors.Is(err, sandbox.ErrNotFound) || errors.Is(err, sandbox.ErrExist) || errors.Is(err, sandbox.ErrInvalid) {
		return err
	}
	doing := fmt.Sprintf(format, args...)
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "23505": // unique_violation
			return fmt.Errorf("%s: %w (%v)", doing, sandbox.ErrExist, err)
		case "23503": // foreign_key_violation
			return fmt.Errorf("%s: %w: the team or sandbox it belongs to (%v)", doing, sandbox.ErrNotFound, err)
		case "23514", "23502", "22021", "22P05", "22001", "22003": // check, not null, bad characters (a NUL), too long, out of range
			return fmt.Errorf("%s: %w (%v)", doing, sandbox.ErrInvalid, err)
		}
		return fmt.Errorf("%s: %w", doing, err)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w", doing, err)
	}
	if unreachable(err) {
		return fmt.Errorf("%s: %w: %w", doing, sandbox.ErrUnavailable, err)
	}
	return fmt.Errorf("%s: %w", doing, err)
}

// unreachable says whether err is the database server out of reach: no
// connection could be made, or one broke (a restarting server). The
// API answers 503 for these, and keeps their detail (host names,
// socket paths) from tenants.
func unreachable(err error) bool {
	var ce *pgconn.ConnectError
	var ne net.Error
	return errors.As(err, &ce) || errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		pgconn.SafeToRetry(err) || pgconn.Timeout(err)
}

// Times.

// nanos is t as a column value: NULL for the zero time.
func nanos(t time.Time) *int64 {
	if t.IsZero() {
		return nil
	}
	n := t.UnixNano()
	return &n
}

func nanosPtr(t *time.Time) *int64 {
	if t == nil {
		return nil
	}
	return nanos(*t)
}

func fromNanos(n *int64) time.Time {
	if n == nil {
		return time.Time{}
	}
	return time.Unix(0, *n).UTC()
}

func fromNanosPtr(n *int64) *time.Time {
	if n == nil {
		return nil
	}
	t := fromNanos(n)
	return &t
}

// scanner is a pgx.Row or pgx.Rows.
type scanner interface{ Scan(dest ...any) error }

// args numbers query arguments: add returns the placeholder ($n) of v.
type args []any

func (a *args) add(v any) string {
	*a = append(*a, v)
	return fmt.Sprintf("$%d", len(*a))
}

// teamClause adds the condition that keeps only teamID's rows, or none
// for "" (any team: the server's own background work).
func (a *args) teamClause(teamID string) string {
	if teamID == "" {
		return ""
	}
	return " AND team_id = " + a.add(teamID)
}

// mustChange turns an UPDATE or DELETE that matched no row into
// ErrNotFound for what.
func mustChange(tag pgconn.CommandTag, err error, what string) error {
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return check.NotFound(what)
	}
	return nil
}

// teamExists returns ErrNotFound if there is no team id.
func teamExists(ctx context.Context, tx pgx.Tx, id string) error {
	var one int
	err := tx.QueryRow(ctx, `SELECT 1 FROM teams WHERE id = $1`, id).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return check.NotFound("team " + id)
	}
	return err
}
