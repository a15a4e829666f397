package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
)

// Exposed ports: the records the ports proxy lets callers in by.

// ExposePort exposes port of team's sandbox id (running or not). A
// private port gets a token; exposing an exposed port again keeps it, so
// links already handed out go on working; making it public drops the
// token, and making it private again mints a new one. created is false
// when the port was exposed already.
func (f *Fleet) ExposePort(ctx context.Context, team, id string, port int, public bool) (p store.Port, created bool, err error) {
	rec, err := f.Get(ctx, team, id)
	if err != nil {
		return p, false, err
	}
	p = store.Port{SandboxID: rec.ID, Port: port, Public: public, CreatedAt: f.cfg.Now()}
	created = true
	old, err := f.cfg.Store.GetPort(ctx, rec.ID, port)
	switch {
	case err == nil:
		created, p.CreatedAt, p.Token = false, old.CreatedAt, old.Token
	case !errors.Is(err, sandbox.ErrNotFound):
		return p, false, err
	}
	switch {
	case p.Public:
		p.Token = ""
	case p.Token == "":
		p.Token = newToken()
	}
	if err := f.cfg.Store.PutPort(ctx, p); err != nil {
		return p, false, fmt.Errorf("exposing port %d of sandbox %s: %w", port, rec.ID, err)
	}
	return p, created, nil
}

// Ports lists the exposed ports of team's sandbox id, tokens included.
func (f *Fleet) Ports(ctx context.Context, team, id string) ([]store.Port, error) {
	rec, err := f.Get(ctx, team, id)
	if err != nil {
		return nil, err
	}
	return f.cfg.Store.ListPorts(ctx, rec.ID)
}

// UnexposePort stops exposing port of team's sandbox id. Connections
// already open through the proxy are not cut.
func (f *Fleet) UnexposePort(ctx context.Context, team, id string, port int) error {
	rec, err := f.Get(ctx, team, id)
	if err != nil {
		return err
	}
	if err := f.cfg.Store.DeletePort(ctx, rec.ID, port); err != nil {
		return fmt.Errorf("port %d of sandbox %s is not exposed: %w", port, rec.ID, err)
	}
	return nil
}

// Port returns the exposure of port of sandbox id, whichever team's: for
// the proxy, which lets a caller in by the port's token.
func (f *Fleet) Port(ctx context.Context, id string, port int) (store.Port, error) {
	return f.cfg.Store.GetPort(ctx, id, port)
}

// newToken returns 128 random bits, hex.
func newToken() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// NewID returns prefix + 12 random hex digits.
func NewID(prefix string) string {
	b := make([]byte, 6)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}
