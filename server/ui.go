package server

import "github.com/cove-sandbox/cove/server/ui"

// uiRoutes serves the web UI (package ui): the page at / and its assets
// under /ui/. They are registered on the mux directly, not with route:
// they are not part of the API, so not in its OpenAPI document, and need
// no key (the page asks for one and sends it to /v1 itself).
func (s *Server) uiRoutes() {
	h := ui.Handler()
	s.mux.Handle("GET /{$}", h)
	s.mux.Handle("GET /ui/", h)
	s.mux.Handle("GET /favicon.ico", h)
}
