package app

import (
	"github.com/cove-sandbox/cove/store"
	"github.com/cove-sandbox/cove/store/sqlite"
)

// sharedLease is the lease `cove serve` replicas elect through: the
// store's, when several servers share it (PostgreSQL); for SQLite only
// when replicas says several processes on this host share its file
// (`cove serve --replicas`): otherwise the file is one server's, which
// needs no lease. Every server on a shared store takes part: a second
// replica started with no flag still runs no second lifecycle loop.
func sharedLease(st store.Store, replicas bool) store.Leaser {
	if _, ok := st.(*sqlite.Store); ok && !replicas {
		return nil
	}
	return st
}
