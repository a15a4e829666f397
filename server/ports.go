package server

import "net/http"

// portRoutes: exposed ports and the /p/ proxy. (Being written.)
func (s *Server) portRoutes() {}

// servePortByHost proxies requests for {port}-{id}.{domain}; false when
// the request is not for a port.
func (s *Server) servePortByHost(w http.ResponseWriter, r *http.Request) bool { return false }
