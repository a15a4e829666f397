package server

import "net/http"

// openapi serves the OpenAPI document. (Being written.)
func (s *Server) openapi(w http.ResponseWriter, r *http.Request) {}
