package storetest

import (
	"context"
	"errors"
	"testing"
)

// testPing: an open store answers; a cancelled ctx is an error, not an
// answer (a readiness check must not pass on a context that ended).
func (h *harness) testPing(t *testing.T) {
	s := h.newStore(t)
	if err := s.Ping(t.Context()); err != nil {
		t.Errorf("Ping of an open store: %v", err)
	}
	if err := s.Ping(ctxCancelled(t)); !errors.Is(err, context.Canceled) {
		t.Errorf("Ping with a cancelled ctx: got %v, want context.Canceled", err)
	}
}
