package pgtest

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestServer: a server starts, takes a row, keeps it through a SIGKILL
// and a restart, and leaves nothing behind when stopped.
func TestServer(t *testing.T) {
	s := Start(t)
	ctx := t.Context()
	u, err := s.CreateDatabase(ctx, "smoke")
	if err != nil {
		t.Fatal(err)
	}
	exec := func(q string) {
		t.Helper()
		c, err := pgx.Connect(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	exec(`CREATE TABLE t (x int); INSERT INTO t VALUES (42)`)
	s.Kill()
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	exec(`DO $$ BEGIN IF (SELECT x FROM t) <> 42 THEN RAISE 'lost'; END IF; END $$`)
	s.Stop()
	if _, err := os.Stat(s.Dir); !os.IsNotExist(err) {
		t.Errorf("%s is still there after Stop: %v", s.Dir, err)
	}
}
