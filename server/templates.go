package server

import "net/http"

func (s *Server) templateRoutes() {
	s.handle("GET /v1/templates", s.listTemplates)
}

// listTemplates serves the templates sandboxes can be made from (the
// server's, shown to every team; names and ages only).
func (s *Server) listTemplates(w http.ResponseWriter, r *http.Request, c *caller) {
	list, err := s.fleet.Templates(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, list)
}
