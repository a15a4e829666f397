package app

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/cove-sandbox/cove/internal/app/runtimes"
	"github.com/cove-sandbox/cove/server"
	"github.com/cove-sandbox/cove/store"
	"github.com/cove-sandbox/cove/store/postgres"
	"github.com/cove-sandbox/cove/store/sqlite"
)

// ErrNotAllowed is a local key mint refused: the caller may not write the
// server's data directory.
var ErrNotAllowed = errors.New("not allowed")

// MintAdminKey makes a new admin key in the store of a `cove serve` data
// directory, opened directly (a running server sees the key at once), and
// returns its secret and id. It is the way back in when every admin key is
// lost, so it is for root or the owner of dir (the user cove serve runs
// as) only, and it never makes a store where there was none. With a
// postgres:// storeURL (cove serve --store), the key is made in that
// database instead, and dir plays no part: whoever holds the database's
// password may.
func MintAdminKey(ctx context.Context, dir, storeURL, name string) (secret, id string, err error) {
	if err := CheckStore(storeURL); err != nil {
		return "", "", err
	}
	var st store.Store
	where := ""
	if IsPostgres(storeURL) {
		where = postgres.Redact(storeURL)
		st, err = OpenStore(ctx, storeURL, "")
		if err != nil {
			return "", "", err
		}
	} else {
		db, err := serverDB(dir)
		if err != nil {
			return "", "", err
		}
		where = filepath.Dir(db)
		if st, err = sqlite.Open(ctx, db); err != nil {
			return "", "", fmt.Errorf("opening the server's store in %s: %w", where, err)
		}
	}
	defer st.Close()
	secret, k, err := server.MintAdminKey(ctx, st, name, time.Now())
	if err != nil {
		return "", "", fmt.Errorf("making an admin key in %s: %w", where, err)
	}
	return secret, k.ID, nil
}

// serverDB is the store file of the data directory dir, after checking
// that dir holds one and that the caller may write it.
func serverDB(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("--data %s: %w", dir, err)
	}
	fi, err := os.Stat(abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("--data %s: no such directory; give the --data of cove serve (default %s)", abs, filepath.Join(runtimes.DataDir(""), "server"))
	case errors.Is(err, fs.ErrPermission):
		return "", fmt.Errorf("--data %s: %w: permission denied; run this as root or as the user cove serve runs as", abs, ErrNotAllowed)
	case err != nil:
		return "", fmt.Errorf("--data %s: %w", abs, err)
	case !fi.IsDir():
		return "", fmt.Errorf("--data %s: not a directory; give the --data of cove serve", abs)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && os.Geteuid() != 0 && int(st.Uid) != os.Geteuid() {
		return "", fmt.Errorf("--data %s: %w: it belongs to uid %d; run this as root or as that user", abs, ErrNotAllowed, st.Uid)
	}
	db := filepath.Join(abs, "cove.db")
	// Not through a link: root opening whatever database a link in the
	// owner's directory names would write keys (and migrations) into it.
	f, err := os.OpenFile(db, os.O_RDWR|syscall.O_NOFOLLOW, 0)
	switch {
	case errors.Is(err, syscall.ELOOP):
		return "", fmt.Errorf("--data %s: cove.db is a symbolic link; cove serve's store is a regular file: give the directory that holds it", abs)
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("--data %s holds no Cove server data (no cove.db); give the --data of cove serve, or start cove serve there once (it prints the first admin key)", abs)
	case errors.Is(err, fs.ErrPermission):
		return "", fmt.Errorf("--data %s: %w: cannot write cove.db; run this as root or as the user cove serve runs as", abs, ErrNotAllowed)
	case err != nil:
		return "", fmt.Errorf("--data %s: %w", abs, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return "", fmt.Errorf("--data %s: cove.db is not a regular file; give the --data of cove serve", abs)
	}
	return db, nil
}
