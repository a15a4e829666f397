package server

import (
	"errors"
	"net/http"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/server/internal/idempotency"
)

// answerIdempotent answers a create whose Idempotency-Key was refused
// (err) or already made sandbox id: that sandbox as it is now, 201 as
// the first answer was, marked replayed.
func (s *Server) answerIdempotent(w http.ResponseWriter, r *http.Request, c *caller, id string, err error) {
	if err != nil {
		s.failIdempotent(w, r, err)
		return
	}
	rec, err := s.fleet.Get(r.Context(), c.team, id)
	if errors.Is(err, sandbox.ErrNotFound) {
		key, _ := idempotency.Read(r)
		err = idempotency.Gone(key, id)
	}
	if err != nil {
		s.failIdempotent(w, r, err)
		return
	}
	idempotency.Replayed(w)
	writeJSON(w, http.StatusCreated, s.view(rec))
}

// failIdempotent answers an idempotency refusal with its own status and
// code, any other error as fail does.
func (s *Server) failIdempotent(w http.ResponseWriter, r *http.Request, err error) {
	if ie, ok := errors.AsType[*idempotency.Error](err); ok {
		writeError(w, r, ie.Status, ie.Code, ie.Message)
		return
	}
	s.fail(w, r, err)
}
