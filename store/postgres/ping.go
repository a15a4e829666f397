package postgres

import "context"

// Ping checks that the database answers a query: a connection from the
// pool (a new one when the server restarted) and one round trip.
func (s *Store) Ping(ctx context.Context) error {
	var one int
	return s.pool.QueryRow(ctx, `SELECT 1`).Scan(&one)
}
