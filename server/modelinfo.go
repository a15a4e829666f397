package server

import "net/http"

// modelInfo is GET /v1/model: the model the caller's team's runs use by
// default and whether one is configured, so a client can say so before
// a run fails.
func (s *Server) modelInfo(w http.ResponseWriter, r *http.Request, c *caller) {
	info, err := s.runs.ModelInfo(r.Context(), c.team)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, info)
}
