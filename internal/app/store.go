package app

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
	"github.com/cove-sandbox/cove/store/postgres"
	"github.com/cove-sandbox/cove/store/sqlite"
)

// StoreFlagUsage is the help of the --store flag of the commands that
// open the server's store.
const StoreFlagUsage = `where the server keeps its records: "sqlite" (cove.db in --data) or a PostgreSQL URL postgres://USER:PASSWORD@HOST:5432/DB?sslmode=require, which several cove serve replicas may share ($COVE_STORE; default sqlite)`

// IsPostgres says whether a --store value names PostgreSQL.
func IsPostgres(spec string) bool {
	return strings.HasPrefix(spec, "postgres://") || strings.HasPrefix(spec, "postgresql://")
}

// CheckStore validates a --store value without opening it: ErrInvalid
// with what to give instead. The error never repeats the value, which
// may hold a password.
func CheckStore(spec string) error {
	if spec == "" || spec == "sqlite" || IsPostgres(spec) {
		return nil
	}
	scheme, _, ok := strings.Cut(spec, "://")
	if !ok {
		scheme = "that value"
	} else {
		scheme += "://"
	}
	return fmt.Errorf("%w: --store %s is not a store Cove knows: give sqlite or postgres://USER:PASSWORD@HOST:5432/DB", sandbox.ErrInvalid, scheme)
}

// OpenStore opens the store a --store value names: SQLite in dataDir's
// cove.db for "" or "sqlite", else the PostgreSQL database of the URL. A
// bad URL or an unreachable server is a clear error without the
// password.
func OpenStore(ctx context.Context, spec, dataDir string) (store.Store, error) {
	if err := CheckStore(spec); err != nil {
		return nil, err
	}
	if IsPostgres(spec) {
		st, err := postgres.Open(ctx, spec)
		if err != nil {
			return nil, fmt.Errorf("--store: %w", err)
		}
		return st, nil
	}
	return sqlite.Open(ctx, filepath.Join(dataDir, "cove.db"))
}
