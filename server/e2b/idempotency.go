package e2b

import (
	"errors"
	"net/http"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/server/internal/idempotency"
	"github.com/cove-sandbox/cove/server/internal/web"
)

// answerIdempotent answers a create whose Idempotency-Key was refused
// (err) or already made sandbox id: that sandbox as it is now, with its
// tokens, 201 as the first answer was, marked replayed.
func (s *API) answerIdempotent(w http.ResponseWriter, r *http.Request, c *caller, id string, err error) {
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
	web.WriteJSON(w, http.StatusCreated, s.sandboxView(r, rec, rec.Spec.Labels[envdTokenLabel], rec.Spec.Labels[trafficTokenLabel]))
}

// failIdempotent answers an idempotency refusal with its status in
// E2B's error body, any other error as fail does.
func (s *API) failIdempotent(w http.ResponseWriter, r *http.Request, err error) {
	if ie, ok := errors.AsType[*idempotency.Error](err); ok {
		writeError(w, ie.Status, ie.Message)
		return
	}
	s.fail(w, r, err)
}
